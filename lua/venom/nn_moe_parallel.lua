--- venom.nn_moe_parallel — expert parallelism for nn.MoE (its option
-- expert_parallel): the experts are spread over the ranks of a distributed
-- run, each rank keeps only its own, and the tokens travel to their
-- expert's rank and back with two all_to_alls (GShard, Lepikhin et al.
-- 2020; the exchange of FlexMoE, Nie et al. SIGMOD 2023).
--
-- Every rank routes its own tokens (its share of the batch) over all E
-- experts, exactly as the one-process layer does, then:
--   1. sends each kept (token, expert) row to the expert's rank, grouped by
--      rank, then expert (all_to_all with per-rank counts);
--   2. runs each local expert on the rows it received from all ranks (and
--      keeps the graph of a rank whose experts got no row connected to both
--      exchanges, so that all ranks run their backwards together);
--   3. sends the outputs back the same way, and scatter-adds them into the
--      tokens weighted by their combine weights (as without parallelism).
-- The numbers are those of the one-process layer run on each rank's share
-- (up to float rounding: an expert's GEMM sees all ranks' rows at once).
--
-- Gradients. Each rank's loss is a mean over its share, and DataParallel
-- averages the replicated parameters' gradients over the P ranks. An
-- expert lives on one rank and collects the gradients of all P losses, so
-- the way back to the experts is scaled by 1/P (their gradient is then the
-- mean too) and the way back from them to the tokens by P (a token's
-- gradient stays that of its own rank's loss). DataParallel leaves the
-- local experts out of its all-reduce. For P a power of two both scalings
-- are exact.
local venom = require "venom"
local util = require "venom.util"
local fail = util.fail

local M = {}

--- The owner rank (0-based) of each of the E experts, checked: `spec` is
-- true (contiguous blocks: rank q owns experts q·E/P + 1 .. (q+1)·E/P; P
-- must divide E) or a list of E ranks. Every rank must own at least one
-- expert, and every rank must pass the same placement (compared across
-- the ranks: a difference is an error on every rank).
function M.placement(spec, E, who)
  local dist = require "venom.distributed"
  if not dist.is_initialized() then
    fail(who .. ": expert_parallel needs a distributed run; call venom.distributed.init() first")
  end
  local P = dist.world_size()
  local owner = {}
  if spec == true then
    if E % P ~= 0 then
      fail(("%s: expert_parallel = true splits the %d experts into equal blocks, but %d "
        .. "ranks do not divide %d; pass a list of owner ranks instead"):format(who, E, P, E))
    end
    for e = 1, E do owner[e] = math.floor((e - 1) / (E / P)) end
  elseif type(spec) == "table" then
    if #spec ~= E then
      fail(("%s: expert_parallel lists %d owner ranks for %d experts"):format(who, #spec, E))
    end
    for e = 1, E do
      owner[e] = util.check_int(spec[e], ("expert_parallel[%d]"):format(e),
        { min = 0, max = P - 1, who = who, what = ("a rank in 0..%d"):format(P - 1) })
    end
  else
    fail(("%s: expert_parallel must be true or a list of %d owner ranks, got %s")
      :format(who, E, tostring(spec)))
  end
  local owns = {}
  for e = 1, E do owns[owner[e]] = true end
  for q = 0, P - 1 do
    if not owns[q] then
      fail(("%s: rank %d owns none of the %d experts; every rank must own at least one")
        :format(who, q, E))
    end
  end
  local mine = venom.tensor(owner, { dtype = "i64" })
  local all = dist.all_gather(mine):totable()
  for q = 1, P - 1 do
    for e = 1, E do
      if all[q * E + e] ~= all[e] then
        fail(("%s: the ranks passed different expert placements (rank %d puts expert %d on "
          .. "rank %d, rank 0 on rank %d)"):format(who, q, e, all[q * E + e], all[e]))
      end
    end
  end
  return owner
end

--- True when module m holds an expert-parallel nn.MoE (at any depth).
function M.is_sharded(m)
  if m.owner and m.experts then return true end
  for _, child in ipairs(m:children()) do
    if M.is_sharded(child) then return true end
  end
  return false
end

-- 1-based rows a .. a + n - 1 appended to the list `into`.
local function append_range(into, a, n)
  for i = a, a + n - 1 do into[#into + 1] = i end
end

--- The expert-parallel dispatch of nn.MoE's forward: xf (T, d) this rank's
-- tokens, r the routing (venom.moe_route), w (S) the kept assignments'
-- combine weights in r's order. Returns out (T, d) and the rows each rank's
-- experts processed (a list of P counts).
function M.forward(moe, xf, r, w, T)
  local dist = require "venom.distributed"
  local P, me, E = dist.world_size(), dist.rank(), moe.config.experts
  local owner = moe.owner
  local load = r.load:totable()
  local first = {} -- where expert e's assignments start in r.tokens
  local at = 1
  for e = 1, E do first[e], at = at, at + load[e] end
  -- This rank's assignments in sending order: by owner rank, then expert.
  local order, send = {}, {}
  for q = 0, P - 1 do
    send[q + 1] = 0
    for e = 1, E do
      if owner[e] == q then
        append_range(order, first[e], load[e])
        send[q + 1] = send[q + 1] + load[e]
      end
    end
  end
  local perm = venom.tensor(order, { dtype = "i64" })
  local tokens, weights = r.tokens:index_select(1, perm), w:index_select(1, perm)
  -- Every rank's load of every expert: where the received rows of each
  -- local expert lie (from rank 0 first, each rank's rows by expert).
  local loads = dist.all_gather(r.load):totable()
  if moe.training then -- the window of venom.nn_moe_placement's scheduler
    local window = moe.window or {}
    for i, n in ipairs(loads) do window[i] = (window[i] or 0) + n end
    moe.window = window
  end
  local recv, recv_counts = dist.all_to_all(xf:index_select(1, tokens), send, P)
  local R = recv:size(1)
  local rows = {}
  for e = 1, E do if owner[e] == me then rows[e] = {} end end
  at = 1
  for q = 0, P - 1 do
    for e = 1, E do
      if owner[e] == me then
        local n = loads[q * E + e]
        append_range(rows[e], at, n)
        at = at + n
      end
    end
  end
  -- An expert that no rank sent a row to is skipped, as without
  -- parallelism (its parameters get no gradient). Every rank knows which
  -- those are (the loads are global), so when all of this rank's experts
  -- are idle the others know it too, and the way back still starts here:
  -- from recv (zero rows) when the tokens need a gradient, else (the input
  -- is data: no backward through the first exchange anywhere) from its
  -- first expert run on zero rows, whose parameters get a zero gradient.
  local done, first_local
  for e = 1, E do
    if owner[e] == me then
      first_local = first_local or e
      if #rows[e] > 0 then
        local idx = venom.tensor(rows[e], { dtype = "i64" })
        local part = venom.scatter_add_rows(moe.experts[e](recv:index_select(1, idx)), idx, nil, R)
        done = done and done + part or part
      end
    end
  end
  if not done then
    done = recv:requires_grad() and recv * 0 or moe.experts[first_local](recv)
  end
  local back = dist.all_to_all(done, recv_counts, 1 / P)
  local per_rank = {}
  for q = 1, P do per_rank[q] = 0 end
  for q = 0, P - 1 do
    for e = 1, E do
      per_rank[owner[e] + 1] = per_rank[owner[e] + 1] + loads[q * E + e]
    end
  end
  return venom.scatter_add_rows(back, tokens, weights, T), per_rank
end

return M
