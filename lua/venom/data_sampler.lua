--- venom.data_sampler — data.DistributedSampler: each rank's share of an
-- epoch in a distributed run (venom.distributed), for data.DataLoader's
-- sampler option.
local venom = require "venom"
local util = require "venom.util"
local fail = util.fail

local sampling = {}
local Sampler = {}
Sampler.__index = Sampler

--- True when v is a data.DistributedSampler.
function sampling.is_sampler(v) return getmetatable(v) == Sampler end


--- A DataLoader's share of each epoch for this rank of a distributed run
-- (venom.distributed): every rank draws the same permutation of the n
-- samples, and rank r of P takes its positions r+1, r+1+P, r+1+2P, ...
-- (a strided shard, disjoint from the others'). With a per-rank
-- batch_size of B/P, the k-th batches of all ranks together are the k-th
-- batch of B of that permutation, which is what makes P ranks compute what
-- one process with batch B computes. When P does not divide n the
-- permutation is padded by its own first samples, so that every rank has
-- ceil(n/P) (and the same number of batches); drop_last = true cuts it to
-- floor(n/P) instead. opts: shuffle = true (a fresh permutation from the
-- engine RNG at every epoch, as DataLoader's shuffle draws it: seed every
-- rank alike; an epoch in which the ranks' permutations differ is an
-- error), drop_last = false, rank and world_size (default: those of
-- venom.distributed, or 0 and 1 outside a distributed run).
function sampling.DistributedSampler(n, opts)
  local who = "data.DistributedSampler"
  util.check_int(n, "n", { min = 1, who = who })
  opts = util.check_options(opts, { "shuffle", "drop_last", "rank", "world_size" }, who)
  local P = util.check_int(opts.world_size or venom.core.dist_world_size(), "world_size",
    { min = 1, who = who })
  local r = util.check_int(opts.rank or venom.core.dist_rank(), "rank", { min = 0, max = P - 1,
    who = who })
  for _, k in ipairs({ "shuffle", "drop_last" }) do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      fail(("%s: %s must be true or false, got %s"):format(who, k, tostring(opts[k])))
    end
  end
  local per_rank = opts.drop_last and math.floor(n / P) or math.ceil(n / P)
  if per_rank == 0 then
    fail(("%s: %d samples cannot give each of %d ranks one (drop_last)"):format(who, n, P))
  end
  return setmetatable({ n = n, rank = r, world_size = P, num_samples = per_rank,
    shuffle = opts.shuffle ~= false }, Sampler)
end

-- The permutation's checksum (Σ i·perm[i] over a few positions), compared
-- across ranks so that ranks seeded differently fail instead of training on
-- overlapping shards.
local function check_same_order(perm)
  local core = venom.core
  if not core.dist_is_initialized() then return end
  local probe = perm:narrow(1, 1, math.min(perm:size(1), 64))
  local sum = 0
  for i, v in ipairs(probe:totable()) do sum = sum + i * v end
  probe:free()
  local dist = require "venom.distributed"
  if dist.all_reduce_number(sum, "max") ~= -dist.all_reduce_number(-sum, "max") then
    fail("data.DistributedSampler: the ranks drew different permutations; seed every rank "
      .. "alike (venom.manual_seed) and draw the same random numbers on each")
  end
end

--- This rank's sample numbers (1-based, i64) for the next epoch.
function Sampler:indices()
  local n, P, m = self.n, self.world_size, self.num_samples
  local perm = self.shuffle and venom.randperm(n) or venom.arange(1, n + 1):long()
  if self.shuffle and P > 1 then check_same_order(perm) end
  local total = P * m
  if total > n then -- pad with the first samples so that every rank gets m
    local head = perm:narrow(1, 1, total - n)
    local padded = venom.cat({ perm, head }, 1)
    head:free(); perm:free()
    perm = padded
  end
  -- Position r+1+P·j of the permutation is row j, column r+1 of it seen as (m, P).
  local grid = perm:narrow(1, 1, total):reshape(m, P)
  local column = grid:narrow(2, self.rank + 1, 1)
  local mine = column:contiguous():reshape(m)
  grid:free(); column:free(); perm:free()
  return mine
end

return sampling
