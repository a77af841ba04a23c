-- bench/epoch.lua — time one training epoch of the main job's default model
-- (tutorials/01-fashion-mnist.lua: MLP 784-1024-1024-10, ReLU, AdamW,
-- cross-entropy) on the 60,000 Fashion-MNIST training images.
--
--     venom bench/epoch.lua [--batch-size 128] [--hidden 1024] [--epochs 1]
--
-- Loading and normalizing the data happens before the clock starts; a few
-- warm-up steps (allocator caches, BLAS threads) run untimed. Prints a table;
-- never fails on time.
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local data = require "venom.data"
local util = require "venom.util"

local opts = util.parse_args(arg, {
  batch_size = 128, hidden = 1024, epochs = 1, warmup = 5, seed = 0,
  root = data.FASHION_MNIST_ROOT,
})
venom.manual_seed(opts.seed)

local ok, loader = pcall(data.fashion_mnist_loaders,
  { root = opts.root, batch_size = opts.batch_size })
if not ok then util.die(loader) end
local n = loader.n

local H = opts.hidden
local model = nn.mlp({ 784, H, H, 10 })
local criterion = nn.CrossEntropyLoss()
local opt = optim.AdamW(model:parameters(), { lr = 1e-3, weight_decay = 0.01 })

local function step(xb, yb)
  local logits = model(xb)
  local loss = criterion(logits, yb)
  opt:zero_grad()
  loss:backward()
  opt:step()
  local l = loss:item()
  xb:free(); yb:free(); logits:free(); loss:free()
  return l
end

local k = 0
for xb, yb in loader:iter() do
  step(xb, yb)
  k = k + 1
  if k >= opts.warmup then break end
end

local times = {}
for e = 1, opts.epochs do
  local t0 = venom.clock()
  for xb, yb in loader:iter() do
    step(xb, yb)
  end
  times[e] = venom.clock() - t0
end
table.sort(times)
local secs = times[math.floor((#times + 1) / 2)] -- median

local function cpu_model()
  local f = io.open("/proc/cpuinfo")
  if not f then return "unknown" end
  local s = f:read("*a")
  f:close()
  return s:match("model name%s*:%s*([^\n]+)") or "unknown"
end
local function nproc()
  local p = io.popen("nproc 2>/dev/null")
  local s = p and p:read("*l")
  if p then p:close() end
  return s or "?"
end

-- GEMM work of one epoch: forward (1×) and backward (2×) of each Linear.
local flop = 0
local dims = { 784, H, H, 10 }
for i = 1, 3 do
  flop = flop + 3 * 2 * n * dims[i] * dims[i + 1]
end

print(("%-28s %s"):format("model", ("MLP 784-%d-%d-10, AdamW"):format(H, H)))
print(("%-28s %d"):format("batch size", opts.batch_size))
print(("%-28s %d (%d steps)"):format("samples per epoch", n, #loader))
print(("%-28s %.2f"):format("seconds per epoch", secs))
print(("%-28s %.0f"):format("samples per second", n / secs))
print(("%-28s %.1f"):format("GEMM GFLOP/s", flop / secs / 1e9))
print(("%-28s %s"):format("cores (nproc)", nproc()))
print(("%-28s %s"):format("CPU", cpu_model()))
