-- venom.prune in vnm mode with the dense shadow (SR-STE): the forward through
-- the stage's pattern, the straight-through gradient, the decay of the
-- weights outside the pattern, re-selection from the dense weights, the
-- final compression (exactly 2 of every M per row, values and optimizer
-- state carried, the shadow dropped); the doubling progression; fisher
-- scores; bad options.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local prune = require "venom.prune"
local sparse = require "venom.sparse"
local vnm = require "venom.prune_vnm"

venom.manual_seed(5)

local pc = require "prunecheck"
local mlp, train_step, exact_pattern = pc.mlp, pc.train_step, pc.exact_pattern

local function count(t) return t:sum():item() end
local function maxdiff(a, b) return (a - b):abs():max():item() end

local teacher = venom.randn(20, 4)
local function batch(n)
  local x = venom.randn(n, 20)
  return x, x:matmul(teacher):argmax(2)
end

-- The shadow through a whole schedule -----------------------------------------------------
do
  -- 20 inputs and M = 8: the last group has 4 real columns; layer 3 has 26
  -- inputs, a last group of 2.
  local model = mlp(20, 26, 24, 4)
  local lr, lambda = 1e-2, 3
  local opt = optim.AdamW(model:parameters(), { lr = lr })
  local W1 = model[1].weight
  local g = prune.GMP(model, { optimizer = opt, pattern = "4:2:8", t0 = 2, n = 4, dt = 2,
                               decay = lambda })
  local x, y = batch(64)
  local fwd_ok, ste_ok, decay_ok, reselect_ok, dense_ok = true, true, true, true, true
  local came_back, events = false, 0
  local before_final
  for t = 1, 10 do
    train_step(model, opt, x, y)
    local L = g.layers[1]
    local pruned_before = L.pruned and L.pruned:clone()
    local w_before = W1:detach():clone()
    if t == 10 then
      before_final = { w = w_before, m = opt.state[W1].exp_avg:clone(), pruned = pruned_before }
    end
    local ev = g:step()
    if pruned_before and t < 10 then
      -- After the step, outside the pattern: W ← W − lr·λ·W; inside unchanged.
      local want = w_before * (pruned_before * (-lr * lambda) + 1)
      decay_ok = decay_ok and maxdiff(W1:detach(), want) < 1e-7
    end
    if ev and t < 10 and L.pruned then
      events = events + 1
      local mask = L.alive
      dense_ok = dense_ok and getmetatable(model[1]) == nn.Linear and model[1].weight == W1
      -- The stage's pattern is the magnitude selection of the dense weights.
      local sel = sparse.from_dense(W1:detach():abs(), { V = 4, M = L.M }):mask():float()
      reselect_ok = reselect_ok and maxdiff(sel, mask) == 0 and exact_pattern(mask, L.M)
      if pruned_before then came_back = came_back or count(pruned_before * mask) > 0 end
      -- The forward is the pattern's: x·(W⊙m)ᵀ + b (to rounding: the fused
      -- op sums the kept products in the V:N:M kernel's order).
      local xs = venom.randn(5, 20)
      local want = venom.linear(xs, W1:detach() * mask, model[1].bias:detach())
      fwd_ok = fwd_ok and maxdiff(model[1](xs), want) < 1e-5
      -- The gradient reaches all of W: that of the pattern's weight W⊙m.
      local r = venom.randn(5, 26)
      local wm = (W1:detach() * mask):requires_grad_(true)
      venom.linear(xs, wm, model[1].bias:detach()):mul(r):sum():backward()
      W1.grad = nil
      model[1](xs):mul(r):sum():backward()
      ste_ok = ste_ok and maxdiff(W1.grad, wm.grad) < 1e-6
        and count(W1.grad:ne(0):float() * L.pruned) > 0
      W1.grad = nil
    end
  end
  tap.ok(events >= 2 and dense_ok, ("during the schedule the layer stays dense (%d events)")
    :format(events))
  tap.ok(fwd_ok, "the shadow's forward is x·(W⊙m)ᵀ + b with the stage's pattern m")
  tap.ok(ste_ok, "its weight gradient is the straight-through one, nonzero outside the pattern")
  tap.ok(decay_ok, "after each step the weights outside the pattern decay by lr·λ")
  tap.ok(reselect_ok, "each event selects the stage's V:2:M pattern from all of the dense weights")
  tap.ok(came_back, "a weight outside one stage's pattern is back in the next")

  -- The last event (t = 10) compresses for good.
  local m1 = model[1]
  tap.ok(getmetatable(m1) == sparse.SparseLinear and m1.M == 8, "at the end: a 4:2:8 SparseLinear")
  local mask = m1:mask():float()
  tap.ok(exact_pattern(mask, 8) and exact_pattern(model[3]:mask():float(), 8),
    "exactly 2 of every 8 inputs per row (fewer only in a group of fewer real columns)")
  local r = g:report()
  tap.ok(r[1].nnz == 26 * 6 and r[2].nnz == 24 * (2 * 3 + 2) and r[1].sparsity == 1 - 6 / 20,
    ("report: nnz = 2·⌈K/M⌉ per row minus padding (%d and %d)"):format(r[1].nnz, r[2].nnz))
  local decayed = before_final.w * (before_final.pruned * (-lr * lambda) + 1)
  tap.ok(maxdiff(m1:to_dense(), decayed * mask) < 1e-7,
    "the kept values are the dense weights at the final pattern")
  local st = opt.state[m1.values]
  local dense_m = venom.core.vnm_from_pattern(26, 20, 4, 2, 8, m1.matrix:columns(),
    m1.matrix:indices(), st.exp_avg):to_dense()
  tap.ok(maxdiff(dense_m, before_final.m * mask) == 0 and st.step == 10,
    "AdamW's moments of the kept weights are carried into the compressed layout")
  local holds_old = false
  for _, p in ipairs(opt.params) do holds_old = holds_old or p == W1 end
  tap.ok(not holds_old and opt.state[W1] == nil and rawget(m1, "forward") == nil,
    "the shadow (dense weight and its state) is gone from the optimizer")
  for _ = 1, 5 do train_step(model, opt, x, y); g:step() end
  tap.ok(maxdiff(model[1]:mask():float(), mask) == 0, "after the schedule the pattern is fixed")
end

-- The doubling progression --------------------------------------------------------------
do
  local model = mlp(40, 24, 24, 4)
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  local g = prune.GMP(model, { optimizer = opt, pattern = "8:2:10", t0 = 3, n = 6, dt = 2,
                               progression = "doubling", shadow = false })
  local x = venom.randn(64, 40)
  local y = x:narrow(2, 1, 4):argmax(2)
  local Ms = {}
  for _ = 1, 15 do
    train_step(model, opt, x, y)
    local ev = g:step()
    if ev and ev.layers[1].pattern ~= "dense" then
      Ms[#Ms + 1] = ev.layers[1].pattern:match(":(%d+)$")
    end
  end
  -- s_t at t = 5, 7, …, 15 is 0.337, 0.563, 0.700, 0.770, 0.796, 0.8.
  tap.is(table.concat(Ms, " "), "4 8 8 10 10 10", "doubling: M = 4, 8, then the final 10")
end

-- Fisher scores ----------------------------------------------------------------------------
do
  local model = mlp(16, 16, 16, 4)
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  local g = prune.GMP(model, { optimizer = opt, pattern = "4:2:8", t0 = 4, n = 2, dt = 1,
                               score = "fisher" })
  local x = venom.randn(32, 16)
  local y = x:narrow(2, 1, 4):argmax(2)
  for _ = 1, 4 do train_step(model, opt, x, y); g:step() end
  train_step(model, opt, x, y)
  local L = g.layers[1]
  local v = opt.state[model[1].weight].exp_avg_sq
  local want = model[1].weight:detach():abs() * (v + 1e-2 * v:mean():item() + 1e-30):sqrt()
  tap.ok(maxdiff(vnm.score(g, L), want) < 1e-7, "fisher score: |w|·√(F + δ), F = Adam's v")
  local mag = model[1].weight:detach():abs()
  g:step() -- t = 5: the first event with s > 0
  local sel = sparse.from_dense(want, { V = 4, M = L.M }):mask():float()
  mag = sparse.from_dense(mag, { V = 4, M = L.M }):mask():float()
  tap.ok(L.alive and maxdiff(L.alive, sel) == 0 and maxdiff(mag, sel) > 0,
    "the pattern is chosen on the fisher scores (here not the magnitude one)")

  local m2 = mlp(16, 16, 16, 4)
  local sgd = optim.SGD(m2:parameters(), { lr = 0.1 })
  tap.error_like(function()
    prune.GMP(m2, { optimizer = sgd, pattern = "4:2:8", t0 = 1, n = 2, score = "fisher" })
  end, "prune.GMP: score = \"fisher\" needs an optimizer that keeps an average of squared "
    .. "gradients %(optim.Adam or optim.AdamW: exp_avg_sq%); this optimizer's state holds momentum_buffer",
    "fisher with SGD (no squared gradients) is refused when GMP is built")
  -- Adam before its first step has no exp_avg_sq yet: the event says so.
  local m3 = mlp(16, 16, 16, 4)
  local adam = optim.Adam(m3:parameters(), { lr = 0.1 })
  local g3 = prune.GMP(m3, { optimizer = adam, pattern = "4:2:8", t0 = 0, n = 2, score = "fisher" })
  tap.error_like(function() g3:step() end,
    "layer '1': score = \"fisher\" needs the optimizer's average of squared gradients",
    "fisher before Adam's first step is a clear error at the event")
  local line = debug.getinfo(1, "l").currentline + 1
  tap.error_like(function() g3:step() end, "^[^:]*test_prune_shadow%.lua:" .. line .. ": GMP:step",
    "and it points at the caller's line (not prune_vnm.lua)")
  -- A NaN weight under magnitude selection (prune_masks): the caller's line too.
  local m4 = mlp(16, 16, 16, 4)
  local g4 = prune.GMP(m4, { optimizer = optim.Adam(m4:parameters(), { lr = 0.1 }), pattern = "4:2:8",
                             t0 = 0, n = 2 })
  venom.no_grad(function() m4:parameters()[1]:fill_(0 / 0) end)
  line = debug.getinfo(1, "l").currentline + 1
  tap.error_like(function() g4:step() end, "^[^:]*test_prune_shadow%.lua:" .. line .. ": GMP:step: .* is nan",
    "a NaN weight: the error points at the caller's line (not prune_masks.lua)")
end

-- Bad options ----------------------------------------------------------------------------
do
  local model = mlp(16, 16, 16, 4)
  local opt = optim.SGD(model:parameters(), { lr = 0.1 })
  local function gmp(o)
    o.optimizer, o.n = opt, 2
    o.pattern = o.pattern or (o.mode == nil and "8:2:8" or nil)
    return function() prune.GMP(model, o) end
  end
  tap.error_like(gmp({ shadow = "yes" }), "shadow must be true or false, got yes", "shadow = \"yes\"")
  tap.error_like(gmp({ decay = -1 }), "decay must be a finite number >= 0, got %-1", "decay < 0")
  tap.error_like(gmp({ decay = 0 / 0 }), "decay must be a finite number >= 0", "decay = NaN")
  tap.error_like(gmp({ progression = "triple" }), "progression must be \"every\" or \"doubling\"",
    "an unknown progression")
  tap.error_like(gmp({ score = "l1" }), "score must be \"magnitude\" or \"fisher\", got l1",
    "an unknown score")
  tap.error_like(gmp({ mode = "nm", pattern = "2:4", shadow = false }),
    "shadow is an option of mode \"vnm\"", "shadow with mode nm")
end

tap.done()
