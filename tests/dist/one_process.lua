-- venom.distributed in one process (no mpirun): before init() a world of
-- one that refuses collectives with a clear error; init() outside mpirun
-- gives a 1-process world where collectives are copies and DataParallel
-- trains exactly as the bare model does; and in a build without MPI,
-- init() says venom was built without it. The 2-rank tests are the
-- test_*.lua beside this file.
package.path = "tests/lua/?.lua;" .. package.path -- tap.lua
local tap = require "tap"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local data = require "venom.data"
local dist = require "venom.distributed"

tap.ok(dist.rank() == 0 and dist.world_size() == 1 and dist.local_rank() == 0
  and not dist.is_initialized(), "before init(): rank 0 of a world of 1, not initialized")
tap.error_like(function() dist.all_reduce(venom.ones(2)) end,
  dist.is_available() and "not initialized; call venom.distributed.init%(%)" or "built without MPI",
  "a collective before init() says to call init() first")

if not dist.is_available() then
  tap.error_like(dist.init, "venom was built without MPI", "init() in a build without MPI says so")
  tap.done()
  return
end

tap.error_like(function() dist.DataParallel(nn.Linear(2, 2)) end, "call venom.distributed.init%(%) first",
  "DataParallel before init() says to call init() first")
dist.init()
dist.init()
tap.ok(dist.is_initialized() and dist.rank() == 0 and dist.world_size() == 1,
  "init() outside mpirun: a world of one (twice is fine)")

do
  local x = venom.tensor({ 1.5, -2, 3 })
  dist.all_reduce(x, "avg")
  local g = dist.all_gather(x)
  local rs = dist.reduce_scatter(venom.tensor({ { 1, 2 }, { 3, 4 } }))
  local a2a, counts = dist.all_to_all(venom.tensor({ { 1 }, { 2 } }), { 2 })
  tap.ok(x:get(2) == -2 and g:size(1) == 3 and rs:get(2, 2) == 4 and a2a:get(2, 1) == 2
    and counts[1] == 2, "in a world of one every collective is a copy")
  tap.is(dist.all_reduce_number(0.1), 0.1, "all_reduce_number of one rank is the number")
end

-- DataParallel on one rank: the same losses as the bare model, bit for bit;
-- buckets of 26 floats (1e-4 MB = 104 bytes) cut the 83 gradients (b2 3,
-- W2 24, b1 8, W1 48, in the backward's order) into 4 buckets, W2, b1 and
-- W1 across bucket boundaries.
do
  local function train(wrap)
    venom.manual_seed(8)
    local model = nn.mlp({ 6, 8, 3 })
    local dp = wrap and dist.DataParallel(model, { bucket_mb = 1e-4 }) or model
    local opt = optim.SGD(model:parameters(), { lr = 0.1 })
    local x, y = venom.randn(5, 6), venom.tensor({ 1, 2, 3, 1, 2 }, "i64")
    local losses = {}
    for i = 1, 3 do
      local loss = nn.CrossEntropyLoss()(dp(x), y)
      opt:zero_grad(); loss:backward(); opt:step()
      losses[i] = loss:item()
    end
    return losses, wrap and dp:stats()
  end
  local plain = train(false)
  local wrapped, st = train(true)
  tap.ok(plain[1] == wrapped[1] and plain[3] == wrapped[3] and st.steps == 3 and st.buckets == 4,
    ("DataParallel on one rank trains as the bare model (%d buckets, %d steps)"):format(st.buckets, st.steps))
end

-- new_group in a world of one: {0} is a group of one; a list with a hole, a
-- named key, a string or a huge number is refused, not read as {0}.
do
  local g = dist.new_group({ 0 })
  tap.ok(g:size() == 1 and g:rank() == 0 and g:contains(0), "new_group({0}) in a world of one")
  g:free()
  tap.error_like(function() dist.new_group({ 0, nil, 1 }) end, "plain list", "new_group: a list with a hole")
  tap.error_like(function() dist.new_group({ 0, x = 1 }) end, "plain list", "new_group: a named key")
  tap.error_like(function() dist.new_group({ "0" }) end, "entry 1 is a string", "new_group: a string rank")
  tap.error_like(function() dist.new_group({ 2 ^ 40 }) end, "entry 1 is .*expected a rank",
    "new_group: a rank beyond int")
  tap.error_like(function() dist.new_group({ 1 }) end, "rank 1 %(entry 1%) is not in 0..0",
    "new_group: a rank outside the world")
end

-- The sampler of a world of one draws what DataLoader's shuffle draws.
do
  venom.manual_seed(4)
  local mine = data.DistributedSampler(9):indices()
  venom.manual_seed(4)
  local perm = venom.randperm(9)
  tap.ok((mine - perm):abs():max():item() == 0, "DistributedSampler in a world of one: the loader's shuffle order")
  tap.error_like(function() data.DistributedSampler(0) end, "n", "DistributedSampler(0) is refused")
  tap.error_like(function() data.DataLoader({ venom.zeros(4, 1) }, { sampler = data.DistributedSampler(5) }) end,
    "the sampler is for 5 samples but the tensors have 4", "a sampler for another number of samples is refused")
end

tap.done()
