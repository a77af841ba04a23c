-- nn.MoE: its output against a per-token reference (each kept token through
-- its experts one at a time, weighted); gradients of the router and the
-- input by finite differences, with tokens dropped for capacity; the DTS
-- gate goes from dense to sparse as τ falls and is top-k in eval; an
-- imbalanced batch (every token picks one expert) still trains and reports
-- its drops; V:N:M experts; bad options and NaN router logits are errors.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"

venom.manual_seed(3)

local D, H, E, T = 6, 8, 4, 20

-- The layer's output computed token by token: for each kept (token, expert)
-- of the routing r, out[t] += w[t, e] · expert_e(x[t]), w from `weights`.
local function reference(moe, x, weights, r)
  local out = venom.zeros(T, D):totable()
  local tokens, slots = r.tokens:totable(), r.slots:totable()
  local w = weights:reshape(-1):totable()
  for s = 1, #tokens do
    local t, e = tokens[s], (slots[s] - 1) % E + 1
    local y = moe.experts[e](x:narrow(1, t, 1)):reshape(-1):totable()
    for j = 1, D do out[t][j] = out[t][j] + w[slots[s]] * y[j] end
  end
  return out
end

local x = venom.randn(T, D)
for _, case in ipairs({ { k = 1, cf = math.huge }, { k = 1, cf = 0.5 }, { k = 2, cf = 0.6 } }) do
  local moe = nn.MoE(D, H, { experts = E, k = case.k, capacity_factor = case.cf })
  moe:eval()
  local got = venom.no_grad(function() return moe(x) end)
  local logits = moe.router(x)
  local r = venom.moe_route(logits, case.k, nil, case.cf)
  local weights = case.k == 1 and logits:softmax(2)
    or (logits + (r.mask:to("f32") - 1) * 1e9):softmax(2)
  local name = ("top-%d, capacity_factor %g"):format(case.k, case.cf)
  tap.ok(testutil.max_diff(got:totable(), reference(moe, x, weights, r)) < 1e-5,
    name .. ": output = Σ over kept experts of weight · expert(token)")
  tap.is(moe.stats.dropped_fraction, r.dropped / r.selected, name .. ": dropped fraction reported")
  if case.cf < 1 then tap.ok(r.dropped > 0, name .. ": tokens were dropped") end
end

-- Finite differences: loss = Σ y·R (+ the aux loss, in training mode)
-- against the router's and the input's gradients, for a Switch layer with
-- drops and for the DTS gate (its Gumbel noise made the same in every call
-- by reseeding, τ held by resetting the step count). Routing is piecewise
-- constant: a step of 1e-3 does not move it here (checked: the kept loads
-- are the same at both ends).
local function check_fd(name, moe, reset)
  local xin = venom.randn(T, D):requires_grad_(true)
  local R = venom.randn(T, D)
  local function loss_of()
    if reset then reset(moe) end
    local y = moe(xin)
    return (y * R):sum() + moe.aux_loss, moe.stats.kept
  end
  local loss = loss_of()
  local dropped = moe.stats.dropped_fraction
  loss:backward()
  local worst, moved = 0, false
  local function probe(t, i, j)
    local g = t.grad:totable()[i][j]
    local v = t:detach():totable()[i][j]
    local function at(val)
      venom.no_grad(function() t:narrow(1, i, 1):narrow(2, j, 1):fill_(val) end)
      local l, kept = venom.no_grad(loss_of)
      return l:item(), table.concat(kept, ",")
    end
    local up, k1 = at(v + 1e-3)
    local down, k2 = at(v - 1e-3)
    at(v)
    moved = moved or k1 ~= k2
    worst = math.max(worst, math.abs((up - down) / 2e-3 - g) / (1 + math.abs(g)))
  end
  for _, ij in ipairs({ { 1, 1 }, { 2, 3 }, { 4, 6 }, { 3, 2 } }) do probe(moe.router.weight, ij[1], ij[2]) end
  for _, ij in ipairs({ { 1, 1 }, { 7, 3 }, { 20, 6 } }) do probe(xin, ij[1], ij[2]) end
  tap.ok(not moved, name .. ": the routing stays put under the finite-difference steps")
  tap.ok(worst < 2e-2, ("%s: router and input gradients match finite differences (worst rel. error %.2g)")
    :format(name, worst))
  return dropped
end
local dropped = check_fd("Switch", nn.MoE(D, H, { experts = E, k = 1, capacity_factor = 0.75, alpha = 0.1 }))
tap.ok(dropped > 0, "Switch gradcheck case drops tokens")
check_fd("top-2 with z-loss", nn.MoE(D, H, { experts = E, k = 2, capacity_factor = 0.8, z_loss = 0.5 }))
check_fd("DTS", nn.MoE(D, H, { experts = E, k = 1, gate = "dts", anneal_steps = 10 }), function(m)
  m.steps = 5 -- τ halfway: 1.15
  venom.manual_seed(42)
end)

-- The aux loss against plain loops: α·E·Σ fᵢ·Pᵢ + z·mean_t (log Σ_e exp l_te)².
do
  local moe = nn.MoE(D, H, { experts = E, k = 1, alpha = 0.3, z_loss = 0.2 })
  moe(x)
  local l = moe.router(x):totable()
  local f, P, z = {}, {}, 0
  for e = 1, E do f[e], P[e] = 0, 0 end
  for t = 1, T do
    local best, sum = 1, 0
    for e = 1, E do
      if l[t][e] > l[t][best] then best = e end
      sum = sum + math.exp(l[t][e])
    end
    f[best] = f[best] + 1 / T
    for e = 1, E do P[e] = P[e] + math.exp(l[t][e]) / sum / T end
    z = z + math.log(sum) ^ 2 / T
  end
  local want = 0.2 * z
  for e = 1, E do want = want + 0.3 * E * f[e] * P[e] end
  tap.near(moe.aux_loss:item(), want, 1e-5, "aux loss = balance loss + z-loss, as plain loops compute them")
end

-- DTS: dense at τ_max, sparser as τ falls to τ_min, top-k in eval.
do
  local moe = nn.MoE(D, H, { experts = E, k = 1, gate = "dts", anneal_steps = 4 })
  local per_token, taus = {}, {}
  for step = 1, 6 do
    local y = moe(x)
    local loss = (y * y):mean() + moe.aux_loss
    loss:backward()
    per_token[step], taus[step] = moe.stats.experts_per_token, moe.stats.tau
  end
  tap.diag("DTS experts per token by step: %s", table.concat(per_token, " "))
  tap.near(taus[1], 2, 1e-12, "DTS: τ starts at tau_max")
  tap.near(taus[6], 0.3, 1e-12, "DTS: τ ends at tau_min")
  tap.ok(per_token[1] > 3.5, ("DTS: routing starts dense (%.2f experts per token of %d)"):format(per_token[1], E))
  tap.ok(per_token[6] < per_token[1], "DTS: fewer experts per token at tau_min than at tau_max")
  tap.ok(moe.router.weight.grad ~= nil, "DTS: the router gets a gradient through the Gumbel softmax")
  moe:eval()
  moe(x)
  tap.is(moe.stats.experts_per_token, 1, "DTS in eval: plain top-1")
  tap.is(moe.aux_loss, nil, "no aux loss in eval")
end

-- An imbalanced batch: every token's first choice is expert 2.
do
  local moe = nn.MoE(D, H, { experts = E, k = 1, capacity_factor = 1 })
  venom.no_grad(function()
    moe.router.weight:fill_(0)
    moe.router.weight:narrow(1, 2, 1):fill_(1)
  end)
  local xp = venom.rand(T, D) + 0.1 -- positive: expert 2's logit is the largest
  local opt = optim.SGD(moe:parameters(), { lr = 0.1 })
  local y = moe(xp)
  local loss = ((y - xp) * (y - xp)):mean() + moe.aux_loss
  opt:zero_grad()
  loss:backward()
  opt:step()
  tap.is(moe.stats.load[2], T, "imbalance: all tokens routed to expert 2")
  tap.is(moe.stats.kept[2], math.ceil(T / E), "imbalance: expert 2 keeps its capacity")
  tap.near(moe.stats.dropped_fraction, 1 - math.ceil(T / E) / T, 1e-12, "imbalance: dropped fraction reported")
  tap.is(moe.stats.balance, E, "imbalance: balance ratio max/mean = E")
  tap.ok(loss:item() == loss:item() and moe.experts[2][1].weight.grad ~= nil,
    "imbalance: the step trains (finite loss, expert 2 has a gradient)")
end

-- V:N:M experts: SparseLinear layers whose values get gradients.
do
  local moe = nn.MoE(16, 16, { experts = 2, k = 1, expert = { V = 8, M = 8 } })
  local y = moe(venom.randn(5, 16))
  ;((y * y):sum() + moe.aux_loss):backward()
  local any = false
  for _, p in ipairs(moe:parameters()) do any = any or p.grad ~= nil end
  tap.ok(tostring(moe):find("expert=8:2:8") ~= nil and any, "V:N:M experts train")
end

-- Bad input.
tap.error_like(function() nn.MoE(D, H, { experts = 0 }) end, "experts must be a positive integer, got 0", "E = 0")
tap.error_like(function() nn.MoE(D, H, { experts = 2, k = 3 }) end, "k = 3 experts per token, but there are only 2",
  "k > E")
tap.error_like(function() nn.MoE(D, H, { gate = "dts", tau_min = 3, tau_max = 2 }) end,
  "tau_min = 3 is above tau_max = 2", "τ_min > τ_max")
for _, key in ipairs({ "threshold", "tau_max", "tau_min", "anneal_steps" }) do
  tap.error_like(function() nn.MoE(D, H, { gate = "topk", [key] = 0.5 }) end,
    "nn.MoE: " .. key .. " is an option of the \"dts\" gate; gate \"topk\" does not use it",
    "a DTS-only option with the topk gate: " .. key)
end
tap.error_like(function() nn.MoE(D, H, { capacity_factor = 0 }) end, "capacity_factor must be a number > 0",
  "capacity factor 0")
tap.error_like(function() nn.MoE(D, H, { capacity_factor = 0 / 0 }) end, "capacity_factor must be", "capacity NaN")
tap.error_like(function() nn.MoE(D, H, { gate = "hash" }) end, "gate must be \"topk\" or \"dts\"", "unknown gate")
tap.error_like(function() nn.MoE(D, H, { experts = 2, k = 1 })(venom.randn(3, D + 1)) end,
  "expected an input of shape %(%.%.%., 6%)", "wrong width")
do
  local moe = nn.MoE(D, H, { experts = E })
  local bad = venom.randn(3, D)
  venom.no_grad(function() bad:narrow(1, 2, 1):fill_(0 / 0) end)
  tap.error_like(function() moe(bad) end, "scores%[2, 1%] is NaN %(token 2, expert 1%)",
    "NaN router logits: the 1-based token and expert")
end
do
  local s = venom.zeros(3, 2)
  s:narrow(1, 3, 1):narrow(2, 2, 1):fill_(0 / 0)
  tap.error_like(function() venom.moe_route(s, 1) end, "moe_route: scores%[3, 2%] is NaN %(token 3, expert 2%)",
    "moe_route: a NaN score at its 1-based position")
end
tap.error_like(function() venom.moe_route(venom.randn(3, 2), 3) end, "k = 3 experts per token, expected 1..2",
  "moe_route: k > E")
tap.error_like(function() venom.moe_route(venom.randn(3, 2), 1, nil, -1) end, "capacity_factor = %-1",
  "moe_route: capacity ≤ 0")
tap.error_like(function() venom.scatter_add_rows(venom.ones(2, 3), venom.tensor({ 1, 4 }, "i64"), nil, 3) end,
  "idx%[2%] = 4 is out of range", "scatter_add_rows: index out of range")
tap.error_like(function() venom.scatter_add_rows(venom.ones(2, 3), venom.tensor({ 1, 2 }, "i64"), venom.ones(3), 3) end,
  "weights must be 1%-d with one entry per row %(2%)", "scatter_add_rows: weights of the wrong length")

tap.done()
