-- bench/dist_epoch.lua — one epoch of the main job's MLP (784-1024-1024-10,
-- AdamW, batch 128: tutorials/01) in one process or data parallel over the
-- processes mpirun starts, and what the gradient all-reduce costs.
--
--     OMP_NUM_THREADS=2 venom bench/dist_epoch.lua                  # 1 process × 2 threads
--     OMP_NUM_THREADS=1 mpirun -np 2 venom bench/dist_epoch.lua --distributed
--
-- With --distributed each rank trains on batch_size / P rows of every
-- global batch (data.DistributedSampler) and DataParallel averages the
-- gradients in buckets during the backward. Printed (by rank 0): the
-- epoch's seconds (the slowest rank's) and images/s; the seconds the ranks
-- spent waiting for all-reduces once the backward was done (the
-- communication the overlap did not hide) as a fraction of the epoch; a
-- blocking all-reduce of the whole gradient, timed alone after the epoch
-- (median of 5), times the steps, i.e. what communication would cost with
-- no overlap at all; the share of it the buckets hid; and the bytes
-- all-reduced per step against the model's gradient size. Data loading
-- happens before the clock; a few warm-up steps run untimed. Never fails on
-- time.
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local data = require "venom.data"
local util = require "venom.util"
local dist = require "venom.distributed"

local opts = util.parse_args(arg, {
  batch_size = 128, hidden = 1024, limit = 0, warmup = 5, seed = 0, bucket_mb = 25,
  distributed = false, root = data.FASHION_MNIST_ROOT,
})
if opts.distributed then dist.init() end
if not dist.is_main() then print = function() end end
venom.manual_seed(opts.seed)

local ok, loader = pcall(data.fashion_mnist_loaders, { root = opts.root, limit = opts.limit,
  batch_size = opts.batch_size, distributed = opts.distributed })
if not ok then util.die(loader) end

local H = opts.hidden
local model = nn.mlp({ 784, H, H, 10 })
local dp = opts.distributed and dist.DataParallel(model, { bucket_mb = opts.bucket_mb })
local criterion = nn.CrossEntropyLoss()
local opt = optim.AdamW(model:parameters(), { lr = 1e-3, weight_decay = 0.01 })

local function step(xb, yb)
  local logits = model(xb)
  local loss = criterion(logits, yb)
  opt:zero_grad()
  loss:backward()
  opt:step()
  xb:free(); yb:free(); logits:free(); loss:free()
end

local k = 0
for xb, yb in loader:iter() do
  step(xb, yb)
  k = k + 1
  if k >= opts.warmup then break end
end

local before = dp and dp:stats() or { wait_seconds = 0, steps = 0 }
if opts.distributed then dist.barrier() end
local start = venom.clock()
local steps = 0
for xb, yb in loader:iter() do
  step(xb, yb)
  steps = steps + 1
end
local epoch = dist.all_reduce_number(venom.clock() - start, "max")
local images = dist.all_reduce_number(loader.n)

local grad_bytes = 0
for _, p in ipairs(model:parameters()) do grad_bytes = grad_bytes + 4 * p:numel() end
local threads = os.getenv("OMP_NUM_THREADS") or "?"
print(("%d process%s × %s thread%s, batch %d (%d per process), hidden %d")
  :format(dist.world_size(), dist.world_size() > 1 and "es" or "", threads,
    threads == "1" and "" or "s", opts.batch_size, opts.batch_size / dist.world_size(), H))
print(("%-34s %10.2f"):format("epoch (s)", epoch))
print(("%-34s %10.0f"):format("images/s", images / epoch))
print(("%-34s %10d"):format("steps", steps))
print(("%-34s %10.1f MB"):format("gradient size", grad_bytes / 2 ^ 20))
if dp then
  local st = dp:stats()
  local wait = st.wait_seconds - before.wait_seconds
  local wait_max = dist.all_reduce_number(wait, "max")
  -- The whole gradient in one blocking all-reduce, as if nothing overlapped.
  local g = venom.zeros(grad_bytes / 4)
  local t = {}
  for i = 1, 5 do
    dist.barrier()
    local t0 = venom.clock()
    dist.all_reduce(g, "avg")
    t[i] = dist.all_reduce_number(venom.clock() - t0, "max")
  end
  table.sort(t)
  local blocking = t[3] * steps
  print(("%-34s %10d"):format("buckets", st.buckets))
  print(("%-34s %10.1f MB (%.3f × the gradient)"):format("all-reduced per step", st.bytes_per_step / 2 ^ 20,
    st.bytes_per_step / grad_bytes))
  print(("%-34s %10.2f (%.1f%% of the epoch)"):format("waiting after backward (s, max rank)",
    wait_max, 100 * wait_max / epoch))
  print(("%-34s %10.2f (%.1f ms per step)"):format("blocking all-reduce × steps (s)", blocking,
    1000 * t[3]))
  print(("%-34s %9.1f%%"):format("hidden by the overlap", 100 * (1 - wait_max / blocking)))
end
