-- The fused ops of the V:N:M pruning shadow (venom/shadow.h) against the
-- composition prune_vnm.lua used before them and still uses for a Conv2d or
-- on CUDA: core.vnm_shadow_linear(x, S, W, b) against linear(x, W⊙m, b)
-- (values; the gradients of x and b, and W's straight-through gradient,
-- which is the product's gradient with respect to its weight W⊙m at every
-- position; finite differences of each), core.vnm_shadow_decay_ against
-- W ⊙ ((1−m)·(−f) + 1) bit for bit; bad input changes nothing.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local sparse = require "venom.sparse"

local core = venom.core
venom.manual_seed(17)

local function maxdiff(a, b) return (a - b):abs():max():item() end
local function same(a, b) return a:ne(b):sum():item() == 0 end

-- R = 10 rows in blocks of V = 4 (the last block has 2), K = 21 inputs in
-- groups of M = 8 (the last has 5 real columns): every kind of padding.
local R, K, V, M = 10, 21, 4, 8
local W0 = venom.randn(R, K)
local S = sparse.from_dense(venom.randn(R, K), { V = V, M = M }) -- a pattern not W's own
local m = S:mask():float()
local b0 = venom.randn(R)

-- The fused op and the composition, each with fresh leaves; returns y and
-- the gradients of the loss Σ y⊙r.
local x0 = venom.randn(2, 3, K) -- leading dims are merged
local r = venom.randn(2, 3, R)
local function run(fused)
  local x, W, b = x0:clone():requires_grad_(true), W0:clone():requires_grad_(true),
    b0:clone():requires_grad_(true)
  local y
  if fused then
    y = core.vnm_shadow_linear(x, S, W, b)
  else -- the weight's value is W⊙m, its gradient reaches W unchanged
    local c = venom.no_grad(function() return W:detach() * (m * -1 + 1) end)
    y = venom.linear(x, W - c, b)
  end
  y:mul(r):sum():backward()
  return y:detach(), x.grad, W.grad, b.grad
end
local y1, dx1, dw1, db1 = run(true)
local y2, dx2, dw2, db2 = run(false)
tap.ok(maxdiff(y1, y2) < 1e-5, "forward: x·(W⊙m)ᵀ + b, to rounding")
tap.ok(maxdiff(dx1, dx2) < 1e-5, "dx = dY·(W⊙m)")
tap.ok(maxdiff(dw1, dw2) < 1e-5 and (dw1 * (m * -1 + 1)):abs():sum():item() > 0,
  "dW = dYᵀ·X at every position, nonzero outside the pattern too (straight through)")
tap.ok(maxdiff(db1, db2) < 1e-5, "db = Σ dY")
tap.ok(core.vnm_shadow_linear(x0, S, W0):shape()[3] == R and
  maxdiff(core.vnm_shadow_linear(x0, S, W0), venom.linear(x0, W0 * m)) < 1e-5, "without a bias")

-- Finite differences (central, f32, ε = 1e-2) of L = Σ y⊙r: in x and b
-- through the fused op itself; in W as the product's derivative with respect
-- to its weight at W⊙m, which the straight-through gradient is by definition.
local eps = 1e-2
local function loss_fused(x, b) return core.vnm_shadow_linear(x, S, W0, b):mul(r):sum():item() end
local function loss_at(Wm) return venom.linear(x0, Wm, b0):mul(r):sum():item() end
local function fd(f, t, i, j)
  local p, q = t:clone(), t:clone()
  p:set(i, j, p:get(i, j) + eps)
  q:set(i, j, q:get(i, j) - eps)
  return (f(p) - f(q)) / (2 * eps)
end
local worst = 0
local x2d = x0:reshape(6, K)
for _, ij in ipairs({ { 1, 1 }, { 4, 17 }, { 6, 21 } }) do
  local i, j = ij[1], ij[2]
  local num = fd(function(x) return loss_fused(x:reshape(2, 3, K), b0) end, x2d, i, j)
  worst = math.max(worst, math.abs(num - dx1:reshape(6, K):get(i, j)))
end
tap.ok(worst < 1e-2, ("finite differences of dx (worst %.2g)"):format(worst))
worst = 0
for i = 1, R, 3 do
  local p, q = b0:clone(), b0:clone()
  p:set(i, p:get(i) + eps)
  q:set(i, q:get(i) - eps)
  worst = math.max(worst, math.abs((loss_fused(x0, p) - loss_fused(x0, q)) / (2 * eps) - db1:get(i)))
end
tap.ok(worst < 1e-2, ("finite differences of db (worst %.2g)"):format(worst))
worst = 0
local inside, outside = 0, 0
local Wm = W0 * m
for i = 1, R do
  for j = 1, K, 4 do
    worst = math.max(worst, math.abs(fd(loss_at, Wm, i, j) - dw1:get(i, j)))
    if m:get(i, j) == 1 then inside = inside + 1 else outside = outside + 1 end
  end
end
tap.ok(worst < 1e-2 and inside > 0 and outside > 0,
  ("finite differences of dW at W⊙m, %d kept and %d pruned positions (worst %.2g)")
    :format(inside, outside, worst))

-- Nothing is recorded when nothing needs a gradient.
tap.ok(core.vnm_shadow_linear(x0, S, W0, b0):grad_fn() == nil and
  core.vnm_shadow_linear(x0, S, W0:clone():requires_grad_(true)):grad_fn() == "vnm_shadow_linear",
  "a graph only when an input needs a gradient")

-- The decay, bit for bit with the composition, and in place.
for _, f in ipairs({ 1e-3, 0.37, 0 }) do
  local W = W0:clone()
  local want = W0 * ((m * -1 + 1) * -f + 1)
  local ret = core.vnm_shadow_decay_(W, S, f)
  tap.ok(ret == W and same(W, want), ("decay f = %g: W⊙(1 − f·(1−m)) bit for bit"):format(f))
end

-- Bad input: a clear error, nothing changed ------------------------------------------------
local Wb = W0:clone()
local function unchanged() return same(Wb, W0) end
tap.error_like(function() core.vnm_shadow_linear(x0, S, venom.randn(R, K + 1)) end,
  "weight of shape %(10, 22%), expected %(10, 21%)", "linear: W not (R, K)")
tap.error_like(function() core.vnm_shadow_linear(venom.randn(3, K - 1), S, W0) end,
  "input of shape %(3, 20%) has 20 features", "linear: x's last dim not K")
tap.error_like(function() core.vnm_shadow_linear(x0, S, W0, venom.randn(R + 1)) end,
  "bias of shape %(11,%), expected %(10,%)", "linear: bias not (R)")
tap.error_like(function() core.vnm_shadow_linear(x0, S, W0:int()) end, "weight.*f32",
  "linear: an i32 weight")
tap.error_like(function() core.vnm_shadow_linear(x0, W0, W0) end, "expected a V:N:M sparse matrix",
  "linear: a tensor where the matrix goes")
tap.error_like(function() core.vnm_shadow_decay_(Wb, S, -0.1) end, "finite number >= 0, got %-0.1",
  "decay: f < 0")
tap.error_like(function() core.vnm_shadow_decay_(Wb, S, 0 / 0) end, "finite number >= 0",
  "decay: f NaN")
tap.error_like(function() core.vnm_shadow_decay_(Wb, S, math.huge) end, "finite number >= 0",
  "decay: f infinite")
tap.error_like(function() core.vnm_shadow_decay_(Wb, S, "a lot") end, "number expected",
  "decay: f not a number")
tap.error_like(function() core.vnm_shadow_decay_(venom.randn(K, R):t(), S, 0.1) end,
  "must be contiguous", "decay: a strided view")
tap.error_like(function() core.vnm_shadow_decay_(Wb:int(), S, 0.1) end, "weight.*f32",
  "decay: an i32 weight")
tap.error_like(function() core.vnm_shadow_decay_(venom.randn(R, K - 1), S, 0.1) end,
  "expected %(10, 21%)", "decay: W not (R, K)")
local Wg = W0:clone():requires_grad_(true)
tap.error_like(function() core.vnm_shadow_decay_(Wg, S, 0.1) end, "requires grad",
  "decay: a leaf that requires grad, with grad mode on")
tap.ok(unchanged() and same(Wg:detach(), W0), "no refused call changed the weight")

tap.done()
