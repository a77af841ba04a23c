-- venom.prune on weights that tie, are zero or are not finite: unstructured
-- GMP removes exactly the scheduled count with ties going lowest index first,
-- counts only what it pruned (not weights that happen to be zero), and a
-- NaN or inf weight is the same clear error in every mode; GMP:target
-- refuses a NaN step.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local prune = require "venom.prune"

venom.manual_seed(3)

-- A model whose first layer (1 output, 8 inputs) holds `w`, and an
-- unstructured GMP reaching sparsity s in one event, at step 1 (SGD with
-- lr = 0, so the weights do not move).
local function one_row(w, s, scope)
  local model = nn.Sequential(nn.Linear(#w, 1), nn.Linear(1, 2))
  venom.no_grad(function() model[1].weight:copy_(venom.tensor({ w })) end)
  local opt = optim.SGD(model:parameters(), { lr = 0 })
  local g = prune.GMP(model, { optimizer = opt, mode = "unstructured", s_f = s, t0 = 0, n = 1,
                               scope = scope })
  return model, g
end

-- The 1-based positions alive in layer 1, as "5 6 7 8".
local function alive_positions(g)
  local m = g.layers[1].alive:reshape(-1):totable()
  local out = {}
  for i, v in ipairs(m) do if v == 1 then out[#out + 1] = i end end
  return table.concat(out, " ")
end

-- 1. Ties ----------------------------------------------------------------------------------
do
  local _, g = one_row({ 1, 1, 1, 1, 1, 1, 1, 1 }, 0.5)
  g:step()
  tap.is(g:report()[1].nnz, 4, "8 equal weights at 50%: 4 stay (not 0)")
  tap.is(alive_positions(g), "5 6 7 8", "... ties go lowest index first")

  local model
  model, g = one_row({ 1, 2, 2, 2, 2, 2, 2, 3 }, 0.5)
  g:step()
  tap.is(alive_positions(g), "5 6 7 8", "[1,2,2,2,2,2,2,3] at 50%: 1 and the first three 2s go")
  tap.is(model[1].weight:detach():ne(0):sum():item(), 4, "... and exactly 4 weights are nonzero")

  _, g = one_row({ 2, 2, 1, 2, 2, 1, 2, 2 }, 0.5)
  g:step()
  tap.is(alive_positions(g), "4 5 7 8", "the two 1s, then the lowest-index 2s")

  -- Every weight of a 16×16 layer equal: exactly ⌊s·256⌋ go at each event.
  local m2 = nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 2))
  venom.no_grad(function() m2[1].weight:fill_(0.25) end)
  local opt = optim.SGD(m2:parameters(), { lr = 0 })
  local g2 = prune.GMP(m2, { optimizer = opt, mode = "unstructured", s_f = 0.9, t0 = 0, n = 3 })
  local exact = true
  for _ = 1, 4 do
    local ev = g2:step()
    if ev then
      local want = 256 - math.floor(ev.sparsity * 256 + 1e-9)
      exact = exact and g2:report()[1].nnz == want
        and m2[1].weight:detach():ne(0):sum():item() == want
    end
  end
  tap.ok(exact, "all-equal 16×16 layer: ⌊s_t·256⌋ weights pruned at every event")

  -- Global scope: ties across layers go by layer order, then position.
  local m3 = nn.Sequential(nn.Linear(4, 2), nn.Linear(2, 4), nn.Linear(4, 2))
  venom.no_grad(function() m3[1].weight:fill_(1); m3[2].weight:fill_(1) end)
  local g3 = prune.GMP(m3, { optimizer = optim.SGD(m3:parameters(), { lr = 0 }),
    mode = "unstructured", s_f = 0.5, t0 = 0, n = 1, scope = "global" })
  g3:step()
  local r = g3:report()
  tap.ok(r[1].nnz == 0 and r[2].nnz == 8, "global scope: 16 tied weights at 50%: layer 1's 8 go")
end

-- 2. Zeros are not pruned weights ------------------------------------------------------------
do
  local _, g = one_row({ 0, 0, 0, 0, 1, 2, 3, 4 }, 0.25)
  g:step()
  tap.is(g:report()[1].sparsity, 0.25, "[0,0,0,0,1,2,3,4] at 25% ends at 25% (not 50%)")
  tap.is(alive_positions(g), "3 4 5 6 7 8", "... the first two zeros are pruned, the others alive")

  local model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
  venom.no_grad(function() model[1].weight:fill_(0) end)
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  -- s_i = s_f with t0 = 0: the layer is pruned here, while every weight is 0.
  local g2 = prune.GMP(model, { optimizer = opt, mode = "unstructured", s_i = 0.5, s_f = 0.5,
                                t0 = 0, n = 1 })
  tap.is(g2:report()[1].sparsity, 0.5,
    "a zero-initialised layer pruned to 50%: 50% sparse (not 100%)")
  local x = venom.randn(32, 16)
  local y = x:narrow(2, 1, 4):argmax(2)
  local crit = nn.CrossEntropyLoss()
  for _ = 1, 5 do
    local loss = crit(model(x), y)
    opt:zero_grad(); loss:backward(); opt:step(); g2:step()
  end
  tap.is(g2:report()[1].sparsity, 0.5, "... still 50% after 5 AdamW steps")
  local w = model[1].weight:detach()
  tap.is(w:ne(0):mul(g2.layers[1].alive:eq(0)):sum():item(), 0, "... its pruned weights stay 0")
  tap.ok(w:ne(0):sum():item() > 0, "... and the alive ones train away from 0")
end

-- 3. A weight that is not finite ----------------------------------------------------------------
for _, mode in ipairs({ "unstructured", "nm", "vnm" }) do
  for _, bad in ipairs({ 0 / 0, math.huge }) do
    local model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2))
    venom.no_grad(function() model[1].weight:set(2, 3, bad) end)
    local o = { optimizer = optim.SGD(model:parameters(), { lr = 0 }), mode = mode, t0 = 0, n = 1 }
    if mode == "unstructured" then o.s_f = 0.5 elseif mode == "nm" then o.pattern = "2:4"
    else o.pattern = "4:2:4" end
    local g = prune.GMP(model, o)
    local text = bad ~= bad and "nan" or "inf"
    tap.error_like(function() g:step() end,
      "weight %(2, 3%) is " .. text .. "; selection by magnitude needs finite weights",
      ("%s: a weight that is %s is a clear error"):format(mode, text))
    tap.ok(g.layers[1].alive == nil and g:sparsity() == 0
      and getmetatable(model[1]) == nn.Linear and model[1].weight:detach():get(1, 1) ~= 0,
      ("%s: ... and nothing was pruned"):format(mode))
  end
end

-- 4. GMP:target with a step that is not a number ---------------------------------------------
do
  local _, g = one_row({ 1, 2, 3, 4, 5, 6, 7, 8 }, 0.5)
  tap.error_like(function() g:target(0 / 0) end, "GMP:target: t must be a step number, got nan",
    "target(0/0) is refused")
  tap.error_like(function() g:target("3") end, "t must be a step number, got string",
    "target(\"3\") is refused")
  tap.is(g:target(1), 0.5, "target(1) is s_f once the one event is reached")
end

tap.done()
