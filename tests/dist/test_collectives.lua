-- venom.distributed collectives under `mpirun -np 2`: each against a plain
-- reference computed from every rank's input (each rank can rebuild every
-- other rank's input from its seed), the shape exchange's errors on every
-- rank, and a world that still works after them.
local tap = require "tests.dist.disttap"
local venom = require "venom"
local dist = require "venom.distributed"
local data = require "venom.data"

local r, P = dist.rank(), dist.world_size()
tap.ok(P == 2 and r >= 0 and r < P, ("rank %d of a world of %d (mpirun -np 2)"):format(r, P))
tap.is(dist.local_rank(), r, "local_rank: one host, so it is the rank")

-- The input of rank q: seeded by q, so any rank can compute it.
local function input_of(q, n, dtype)
  venom.manual_seed(100 + q)
  local x = venom.randn(n)
  if dtype == "i64" then x = (x * 1000):long() end
  return x
end

local function max_diff(a, b)
  local d = (a:float() - b:float()):abs():max()
  local v = d:item()
  d:free()
  return v
end

-- all_reduce: sum, avg and max against the element-wise reference.
for _, dtype in ipairs({ "f32", "i64" }) do
  for _, op in ipairs({ "sum", "avg", "max" }) do
    local n = 37
    local want = input_of(0, n, dtype):totable()
    for q = 1, P - 1 do
      local other = input_of(q, n, dtype):totable()
      for i = 1, n do
        if op == "max" then want[i] = math.max(want[i], other[i]) else want[i] = want[i] + other[i] end
      end
    end
    if op == "avg" then
      for i = 1, n do
        want[i] = want[i] / P
        if dtype == "i64" then want[i] = want[i] < 0 and math.ceil(want[i]) or math.floor(want[i]) end
      end
    end
    local x = input_of(r, n, dtype)
    dist.all_reduce(x, op)
    local worst = max_diff(x, venom.tensor(want))
    tap.ok(worst <= (dtype == "f32" and 1e-5 or 0), ("all_reduce %s on %s matches the reference (max error %.2g)")
      :format(op, dtype, worst))
  end
end

-- broadcast from rank 1.
do
  local x = input_of(r, 10)
  dist.broadcast(x, 1)
  tap.is(max_diff(x, input_of(1, 10)), 0, "broadcast(t, 1): every rank holds rank 1's tensor")
end

-- all_gather: the ranks' tensors stacked in rank order.
do
  local g = dist.all_gather(input_of(r, 6):reshape(2, 3))
  local want = venom.cat({ input_of(0, 6):reshape(2, 3), input_of(1, 6):reshape(2, 3) }, 1)
  tap.ok(g:size(1) == 4 and g:size(2) == 3 and max_diff(g, want) == 0,
    "all_gather: (2, 3) on two ranks gives (4, 3), rank 0's rows first")
  local s = dist.all_gather(venom.tensor(r + 0.5):reshape())
  tap.ok(s:dim() == 1 and s:size(1) == 2 and s:get(1) == 0.5 and s:get(2) == 1.5,
    "all_gather of a 0-d tensor gives one element per rank")
end

-- reduce_scatter: the sum, then this rank's half of the rows.
do
  local x = input_of(r, 8):reshape(4, 2)
  local got = dist.reduce_scatter(x, "sum")
  local total = input_of(0, 8):reshape(4, 2) + input_of(1, 8):reshape(4, 2)
  local want = total:narrow(1, 2 * r + 1, 2)
  tap.ok(got:size(1) == 2 and max_diff(got, want) < 1e-6, "reduce_scatter sum: rank r gets rows 2r+1..2r+2 of the sum")
  tap.error_like(function() dist.reduce_scatter(venom.zeros(3, 2)) end, "multiple of the world size 2",
    "reduce_scatter: a first dim not divisible by the world size is refused on every rank")
end

-- all_to_all with uneven counts, a zero among them.
do
  local counts = { [0] = { 1, 2 }, [1] = { 3, 0 } }
  local function rows_of(q) -- rank q's rows: 10·q + row number, in both columns
    local t = {}
    for i = 1, counts[q][1] + counts[q][2] do t[i] = { 10 * q + i, -(10 * q + i) } end
    return venom.tensor(t)
  end
  local got, recv = dist.all_to_all(rows_of(r), counts[r])
  -- What rank r receives: from each q, the rows q sends to r, in rank order.
  local want = {}
  for q = 0, P - 1 do
    local first = r == 0 and 1 or counts[q][1] + 1
    for i = first, first + counts[q][r + 1] - 1 do want[#want + 1] = { 10 * q + i, -(10 * q + i) } end
  end
  tap.ok(got:size(1) == #want and max_diff(got, venom.tensor(want)) == 0,
    ("all_to_all: rank %d receives its %d rows in rank order"):format(r, #want))
  tap.ok(recv[1] == counts[0][r + 1] and recv[2] == counts[1][r + 1], "all_to_all: the received counts per rank")
end

-- Bad input: every rank gets the error, and the world still works after.
tap.error_like(function() dist.all_reduce(venom.zeros(r + 2)) end,
  "different shapes %(rank 0: f32 %(2,?%), rank 1: f32 %(3,?%)%)",
  "all_reduce of shapes (2) and (3): an error naming both shapes, on every rank")
tap.error_like(function() dist.all_gather(r == 0 and venom.zeros(2) or venom.zeros(2):long()) end,
  "different dtypes", "all_gather of f32 on one rank and i64 on the other: an error on every rank")
tap.error_like(function()
  dist.all_to_all(venom.zeros(3, 2), r == 0 and { 1, 1 } or { 2, 1 })
end, r == 0 and "sum to 2 rows but the tensor has 3" or "rank 0 refused its arguments",
  "all_to_all: counts that do not sum to the rows on rank 0 fail there, and rank 1 is told")
tap.error_like(function() dist.broadcast(venom.zeros(2), 2) end, "root rank 2; expected 0..1",
  "broadcast: a root outside the world is refused")
tap.error_like(function() dist.all_reduce(venom.zeros(3, 2):t()) end, "contiguous",
  "all_reduce: a strided view is refused (it is written in place)")
do
  local w = venom.zeros(2, { requires_grad = true })
  tap.error_like(function() dist.all_reduce(w) end, "requires grad",
    "all_reduce of a parameter outside no_grad is refused, on every rank")
end
do
  local x = venom.ones(3)
  dist.barrier()
  dist.all_reduce(x)
  tap.is(x:sum():item(), 6, "after those errors the world still works (barrier, all_reduce)")
end

-- Lua numbers, exactly: global metrics.
tap.is(dist.all_reduce_number(r == 0 and 0.1 or 0.2), 0.1 + 0.2, "all_reduce_number sums doubles exactly, in rank order")
tap.is(dist.all_reduce_number(r + 1, "max"), 2, "all_reduce_number max")

-- DistributedSampler: disjoint shards whose union is every sample.
do
  venom.manual_seed(5)
  local sampler = data.DistributedSampler(11)
  local mine = sampler:indices()
  local all = dist.all_gather(mine):totable()
  local seen = {}
  for _, i in ipairs(all) do seen[i] = (seen[i] or 0) + 1 end
  local covered = true
  for i = 1, 11 do covered = covered and seen[i] ~= nil end
  tap.ok(mine:size(1) == 6 and #all == 12 and covered,
    "DistributedSampler(11) on 2 ranks: 6 each (one padded), together every sample")
  local x = venom.arange(1, 12):reshape(11, 1)
  local loader = data.DataLoader({ x }, { batch_size = 3, sampler = data.DistributedSampler(11, { shuffle = false }) })
  local got = {}
  for xb in loader do for _, v in ipairs(xb:reshape(xb:size(1)):totable()) do got[#got + 1] = v end end
  tap.ok(#loader == 2 and got[1] == r + 1 and got[2] == r + 3, "DataLoader with a sampler: rank r takes samples r+1, r+3, ...")
  venom.manual_seed(7 + r)
  tap.error_like(function() data.DistributedSampler(11):indices() end, "different permutations",
    "DistributedSampler: ranks seeded differently are told, on every rank")
end

tap.done()
