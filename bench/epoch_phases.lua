-- bench/epoch_phases.lua — where the main job's training step spends its
-- wall time, phase by phase, against the same GEMMs run alone: the MLP
-- 784-1024-1024-10 with AdamW of bench/epoch.lua, batch 128.
--
--     venom bench/epoch_phases.lua [--steps 200] [--cpu-time]
--
-- Runs `steps` steps twice (the first pass warms caches and the allocator)
-- and prints, for the second, ms per step of each phase: the loader (index
-- the batch, u8 -> f32, normalise), forward (model + loss), backward
-- (zero_grad + backward), adam (opt:step()), as the 10th percentile and the
-- median of the steps (the 10th percentile is what a step costs when
-- nothing else on the machine got in its way). Then the forward's 3 GEMMs
-- and the backward's 5 (layer 1 has no dX: its input needs no gradient)
-- alone, same shapes and BLAS path, best of 5 × 20. The differences are
-- what the step does besides its GEMMs. --cpu-time measures the process's
-- CPU time (os.clock) instead of wall time: with OMP_NUM_THREADS=1 that is
-- robust to other programs taking the cores. Prints a table; never fails on time.
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local data = require "venom.data"
local util = require "venom.util"

local opts = util.parse_cli(arg, { steps = 200, seed = 0, root = data.FASHION_MNIST_ROOT,
  cpu_time = false }, nil,
  function(o)
    util.check_arg_int(o, "steps", 1)
    util.check_arg_int(o, "seed", 0)
  end)
venom.manual_seed(opts.seed)
local ok, loader = pcall(data.fashion_mnist_loaders,
  { root = opts.root, batch_size = 128, limit = 128 * opts.steps })
if not ok then util.die(loader) end
local model = nn.mlp({ 784, 1024, 1024, 10 })
local criterion = nn.CrossEntropyLoss()
local opt = optim.AdamW(model:parameters(), { lr = 1e-3, weight_decay = 0.01 })
local clock = opts.cpu_time and os.clock or venom.clock

local phases = { "loader", "forward", "backward", "adam", "step" }
local T = {}
for _, k in ipairs(phases) do T[k] = {} end
for pass = 1, 2 do
  local t = clock()
  for xb, yb in loader:iter() do
    local t1 = clock()
    local logits = model(xb)
    local loss = criterion(logits, yb)
    local t2 = clock()
    opt:zero_grad()
    loss:backward()
    local t3 = clock()
    opt:step()
    local t4 = clock()
    loss:item()
    xb:free(); yb:free(); logits:free(); loss:free()
    if pass == 2 then
      local row = { loader = t1 - t, forward = t2 - t1, backward = t3 - t2, adam = t4 - t3, step = t4 - t }
      for _, k in ipairs(phases) do table.insert(T[k], row[k]) end
    end
    t = clock()
  end
end

local B, dims = 128, { 784, 1024, 1024, 10 }
local fw, bw = {}, {}
for i = 1, 3 do
  local x, w, dy = venom.randn(B, dims[i]), venom.randn(dims[i + 1], dims[i]), venom.randn(B, dims[i + 1])
  fw[#fw + 1] = function() return venom.matmul(x, w:transpose(1, 2)) end
  if i > 1 then bw[#bw + 1] = function() return venom.matmul(dy, w) end end
  bw[#bw + 1] = function() return venom.matmul(dy:transpose(1, 2), x) end
end
local function best(ops)
  local b = math.huge
  for _ = 1, 5 do
    local t0 = clock()
    for _ = 1, 20 do
      for _, op in ipairs(ops) do op():free() end
    end
    b = math.min(b, (clock() - t0) / 20)
  end
  return b
end
local alone = venom.no_grad(function() return { forward = best(fw), backward = best(bw) } end)

local function pct(a, q)
  table.sort(a)
  return a[math.floor((#a - 1) * q) + 1]
end
print(("%d steps of MLP 784-1024-1024-10, AdamW, batch 128 (ms per step, %s)"):format(#T.step,
  opts.cpu_time and "CPU time" or "wall time"))
print(("%-10s %8s %8s %14s"):format("phase", "p10", "median", "GEMMs alone"))
for _, k in ipairs(phases) do
  print(("%-10s %8.3f %8.3f %14s"):format(k, 1e3 * pct(T[k], 0.1), 1e3 * pct(T[k], 0.5),
    alone[k] and ("%.3f"):format(1e3 * alone[k]) or ""))
end
local f = io.open("/proc/loadavg")
print(("load average %s"):format(f and f:read("*l"):match("^(%S+ %S+ %S+)") or "?"))
if f then f:close() end
