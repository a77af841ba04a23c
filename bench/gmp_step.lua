-- bench/gmp_step.lua — what a training step of tutorial 2's MLP (784–1024–
-- 1024–10, batch 128, AdamW) costs in each phase of V:N:M pruning: dense
-- (before the schedule), the dense shadow (during it: the forward through
-- the stage's pattern, the straight-through gradient, the SR-STE decay
-- after the step; here at 2:8) and compressed (after the schedule, or
-- during it without the shadow; here 2:8). The entries alternate (A B C A
-- B C …) so that a machine shared with other jobs slows
-- them alike.
--
--     venom bench/gmp_step.lua [--rounds 7] [--steps 20]
--
-- Prints median milliseconds per step with the spread (min–max over the
-- rounds); never fails on time.
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local prune = require "venom.prune"
local util = require "venom.util"

local opts = util.parse_args(arg, { rounds = 7, steps = 20 }, {
  rounds = "timed rounds per entry (median and spread printed)",
  steps = "optimizer steps per round",
})
util.check_arg_int(opts, "rounds", 1)
util.check_arg_int(opts, "steps", 1)

venom.manual_seed(0)
local x = venom.randn(128, 784)
local y = venom.randint(1, 11, { 128 }):long()
local crit = nn.CrossEntropyLoss()

-- A model and its optimizer in the given phase: GMP with t0 = 1 and n = 1e6
-- stays in its first stages for ever; n = 1 reaches the final pattern at once.
local function setup(phase)
  local model = nn.mlp({ 784, 1024, 1024, 10 })
  local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
  local g
  if phase ~= "dense" then
    local o = { optimizer = opt, pattern = "64:2:8", t0 = 0, s_i = 0.75, n = 1000000 }
    if phase == "compressed" then o.n = 1 end
    g = prune.GMP(model, o)
    -- s_i = 0.75: M = 8 from step 0 (the shadow; compressed after one step with n = 1)
  end
  return function()
    local loss = crit(model(x), y)
    opt:zero_grad(); loss:backward(); opt:step()
    if g then g:step() end
  end
end

local phases = { "dense", "shadow", "compressed" }
local steppers, ms = {}, {}
for i, p in ipairs(phases) do
  steppers[i], ms[i] = setup(p), {}
  steppers[i]() -- warm-up
end
for _ = 1, opts.rounds do
  for i = 1, #phases do
    local t0 = venom.clock()
    for _ = 1, opts.steps do steppers[i]() end
    ms[i][#ms[i] + 1] = (venom.clock() - t0) * 1e3 / opts.steps
  end
end

print(("%-12s %10s %18s %9s"):format("phase", "ms/step", "spread", "vs dense"))
local base
for i, p in ipairs(phases) do
  table.sort(ms[i])
  local med = ms[i][math.floor(#ms[i] / 2) + 1]
  base = base or med
  print(("%-12s %10.2f %8.2f – %-7.2f %8.2f×"):format(p, med, ms[i][1], ms[i][#ms[i]],
    med / base))
end
