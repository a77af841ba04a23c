-- The collectives on CUDA tensors through NCCL, in a world of one rank (no
-- mpirun; a GPU machine has one GPU): each collective of one rank is an
-- identity or a copy, so the CUDA results must equal the CPU inputs bit for
-- bit, while the communicator set-up (unique id over MPI), NCCL's stream
-- and its ordering against the compute stream are all exercised. Skips
-- without a device, and without NCCL in the build.
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
tap.done()
