-- venom.prune: the cubic schedule against the formula, events at the right
-- steps, monotone sparsity, exact counts at each V:2:M stage and N:M /
-- unstructured mask, pruned weights staying exactly zero under AdamW, the
-- optimizer state of removed weights dropped (and that of survivors
-- carried), a short pruning run that still learns, and bad input.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local prune = require "venom.prune"

venom.manual_seed(7)
local pc = require "prunecheck"
local mlp, train_step = pc.mlp, pc.train_step

local function count(t) return t:sum():item() end

-- The dense (rows, cols) weight of layer i of a Sequential, Linear or SparseLinear.
local function weight(model, i)
  local m = model[i]
  return m.to_dense and m:to_dense() or m.weight:detach():clone()
end

-- A batch of a synthetic 4-class problem: labels from a fixed random teacher.
local teacher = venom.randn(16, 4)
local function batch(n)
  local x = venom.randn(n, 16)
  return x, x:matmul(teacher):argmax(2)
end

-- The schedule -------------------------------------------------------------------------
do
  local model = mlp(16, 16, 16, 4)
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  local s_i, s_f, t0, n, dt = 0.1, 0.8, 10, 4, 5
  local g = prune.GMP(model, { optimizer = opt, mode = "unstructured", s_i = s_i, s_f = s_f,
                               t0 = t0, n = n, dt = dt })
  local function formula(t)
    if t <= t0 then return s_i end
    if t > t0 + n * dt then return s_f end
    return s_f + (s_i - s_f) * (1 - (t - t0) / (n * dt)) ^ 3
  end
  local exact = true
  for _, t in ipairs({ 0, 9, 10, 11, 13, 15, 20, 27, 30, 31, 1000 }) do
    exact = exact and g:target(t) == formula(t)
  end
  tap.ok(exact, "target(t) is the cubic formula at steps before, inside and after the span")
  tap.near(g:target(t0 + n * dt / 2), s_f + (s_i - s_f) / 8, 1e-15,
    "halfway through, s_f + (s_i − s_f)/8")
  tap.is(g:target(t0), s_i, "s_i at t0")
  tap.is(g:target(t0 + n * dt), s_f, "s_f at t0 + n·dt")

  local x, y = batch(32)
  local steps, monotone, prev_s, prev_nnz = {}, true, 0, math.huge
  for _ = 1, 40 do
    train_step(model, opt, x, y)
    local ev = g:step()
    if ev then
      steps[#steps + 1] = ev.step
      local exact_ev = ev.sparsity == formula(ev.step) and g:sparsity() == ev.sparsity
      local nnz = 0
      for _, r in ipairs(g:report()) do nnz = nnz + r.nnz end
      monotone = monotone and exact_ev and ev.sparsity >= prev_s and nnz <= prev_nnz
      prev_s, prev_nnz = ev.sparsity, nnz
    end
  end
  tap.is(table.concat(steps, " "), "10 15 20 25 30", "events at t0, t0 + dt, …, t0 + n·dt")
  tap.ok(monotone, "each event follows the formula; sparsity and nnz never go the wrong way")
  local exact_count = true
  for _, r in ipairs(g:report()) do
    exact_count = exact_count and r.nnz == r.size - math.floor(s_f * r.size + 1e-9)
      and count(weight(model, tonumber(r.name)):ne(0)) == r.nnz
  end
  tap.ok(exact_count, "unstructured: ⌊s_f·size⌋ weights pruned per layer at the end")
end

-- vnm without the shadow: V:2:M stages, each compressed -----------------------------------
do
  -- First layer: 40 inputs; the last group of M = 7 or 9 still has 4 real
  -- columns. Second: 24 inputs, where M = 10 leaves a last group of 4, and
  -- M = 7 one of 3 (a padding column).
  local R1, K1 = 24, 40
  local model = mlp(K1, R1, 40, 4)
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  local old_w = model[1].weight
  local g = prune.GMP(model, { optimizer = opt, pattern = "8:2:10", t0 = 3, n = 6, dt = 2,
                               shadow = false })
  local x, y = batch(64)
  local xs = venom.randn(64, K1 - 16) -- widen the inputs to 40
  x = venom.cat({ x, xs }, 2)
  local zeros_before, Ms, carried = nil, {}, nil -- zeros_before: outside the last pattern
  local slots_ok, nnz_ok, exact = true, true, true
  local revived, at_zero = nil, false -- slots over weights pruned earlier, last such stage
  for t = 1, 40 do
    train_step(model, opt, x, y)
    local before
    if t == 3 + 2 then -- the first sparse event: remember AdamW's moment of the dense weight
      before = opt.state[old_w].exp_avg:clone()
    end
    local ev = g:step()
    if ev and ev.layers[1].pattern ~= "dense" then
      local M = tonumber(ev.layers[1].pattern:match(":(%d+)$"))
      Ms[#Ms + 1] = M
      for _, r in ipairs(g:report()) do
        local i = tonumber(r.name)
        local m = model[i]
        slots_ok = slots_ok and r.slots == m.out_features * 2 * math.ceil(m.in_features / M)
        nnz_ok = nnz_ok and r.nnz == m.out_features * pc.vnm_row_nnz(m.in_features, M)
          and count(weight(model, i):ne(0)) <= r.nnz
        exact = exact and pc.exact_pattern(m:mask():float(), M)
      end
      local kept = model[1]:mask():float()
      if zeros_before and M ~= Ms[#Ms - 1] then
        local back = zeros_before:mul(kept) -- in the new pattern, not in the last
        if count(back) > 0 then
          revived = back
          at_zero = count(back:mul(weight(model, 1):ne(0):float())) == 0
        end
      end
      zeros_before = kept:eq(0):float()
      if before then
        -- The new values' moments are the old dense ones at the surviving
        -- positions, moved into the compressed layout; removed ones are gone.
        local m = model[1]
        local st = opt.state[m.values]
        local dense_m = venom.core.vnm_from_pattern(R1, K1, m.V, m.N, m.M, m.matrix:columns(),
          m.matrix:indices(), st.exp_avg):to_dense()
        local alive = weight(model, 1):ne(0):float()
        carried = opt.state[old_w] == nil and st.step == 5
          and count(dense_m:sub(before:mul(alive)):abs():gt(0)) == 0
      end
    end
  end
  -- s_t at t = 5, 7, …, 15 is 0.337, 0.563, 0.700, 0.770, 0.796, 0.8.
  tap.is(table.concat(Ms, " "), "4 5 7 9 10 10", "M follows the smallest M with 1 − 2/M ≥ s_t")
  tap.ok(slots_ok, "stored values per layer: rows · 2·⌈K/M⌉ at each M")
  tap.ok(nnz_ok, "report nnz at each stage is 2·⌈K/M⌉ per row minus padding (and bounds the "
    .. "nonzeros)")
  tap.ok(exact, "each row keeps exactly 2 weights in every group of M at each stage")
  tap.ok(revived and at_zero, "some stage's slots land on weights pruned earlier: they come "
    .. "back at 0")
  tap.ok(carried == true, "optimizer: old parameter's state dropped, survivors' moments carried")
  local found_old, found_new = false, false
  for _, p in ipairs(opt.params) do
    found_old = found_old or p == old_w
    found_new = found_new or p == model[1].values
  end
  tap.ok(not found_old and found_new, "the optimizer updates the new values, not the old weight")
  tap.ok(getmetatable(model[1]) == require("venom.sparse").SparseLinear
    and getmetatable(model[5]) == nn.Linear,
    "hidden layers became SparseLinear, the classifier stayed")
  -- 20 more steps: the weights that came back train like the others (a
  -- few may sit in the row of a unit that ReLU keeps dead).
  for _ = 1, 20 do train_step(model, opt, x, y); g:step() end
  local moved = revived and count(revived:mul(weight(model, 1):ne(0):float())) or 0
  tap.ok(revived and moved >= 0.5 * count(revived), ("the weights that came back train "
    .. "(%d of %d nonzero now)"):format(moved, revived and count(revived) or 0))
end

-- Masked modes: weights, moments and the structure of the masks ----------------------------
for _, mode in ipairs({ "nm", "unstructured" }) do
  local model = mlp(16, 32, 24, 4)
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  local o = { optimizer = opt, mode = mode, t0 = 2, n = 4, dt = 2 }
  if mode == "nm" then o.pattern = "2:8" else o.s_f = 0.75 end
  local g = prune.GMP(model, o)
  local x, y = batch(64)
  for _ = 1, 10 do train_step(model, opt, x, y); g:step() end
  local zeros = weight(model, 3):eq(0)
  for _ = 1, 30 do train_step(model, opt, x, y); g:step() end
  local w = model[3].weight
  tap.is(count(zeros:mul(w:detach():ne(0))), 0,
    mode .. ": pruned weights exactly 0 after 30 AdamW steps")
  local st, zf = opt.state[w], zeros:float()
  tap.ok(count(st.exp_avg:mul(zf):ne(0)) == 0 and count(st.exp_avg_sq:mul(zf):ne(0)) == 0,
    mode .. ": AdamW moments of pruned weights are 0")
  if mode == "nm" then
    local per_group = w:detach():ne(0):float():reshape(24, 32 / 8, 8):sum(3)
    tap.is(count(per_group:eq(2)), 24 * 4, "nm 2:8: every group of 8 inputs keeps exactly 2")
    tap.is(g:report()[1].pattern, "2:8", "nm: the final pattern")
  else
    tap.is(count(w:detach():ne(0)), math.floor(0.25 * 24 * 32), "unstructured: 25% kept exactly")
  end
end

-- A short pruning run still learns -----------------------------------------------------------
do
  local model = mlp(16, 32, 32, 4)
  local opt = optim.AdamW(model:parameters(), { lr = 5e-3 })
  local g = prune.GMP(model, { optimizer = opt, pattern = "8:2:8", t0 = 20, n = 5, dt = 10 })
  local x, y = batch(256)
  local at_end_of_pruning, last
  for t = 1, 200 do
    last = train_step(model, opt, x, y)
    g:step()
    if t == 70 then at_end_of_pruning = last end
  end
  local report = g:report()
  tap.ok(report[1].pattern == "8:2:8" and report[2].pattern == "8:2:8",
    "the run ends at the requested pattern")
  tap.ok(report[1].sparsity >= 0.75 and report[2].sparsity >= 0.75, "at least 75% sparse")
  tap.ok(last < at_end_of_pruning, ("fine-tuning lowers the loss (%.4f → %.4f)")
    :format(at_end_of_pruning, last))
end

-- Bad input -------------------------------------------------------------------------------------
do
  local model = mlp(16, 16, 16, 4)
  local opt = optim.SGD(model:parameters(), { lr = 0.1 })
  local function gmp(o)
    o.optimizer = o.optimizer == nil and opt or o.optimizer
    o.n = o.n or 2
    return function() prune.GMP(model, o) end
  end
  tap.error_like(gmp({ mode = "unstructured", s_f = 1 }),
    "s_f must be a sparsity %(a number in %[0, 1%)%), got 1",
    "s_f = 1")
  tap.error_like(gmp({ mode = "unstructured", s_f = -0.1 }), "s_f must be a sparsity", "s_f < 0")
  tap.error_like(gmp({ pattern = "8:2:8", t0 = -1 }), "t0 must be an integer >= 0, got %-1",
    "t0 < 0")
  tap.error_like(gmp({ pattern = "8:2:8", n = 0 }), "prune%.GMP: n must be an integer >= 1, got 0", "n = 0")
  tap.error_like(gmp({ pattern = "8:2:8", dt = 0 }), "prune%.GMP: dt must be an integer >= 1, got 0",
    "dt = 0: the message says what the docstring says (dt >= 1)")
  tap.error_like(gmp({ pattern = "8:2:8", n = math.huge }), "n must be an integer >= 1, got inf",
    "n = inf (pruning would never finish)")
  tap.error_like(gmp({ pattern = "99999999999999999999:2:8" }), "takes V <= 2147483647",
    "a V beyond the format's range")
  tap.error_like(gmp({ pattern = "8:2:70000" }), "M = 70000; the V:N:M format takes",
    "an M beyond the format's range")
  local tied = mlp(16, 16, 16, 4)
  tied[3].weight = tied[1].weight
  tap.error_like(function()
    prune.GMP(tied, { optimizer = optim.SGD(tied:parameters(), { lr = 0.1 }), pattern = "8:2:8",
                      n = 2, layers = { "1", "3" } })
  end, "layers '1' and '3' share one weight", "tied weights are refused up front")
  tap.error_like(function()
    prune.GMP(tied, { optimizer = optim.SGD(tied:parameters(), { lr = 0.1 }), pattern = "8:2:8",
                      n = 2, layers = { "1" } })
  end, "layers '1' and '3' share one weight",
    "... also when only one of them is pruned (the other would stop training)")
  tap.error_like(function() prune.vnm_M(1.5) end, "s must be a sparsity", "vnm_M(1.5) is refused")
  tap.error_like(gmp({ s_f = 0.9999999999999 }), "s_f = 0.9999999999999 gives .* M <= 65535",
    "s_f just below 1: the M it needs is out of range")
  tap.error_like(gmp({ pattern = "8:2" }), "pattern must be V:2:M .* got \"8:2\"",
    "vnm pattern 8:2")
  tap.error_like(gmp({ pattern = "8:3:8" }), "pattern must be V:2:M", "vnm pattern with N = 3")
  tap.error_like(gmp({ mode = "nm", pattern = "4:2" }), "pattern must be N:M with 1 <= N < M",
    "nm pattern 4:2")
  tap.error_like(gmp({ pattern = "8:2:32" }), "layer '1' has 16 inputs, fewer than M = 32",
    "a layer narrower than M")
  tap.error_like(gmp({ mode = "nm", pattern = "2:6" }), "16 inputs, not a multiple of M = 6",
    "nm: inputs not a multiple of M")
  tap.error_like(gmp({ pattern = "8:2:8", layers = { "9" } }), "layers lists '9', which is neither",
    "a layer name that matches nothing")
  tap.error_like(gmp({ pattern = "8:2:8", layers = { "2" } }), "layer '2' is a ReLU",
    "a layer that is not Linear")
  tap.error_like(gmp({ optimizer = false, pattern = "8:2:8" }), "optimizer must be a venom.optim",
    "an optimizer that is not one")
  tap.error_like(function() prune.GMP(model, { pattern = "8:2:8", n = 2 }) end,
    "optimizer is required", "no optimizer")
  tap.error_like(function() prune.GMP(model, { optimizer = opt, pattern = "8:2:8" }) end,
    "n %(the number of pruning events", "n is required")
  local other = optim.SGD(mlp(16, 16, 16, 4):parameters(), { lr = 0.1 })
  tap.error_like(gmp({ optimizer = other, pattern = "8:2:8" }),
    "the optimizer does not hold layer '1''s weight", "an optimizer over another model")
  tap.error_like(gmp({ mode = "unstructured", s_f = "0.5" }), "got string 0.5", "s_f as a string")
  tap.error_like(gmp({ mode = "sparse", pattern = "8:2:8" }), "mode must be", "unknown mode")
  tap.error_like(gmp({ mode = "unstructured" }), "needs the final sparsity s_f", "no target")
  local stranger = venom.zeros(2):requires_grad_(true)
  tap.error_like(function() opt:replace_parameter(venom.zeros(2), stranger) end,
    "not one of this optimizer's parameters", "replace_parameter of a foreign tensor")
  -- By type: "Linear" names all three, the classifier included.
  local g = prune.GMP(model, { optimizer = opt, mode = "unstructured", s_f = 0.5, n = 1,
                               layers = { "Linear" } })
  tap.is(#g:report(), 3, "layers = {\"Linear\"} selects every Linear")
end

tap.done()
