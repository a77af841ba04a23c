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
-- Prints median milliseconds per step, wall clock and CPU time of the
-- process (os.clock, all threads: on a loaded machine the CPU time says
-- what the step costs, the wall clock what it waited too), with the spread
-- (min–max over the rounds); never fails on time.
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local prune = require "venom.prune"
local util = require "venom.util"

-- A bad option prints "error: <message>" and exits with status 2 (util.parse_cli).
local opts = util.parse_cli(arg, { rounds = 7, steps = 20 }, {
  rounds = "timed rounds per entry (median and spread printed)",
  steps = "optimizer steps per round",
}, function(o)
  util.check_arg_int(o, "rounds", 1)
  util.check_arg_int(o, "steps", 1)
end)

venom.manual_seed(0)
local x = venom.randn(128, 784)
local y = venom.randint(1, 11, { 128 }):long()
local crit = nn.CrossEntropyLoss()

-- A model and its optimizer in the given phase. GMP with s_i = 0.75 is at
-- M = 8 from step 0: in the shadow until its one event at step dt = 10^6
-- (so no step here pays for a selection: tutorial 2 has one every 46
-- steps), or compressed after the first step with dt = 1.
local function setup(phase)
  local model = nn.mlp({ 784, 1024, 1024, 10 })
  local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
  local g
  if phase ~= "dense" then
    local o = { optimizer = opt, pattern = "64:2:8", t0 = 0, s_i = 0.75, n = 1, dt = 1000000 }
    if phase == "compressed" then o.dt = 1 end
    g = prune.GMP(model, o)
  end
  return function()
    local loss = crit(model(x), y)
    opt:zero_grad(); loss:backward(); opt:step()
    if g then g:step() end
  end
end

local phases = { "dense", "shadow", "compressed" }
local steppers, ms, cpu = {}, {}, {}
for i, p in ipairs(phases) do
  steppers[i], ms[i], cpu[i] = setup(p), {}, {}
  steppers[i]() -- warm-up
end
for _ = 1, opts.rounds do
  for i = 1, #phases do
    local t0, c0 = venom.clock(), os.clock()
    for _ = 1, opts.steps do steppers[i]() end
    ms[i][#ms[i] + 1] = (venom.clock() - t0) * 1e3 / opts.steps
    cpu[i][#cpu[i] + 1] = (os.clock() - c0) * 1e3 / opts.steps
  end
end

-- The median of list a (sorted in place) and its spread.
local function stats(a)
  table.sort(a)
  return a[math.floor(#a / 2) + 1], a[1], a[#a]
end
print(("%-12s %9s %17s %8s %9s %17s %8s"):format("phase", "wall ms", "spread", "vs dense",
  "CPU ms", "spread", "vs dense"))
local wbase, cbase
for i, p in ipairs(phases) do
  local w, wlo, whi = stats(ms[i])
  local c, clo, chi = stats(cpu[i])
  wbase, cbase = wbase or w, cbase or c
  print(("%-12s %9.1f %7.1f – %-7.1f %7.2f× %9.1f %7.1f – %-7.1f %7.2f×"):format(p, w, wlo, whi,
    w / wbase, c, clo, chi, c / cbase))
end
