-- The collectives on CUDA tensors through NCCL, in a world of one rank (no
-- mpirun; a GPU machine has one GPU): each collective of one rank is an
-- identity or a copy, so the CUDA results must equal the CPU inputs bit for
-- bit, while the communicator set-up (unique id over MPI), NCCL's stream
-- and its ordering against the compute stream are all exercised. Then
-- DataParallel of a CUDA model (device buckets, ncclAllReduce on NCCL's
-- stream during the backward, the compute stream waiting before the
-- optimizer): with one rank the average is an identity, so 8 AdamW steps
-- must give the losses of the same model trained without DataParallel.
-- Skips without a device, and without NCCL in the build.
local venom = require "venom"
if not venom.cuda.is_available() then print("1..0 # SKIP no CUDA device") os.exit(0) end
local dist = require "venom.distributed"
if not dist.is_nccl_available() then print("1..0 # SKIP venom was built without NCCL") os.exit(0) end
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"

dist.init()
venom.manual_seed(5)
local x = venom.randn(6, 5)

local function same(gpu, cpu) return (gpu:cpu() - cpu):abs():max():item() == 0 end

for _, op in ipairs({ "sum", "avg", "max" }) do
  local g = x:cuda() * 1 -- queued on the compute stream just before the collective
  dist.all_reduce(g, op)
  tap.ok(same(g, x), ("all_reduce(%s) of one rank on CUDA is the identity"):format(op))
end
local g = x:cuda()
dist.broadcast(g, 0)
tap.ok(same(g, x), "broadcast from rank 0 on CUDA")
local gathered = dist.all_gather(x:cuda())
tap.ok(gathered:device() == "cuda" and same(gathered, x), "all_gather on CUDA: a CUDA copy")
tap.ok(same(dist.reduce_scatter(x:cuda(), "sum"), x), "reduce_scatter on CUDA")
local rows, counts = dist.all_to_all(x:cuda(), { 6 })
tap.ok(same(rows, x) and counts[1] == 6, "all_to_all on CUDA")
local ints = venom.tensor({ 1, 2, 3 }, { dtype = "i32" }):cuda()
dist.all_reduce(ints, "sum")
tap.ok(same(ints:to("f32"), venom.tensor({ 1, 2, 3 })), "all_reduce of an i32 CUDA tensor")
tap.error_like(function() dist.all_reduce(ints, "avg") end, "NCCL averages f32 only",
  "avg of an integer CUDA tensor is refused")

-- DataParallel on CUDA: the same MLP (same seed), the same batches, with and
-- without it. Buckets of 0.005 MB cut the 64-48-48-5 MLP's 6 gradients (22.9 kB)
-- into pieces across 5 buckets; the first (the last layers) starts during the backward.
local nn = require "venom.nn"
local optim = require "venom.optim"
local function train(wrap)
  venom.manual_seed(11)
  local model = nn.mlp({ 64, 48, 48, 5 }):cuda()
  local dp = wrap and dist.DataParallel(model, { bucket_mb = 0.005 })
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  local losses = {}
  for step = 1, 8 do
    local x = venom.randn(32, 64):cuda()
    local y = venom.randint(1, 6, { 32 }):cuda()
    local loss = nn.CrossEntropyLoss()(model(x), y)
    opt:zero_grad()
    loss:backward()
    opt:step()
    losses[step] = loss:item()
  end
  local st = dp and dp:stats()
  if dp then dp:free() end
  return losses, st
end
local ok, plain = pcall(train, false)
tap.ok(ok, "an MLP trains on CUDA without DataParallel" .. (ok and "" or ": " .. tostring(plain)))
local ok2, wrapped, st = pcall(train, true)
tap.ok(ok2, "the same MLP trains on CUDA under DataParallel (NCCL)" .. (ok2 and "" or ": " .. tostring(wrapped)))
if ok and ok2 then
  local worst = 0
  for i = 1, #plain do
    worst = math.max(worst, math.abs(wrapped[i] - plain[i]) / math.max(math.abs(plain[i]), 1e-30))
  end
  tap.diag("DataParallel on CUDA, 1 rank: losses %.6f .. %.6f, largest relative difference %g",
    plain[1], plain[#plain], worst)
  tap.ok(worst <= 1e-6, "one rank's DataParallel on CUDA gives the losses of the bare model")
  tap.ok(st.steps == 8 and st.buckets == 5, ("8 steps reduced in 5 buckets (got %d, %d)")
    :format(st.steps, st.buckets))
  local bytes = 4 * (64 * 48 + 48 + 48 * 48 + 48 + 48 * 5 + 5)
  tap.ok(st.bytes_per_step == bytes and st.bytes_reduced == 8 * bytes,
    "every gradient byte went into a bucket once per step")
  tap.ok(st.bytes_started_early > 0, "a bucket started while the backward was still computing")
else
  for _ = 1, 4 do tap.ok(false, "DataParallel on CUDA: no run to compare") end
end
-- Parameters on both devices are refused, naming them.
local mixed = nn.mlp({ 4, 3, 2 })
mixed[3]:cuda() -- the second Linear only
tap.error_like(function() dist.DataParallel(mixed) end, "expected every parameter on one device",
  "DataParallel refuses parameters on both the CPU and CUDA")
tap.done()
