-- bench/sparse_layer.lua — one layer's training step (forward, then the
-- gradients of the input, the weights and the bias) through the whole
-- engine: nn.SparseLinear (V:N:M; on CUDA: packing the values, once per
-- optimizer step, rounding and transposing the input, the three Sparse
-- Tensor Core kernels, rounding dY) against nn.Linear of the same shape on
-- the same device, in f32 and,
-- on CUDA, under autocast bf16 (the fair dense baseline: 16-bit operands
-- too). bench/vnm_gpu times the kernels alone; the difference is what the
-- engine adds.
--
--     venom bench/sparse_layer.lua [--device cuda] [--reps 7]
--
-- Prints a table of median milliseconds per step; never fails on time.
io.stdout:setvbuf("line") -- a run killed at its time limit keeps its finished rows
local venom = require "venom"
local nn = require "venom.nn"
local sparse = require "venom.sparse"
local util = require "venom.util"

-- A bad option prints "error: <message>" and exits with status 2 (util.parse_cli).
local opts = util.parse_cli(arg, { device = "cpu", reps = 7, V = 64 }, {
  device = "cpu or cuda",
  reps = "timed steps per entry (the median is printed)",
  V = "rows per V:N:M block",
}, function(o)
  if o.device ~= "cpu" and o.device ~= "cuda" then util.fail("--device must be cpu or cuda, got " .. o.device) end
  util.check_arg_int(o, "reps", 1)
  util.check_arg_int(o, "V", 1)
end)
local dev = opts.device
if dev == "cuda" and not venom.cuda.is_available() then
  print("sparse_layer: no CUDA device")
  os.exit(0)
end
local sync = dev == "cuda" and venom.cuda.synchronize or function() end

-- Median milliseconds of step() over opts.reps runs after one warm-up.
local function time_ms(step)
  step()
  local ms = {}
  for r = 1, opts.reps do
    sync()
    local t0 = venom.clock()
    step()
    sync()
    ms[r] = (venom.clock() - t0) * 1e3
  end
  table.sort(ms)
  return ms[math.floor(opts.reps / 2) + 1]
end

-- A training step of `layer` on x (B, K) with the incoming gradient gy.
local function stepper(layer, x, gy, autocast)
  return function()
    local function run()
      local y = layer(x)
      y:backward(gy)
    end
    if autocast then venom.autocast(autocast, run) else run() end
    x.grad = nil
    layer:zero_grad()
  end
end

local shapes = dev == "cuda"
  and { { 4096, 4096, 4096 }, { 11008, 4096, 4096 }, { 4096, 11008, 4096 }, { 4096, 4096, 16384 } }
  or { { 1024, 1024, 512 }, { 2048, 1024, 512 } }
local Ms = { 4, 8, 16 }

print(("sparse_layer on %s, V=%d, medians of %d steps (forward + dX + dW + db), ms;")
  :format(dev == "cuda" and venom.cuda.device_name() or "the CPU", opts.V, opts.reps))
print(("the 2:M columns give ms and the speedup over dense %s"):format(dev == "cuda" and "bf16" or "f32"))
local head = ("%6s %6s %6s | %9s %9s |"):format("R", "K", "B", "dense f32",
  dev == "cuda" and "bf16" or "")
for _, M in ipairs(Ms) do head = head .. (" %13s"):format(("2:%d"):format(M)) end
print(head)
for _, sh in ipairs(shapes) do
  local R, K, B = sh[1], sh[2], sh[3]
  local x = venom.randn(B, K, { device = dev }):requires_grad_(true)
  local gy = venom.randn(B, R, { device = dev })
  local dense = nn.Linear(K, R):to(dev)
  local f32 = time_ms(stepper(dense, x, gy))
  local bf16 = dev == "cuda" and time_ms(stepper(dense, x, gy, "bf16")) or nil
  local line = ("%6d %6d %6d | %9.3f %9s |"):format(R, K, B, f32, bf16 and ("%.3f"):format(bf16) or "")
  for _, M in ipairs(Ms) do
    local layer = sparse.SparseLinear(K, R, { V = opts.V, M = M }):to(dev)
    local ms = time_ms(stepper(layer, x, gy))
    line = line .. (" %7.3f %4.2fx"):format(ms, (bf16 or f32) / ms)
    layer.values:free()
  end
  print(line)
  dense.weight:free()
  x:free()
  gy:free()
end
