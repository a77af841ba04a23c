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
--
-- Replicas (FlexMoE's Expand). An expert may live on several ranks, each
-- holding the same weights; its rows are split among them (M.assign), each
-- replica collects the gradient of its rows, and after the backward the
-- replicas all-reduce their gradients (M.sync_replicas), so they hold the
-- gradient of all the expert's rows and stay equal bit for bit. The split
-- changes where a row is computed, not what: the numbers are those of the
-- single expert up to float rounding.
local venom = require "venom"
local util = require "venom.util"
local fail = util.fail

local M = {}

-- A rank (0-based) checked against the world of P ranks.
local function check_rank(v, name, P, who)
  return util.check_int(v, name, { min = 0, max = P - 1, who = who,
    what = ("a rank in 0..%d"):format(P - 1) })
end

--- The ranks (0-based, ascending) that hold each of the E experts, checked:
-- `spec` is true (contiguous blocks: rank q holds experts q·E/P + 1 ..
-- (q+1)·E/P; P must divide E) or a list of E entries, each a rank or a
-- list of ranks (the expert's replicas: FlexMoE's Expand, see
-- M.assign). Every rank must hold at least one expert, and every rank must
-- pass the same placement (compared across the ranks: a difference is an
-- error on every rank). Returns {ranks of expert 1, ...}.
function M.placement(spec, E, who)
  local dist = require "venom.distributed"
  if not dist.is_initialized() then
    fail(who .. ": expert_parallel needs a distributed run; call venom.distributed.init() first")
  end
  local P = dist.world_size()
  local replicas = {}
  if spec == true then
    if E % P ~= 0 then
      fail(("%s: expert_parallel = true splits the %d experts into equal blocks, but %d "
        .. "ranks do not divide %d; pass a list of owner ranks instead"):format(who, E, P, E))
    end
    for e = 1, E do replicas[e] = { math.floor((e - 1) / (E / P)) } end
  elseif type(spec) == "table" then
    if #spec ~= E then
      fail(("%s: expert_parallel lists %d owner ranks for %d experts"):format(who, #spec, E))
    end
    for e = 1, E do
      local name = ("expert_parallel[%d]"):format(e)
      if type(spec[e]) == "table" then
        if #spec[e] == 0 then fail(("%s: %s lists no rank"):format(who, name)) end
        local ranks = {}
        for i, q in ipairs(spec[e]) do
          ranks[i] = check_rank(q, ("%s[%d]"):format(name, i), P, who)
          if i > 1 and ranks[i] <= ranks[i - 1] then
            fail(("%s: %s must list distinct ranks in ascending order, got %s")
              :format(who, name, table.concat(spec[e], ", ")))
          end
        end
        replicas[e] = ranks
      else
        replicas[e] = { check_rank(spec[e], name, P, who) }
      end
    end
  else
    fail(("%s: expert_parallel must be true or a list of %d owner ranks, got %s")
      :format(who, E, tostring(spec)))
  end
  local holds = {} -- holds[q * E + e]: 1 when rank q holds expert e
  for i = 1, P * E do holds[i] = 0 end
  for e = 1, E do
    for _, q in ipairs(replicas[e]) do holds[q * E + e] = 1 end
  end
  for q = 0, P - 1 do
    local any = false
    for e = 1, E do any = any or holds[q * E + e] == 1 end
    if not any then
      fail(("%s: rank %d owns none of the %d experts; every rank must own at least one")
        :format(who, q, E))
    end
  end
  local all = dist.all_gather(venom.tensor(holds, { dtype = "i64" })):totable()
  for q = 1, P - 1 do
    for i = 1, P * E do
      if all[q * P * E + i] ~= all[i] then
        local e, at = (i - 1) % E + 1, math.floor((i - 1) / E)
        fail(("%s: the ranks passed different expert placements (rank %d says rank %d %s expert "
          .. "%d, rank 0 the opposite)"):format(who, q, at, all[q * P * E + i] == 1 and "holds"
          or "does not hold", e))
      end
    end
  end
  return replicas
end

--- True when rank q holds a replica of expert e (replicas[e] its ranks).
function M.holds(replicas, e, q)
  for _, h in ipairs(replicas[e]) do
    if h == q then return true end
  end
  return false
end

--- How the rows of each expert are split among its replicas: for the load
-- of one call or window (source rank q's rows of expert e at load[q·E + e])
-- returns count[e][q + 1][h + 1], the rows of e that rank q sends to rank
-- h. One holder takes them all. R replicas each take a quota of the
-- expert's N rows (⌈N/R⌉ for the first N mod R, ⌊N/R⌋ for the others; so
-- they do equal work), each first from its own rank's rows (which then do
-- not travel), and the rows left over go, source by source in rank order,
-- to the replicas with quota left, in rank order. Every rank computes the
-- same split from the same (global) loads, so senders and receivers agree.
function M.assign(load, replicas, P)
  local E = #replicas
  local count = {}
  for e = 1, E do
    local c, H = {}, replicas[e]
    for q = 1, P do
      c[q] = {}
      for h = 1, P do c[q][h] = 0 end
    end
    if #H == 1 then
      for q = 0, P - 1 do c[q + 1][H[1] + 1] = load[q * E + e] end
    else
      local N, R = 0, #H
      for q = 0, P - 1 do N = N + load[q * E + e] end
      local quota, rest = {}, {}
      for j = 1, R do quota[j] = math.floor(N / R) + (j <= N % R and 1 or 0) end
      for q = 0, P - 1 do rest[q + 1] = load[q * E + e] end
      for j, h in ipairs(H) do -- a replica's own rows first
        local n = math.min(rest[h + 1], quota[j])
        c[h + 1][h + 1], rest[h + 1], quota[j] = n, rest[h + 1] - n, quota[j] - n
      end
      for q = 0, P - 1 do
        for j, h in ipairs(H) do
          local n = math.min(rest[q + 1], quota[j])
          c[q + 1][h + 1] = c[q + 1][h + 1] + n
          rest[q + 1], quota[j] = rest[q + 1] - n, quota[j] - n
        end
      end
    end
    count[e] = c
  end
  return count
end

--- True when module m holds an expert-parallel nn.MoE (at any depth).
function M.is_sharded(m)
  if m.replicas and m.experts then return true end
  for _, child in ipairs(m:children()) do
    if M.is_sharded(child) then return true end
  end
  return false
end

--- The expert placement of the expert-parallel MoE layers in module m, as
-- a string (each layer's experts' ranks, "0+2" for replicas, layers in
-- module order, separated by "|"), for checkpoints.
function M.describe(m)
  local out = {}
  local function walk(x)
    if x.replicas and x.experts then
      local e = {}
      for i, ranks in ipairs(x.replicas) do e[i] = table.concat(ranks, "+") end
      out[#out + 1] = "{" .. table.concat(e, ",") .. "}"
    end
    for _, child in ipairs(x:children()) do walk(child) end
  end
  walk(m)
  return table.concat(out, "|")
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
  local replicas = moe.replicas
  local load = r.load:totable()
  local first = {} -- where expert e's assignments start in r.tokens
  local at = 1
  for e = 1, E do first[e], at = at, at + load[e] end
  -- Every rank's load of every expert, and from it (the same on every rank)
  -- how each expert's rows are split among its replicas.
  local loads = dist.all_gather(r.load):totable()
  if moe.training then -- the window of venom.nn_moe_placement's scheduler
    local window = moe.window or {}
    for i, n in ipairs(loads) do window[i] = (window[i] or 0) + n end
    moe.window, moe.window_calls = window, (moe.window_calls or 0) + 1
  end
  local count = M.assign(loads, replicas, P)
  -- This rank's assignments in sending order: by destination rank, then
  -- expert. Its rows of expert e are cut into consecutive pieces, one per
  -- destination in rank order; piece[e][q + 1] is where rank q's starts.
  local piece = {}
  for e = 1, E do
    piece[e] = {}
    local from = first[e]
    for q = 0, P - 1 do piece[e][q + 1], from = from, from + count[e][me + 1][q + 1] end
  end
  local order, send = {}, {}
  for q = 0, P - 1 do
    send[q + 1] = 0
    for e = 1, E do
      local n = count[e][me + 1][q + 1]
      append_range(order, piece[e][q + 1], n)
      send[q + 1] = send[q + 1] + n
    end
  end
  local perm = venom.tensor(order, { dtype = "i64" })
  local tokens, weights = r.tokens:index_select(1, perm), w:index_select(1, perm)
  local recv, recv_counts = dist.all_to_all(xf:index_select(1, tokens), send, P)
  -- The received rows of each local expert (from rank 0 first, each rank's
  -- rows by expert).
  local R = recv:size(1)
  local rows = {}
  for e = 1, E do if moe.experts[e] then rows[e] = {} end end
  at = 1
  for q = 0, P - 1 do
    for e = 1, E do
      if rows[e] then
        local n = count[e][q + 1][me + 1]
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
  -- An expert with n replicas runs between two scale_grads: its parameters'
  -- gradient is n × this replica's share (the replicas' average, taken
  -- after the backward by M.sync_replicas, is then the whole gradient),
  -- while the rows' gradient is unscaled.
  local done, first_local
  for e = 1, E do
    if rows[e] then
      first_local = first_local or e
      if #rows[e] > 0 then
        local idx = venom.tensor(rows[e], { dtype = "i64" })
        local n = #replicas[e]
        local x = recv:index_select(1, idx)
        local y
        if n > 1 then
          y = dist.scale_grad(moe.experts[e](dist.scale_grad(x, 1 / n)), n)
        else
          y = moe.experts[e](x)
        end
        local part = venom.scatter_add_rows(y, idx, nil, R)
        done = done and done + part or part
      end
    end
  end
  if not done then
    done = recv:requires_grad() and recv * 0 or moe.experts[first_local](recv)
  end
  local back = dist.all_to_all(done, recv_counts, 1 / P)
  local per_rank = {}
  for h = 1, P do
    per_rank[h] = 0
    for e = 1, E do
      for q = 1, P do per_rank[h] = per_rank[h] + count[e][q][h] end
    end
  end
  if venom.is_grad_enabled() then M.queue_sync(moe, loads) end
  return venom.scatter_add_rows(back, tokens, weights, T), per_rank
end

--- After the backward of a call that ran replicated experts: each
-- replica's gradient is n × its share (see M.forward), and the replicas
-- take their average, so each holds the whole gradient, bit for bit the
-- same (the optimizer then moves them alike). The experts are grouped by
-- their set of replica ranks, and each set all-reduces the flat gradients
-- of its experts (each replica's gradient / n, zeros without one) over a
-- group of those ranks alone (dist.new_group, made once per set and kept
-- in moe.replica_groups; on more than 2 ranks the others take no part).
-- Idempotent: replicas that already agree stay as they are, so a second
-- backward before the step (gradient accumulation) is fine. A collective:
-- every rank runs it after the same backward (making a group needs them all).
function M.sync_replicas(moe, experts)
  local dist = require "venom.distributed"
  local me = dist.rank()
  local sets, keys = {}, {} -- experts by replica set, sets in the order first met
  for _, e in ipairs(experts) do
    local key = table.concat(moe.replicas[e], ",")
    if not sets[key] then
      sets[key] = {}
      keys[#keys + 1] = key
    end
    table.insert(sets[key], e)
  end
  moe.replica_groups = moe.replica_groups or {}
  for _, key in ipairs(keys) do
    local list = sets[key]
    local group = moe.replica_groups[key]
    if not group then -- every rank makes it, in the same order (the lists are global)
      group = dist.new_group(moe.replicas[list[1]])
      moe.replica_groups[key] = group
    end
    if group:contains(me) then M.average_replicas(moe, list, group) end
  end
end

-- The average of the experts' gradients over the group of their replicas
-- (this rank one of them).
function M.average_replicas(moe, experts, group)
  local total = 0
  for _, e in ipairs(experts) do total = total + moe.expert_numel[e] end
  local flat = venom.zeros(total)
  venom.no_grad(function()
    local at = 1
    for _, e in ipairs(experts) do
      local inv = 1 / #moe.replicas[e]
      for _, p in ipairs(moe.experts[e]:parameters()) do
        local n = p:numel()
        if p.grad then flat:narrow(1, at, n):copy_(p.grad:reshape(-1) * inv) end
        at = at + n
      end
    end
    group:all_reduce(flat, "sum")
    at = 1
    for _, e in ipairs(experts) do
      for _, p in ipairs(moe.experts[e]:parameters()) do
        local n = p:numel()
        p.grad = flat:narrow(1, at, n):reshape(p:shape()):clone()
        at = at + n
      end
    end
  end)
  flat:free()
end

-- Queues M.sync_replicas for the end of the next backward when some
-- replicated expert got rows in this call (the same decision on every
-- rank: loads are global). One pending sync per layer, over the experts of
-- all its calls since the last backward.
function M.queue_sync(moe, loads)
  local E, P = moe.config.experts, #loads / moe.config.experts
  local pending = moe.pending_sync
  for e = 1, E do
    if #moe.replicas[e] > 1 then
      local n = 0
      for q = 0, P - 1 do n = n + loads[q * E + e] end
      if n > 0 then
        if not pending then
          pending = {}
          moe.pending_sync = pending
          venom.after_backward(function()
            moe.pending_sync = nil
            local list = {}
            for k = 1, E do if pending[k] then list[#list + 1] = k end end
            M.sync_replicas(moe, list)
          end)
        end
        pending[e] = true
      end
    end
  end
end

return M
