-- bench/epoch.lua — time one training epoch of the main job's default model
-- (tutorials/01-fashion-mnist.lua: MLP 784-1024-1024-10, ReLU, AdamW,
-- cross-entropy) on the 60,000 Fashion-MNIST training images.
--
--     venom bench/epoch.lua [--batch-size 128] [--hidden 1024] [--epochs 1] [--sparse 64:2:8]
--                           [--profile-steps 0]
--     OMP_NUM_THREADS=1 mpirun -np 2 venom bench/epoch.lua --distributed [--bucket-mb 25]
--
-- With --distributed each of the processes mpirun starts trains on
-- batch_size / P rows of every global batch (data.DistributedSampler) and
-- DataParallel averages the gradients in buckets during the backward; rank
-- 0 prints, with the slowest rank's times, what the all-reduce costs: the
-- seconds spent waiting for it once the backward was done (what the overlap
-- did not hide), a blocking all-reduce of the whole gradient timed alone
-- (median of 5) times the steps (no overlap at all), and the bytes
-- all-reduced per step against the gradient's size, and how many bucket
-- pieces a weight-gradient GEMM handed over while it ran (per step).
-- bench/dist_overlap.sh alternates the runs and tabulates these.
--
-- --sparse V:N:M makes the two hidden layers nn.SparseLinear, as tutorial 1's
-- --sparse does (sparse.sparsify, the last layer dense).
--
-- Without --distributed (and --sparse) it also times the epoch's GEMMs alone (same shapes,
-- same BLAS) and prints the arithmetic floor (the epoch's GEMM work at that
-- rate) and, with --epochs > 1, each epoch's time and their spread.
--
-- --profile-steps N runs N more steps (after the warm-up, before the timed
-- epochs) under venom.profile and prints where their time went per op kind
-- (linear, relu, cross_entropy, adam_step, the loader's ops, ...).
--
-- Loading the data happens before the clock starts (each batch is converted
-- from u8 and normalised inside the epoch, as in tutorial 1); a few warm-up
-- steps (allocator caches, BLAS threads) run untimed. Prints a table; never
-- fails on time.
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local data = require "venom.data"
local util = require "venom.util"
local dist = require "venom.distributed"

-- A bad option prints "error: <message>" and exits with status 2 (util.parse_cli).
local opts = util.parse_cli(arg, {
  batch_size = 128, hidden = 1024, epochs = 1, warmup = 5, seed = 0,
  root = data.FASHION_MNIST_ROOT, limit = 0, distributed = false, bucket_mb = 25, sparse = "",
  profile_steps = 0,
}, nil, function(o)
  for _, k in ipairs({ "batch_size", "hidden", "epochs" }) do util.check_arg_int(o, k, 1) end
  for _, k in ipairs({ "warmup", "seed", "limit", "profile_steps" }) do util.check_arg_int(o, k, 0) end
  util.check_arg_number(o, "bucket_mb", 0)
  if o.sparse ~= "" and not o.sparse:match("^%d+:2:%d+$") then
    util.fail("--sparse must be V:2:M, e.g. 64:2:8; got " .. o.sparse)
  end
  dist.check_arg(o)
end)
if not dist.is_main() then print = function() end end
venom.manual_seed(opts.seed)

local ok, loader = pcall(data.fashion_mnist_loaders, { root = opts.root, limit = opts.limit,
  batch_size = opts.batch_size, distributed = opts.distributed })
if not ok then util.die(loader) end
local n = (loader.sampler or loader).n

local H = opts.hidden
local model = nn.mlp({ 784, H, H, 10 })
if opts.sparse ~= "" then -- the hidden layers V:N:M (layer "5", the last, stays dense)
  local V, N, M = opts.sparse:match("^(%d+):(%d+):(%d+)$")
  local ok, err = pcall(require("venom.sparse").sparsify, model,
    { V = tonumber(V), N = tonumber(N), M = tonumber(M), skip = { "5" } })
  if not ok then util.die(err) end
end
local dp = opts.distributed and dist.DataParallel(model, { bucket_mb = opts.bucket_mb })
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

-- The next N batches under the per-op profiler, loader included (index_select,
-- the u8 → f32 conversion and the normalisation are ops too); printed at the end.
local report
if opts.profile_steps > 0 and not dp then
  report = venom.profile(function()
    local j = 0
    while j < opts.profile_steps do
      for xb, yb in loader:iter() do
        step(xb, yb)
        j = j + 1
        if j >= opts.profile_steps then break end
      end
    end
  end)
end

local before = dp and dp:stats() -- the warm-up's counters, left out below
local waited = before and before.wait_seconds
local times = {}
for e = 1, opts.epochs do
  if dp then dist.barrier() end
  local t0 = venom.clock()
  for xb, yb in loader:iter() do
    step(xb, yb)
  end
  times[e] = dist.all_reduce_number(venom.clock() - t0, "max")
end
local sorted = {}
for i, t in ipairs(times) do sorted[i] = t end
table.sort(sorted)
local secs = sorted[math.floor((#sorted + 1) / 2)] -- median

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

print(("%-28s %s"):format("model", ("MLP 784-%d-%d-10, AdamW%s"):format(H, H,
  opts.sparse ~= "" and ", hidden layers V:N:M " .. opts.sparse or "")))
print(("%-28s %d"):format("batch size", opts.batch_size))
print(("%-28s %d (%d steps)"):format("samples per epoch", n, #loader))
print(("%-28s %.2f"):format("seconds per epoch", secs))
print(("%-28s %.0f"):format("samples per second", n / secs))
if opts.sparse == "" then print(("%-28s %.1f"):format("GEMM GFLOP/s", flop / secs / 1e9)) end
if #times > 1 then
  local parts = {}
  for i, t in ipairs(times) do parts[i] = ("%.2f"):format(t) end
  print(("%-28s %s; spread (max - min) %.1f%% of the median"):format("seconds, epoch by epoch",
    table.concat(parts, " "), 100 * (sorted[#sorted] - sorted[1]) / secs))
end

-- The arithmetic floor: the epoch's GEMM work at the rate the same BLAS calls
-- reach alone, timed now (the same shapes: per layer Y = X·Wᵀ, dX = dY·W and
-- dW = dYᵀ·X at this batch size; transposed views go to sgemm without copies).
-- A run that is far above it spends its time outside the GEMMs.
local function gemm_rate()
  local B, ops, work = opts.batch_size, {}, 0
  for i = 1, 3 do
    local x, w, dy = venom.randn(B, dims[i]), venom.randn(dims[i + 1], dims[i]), venom.randn(B, dims[i + 1])
    ops[#ops + 1] = function() return venom.matmul(x, w:transpose(1, 2)) end
    ops[#ops + 1] = function() return venom.matmul(dy, w) end
    ops[#ops + 1] = function() return venom.matmul(dy:transpose(1, 2), x) end
    work = work + 3 * 2 * B * dims[i] * dims[i + 1]
  end
  local best = math.huge
  for _ = 1, 5 do
    local t0 = venom.clock()
    for _ = 1, 20 do
      for _, op in ipairs(ops) do op():free() end
    end
    best = math.min(best, (venom.clock() - t0) / 20)
  end
  return work / best
end
if not dp and opts.sparse == "" then
  local rate = venom.no_grad(gemm_rate)
  local floor = flop / rate
  print(("%-28s %.1f GFLOP/s (the epoch's shapes, best of 5)"):format("sgemm alone", rate / 1e9))
  print(("%-28s %.2f s; the epoch is %.2f × it"):format("arithmetic floor", floor, secs / floor))
end
print(("%-28s %s"):format("cores (nproc)", nproc()))
if report then
  print(("\nper op kind, %d profiled steps (ms summed over them):"):format(opts.profile_steps))
  print(report:format())
end
print(("%-28s %s"):format("CPU", cpu_model()))

if dp then
  local st = dp:stats()
  local grad_bytes = 0
  for _, p in ipairs(model:parameters()) do grad_bytes = grad_bytes + 4 * p:numel() end
  local wait = dist.all_reduce_number((st.wait_seconds - waited) / opts.epochs, "max")
  local g = venom.zeros(grad_bytes / 4) -- the whole gradient, one blocking all-reduce
  local t = {}
  for i = 1, 5 do
    dist.barrier()
    local t0 = venom.clock()
    dist.all_reduce(g, "avg")
    t[i] = dist.all_reduce_number(venom.clock() - t0, "max")
  end
  table.sort(t)
  local blocking = t[3] * #loader
  print(("%-28s %d × %s OpenMP thread(s), %d rows per process and step"):format("processes",
    dist.world_size(), os.getenv("OMP_NUM_THREADS") or "?", opts.batch_size / dist.world_size()))
  print(("%-28s %d of <= %g MB"):format("gradient buckets", st.buckets, opts.bucket_mb))
  print(("%-28s %.2f MB = %.3f × the gradient (%.2f MB)"):format("all-reduced per step",
    st.bytes_per_step / 2 ^ 20, st.bytes_per_step / grad_bytes, grad_bytes / 2 ^ 20))
  print(("%-28s %.2f s per epoch (%.1f%% of it)"):format("waiting after backward", wait,
    100 * wait / secs))
  print(("%-28s %.2f s per epoch (%.1f ms per step)"):format("blocking all-reduce", blocking,
    1000 * t[3]))
  print(("%-28s %.1f%%"):format("hidden by the overlap", 100 * (1 - wait / blocking)))
  -- pieces of buckets that a weight-gradient GEMM handed over while it ran
  print(("%-28s %.1f%% of the gradient"):format("started during backward",
    100 * (st.bytes_started_early - before.bytes_started_early)
      / math.max(1, (st.steps - before.steps) * st.bytes_per_step)))
  print(("%-28s %.1f"):format("early pieces per step",
    (st.pieces_early - before.pieces_early) / math.max(1, st.steps - before.steps)))
end
