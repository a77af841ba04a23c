--- venom.nn_moe_placement — FlexMoE-style dynamic expert placement for an
-- expert-parallel nn.MoE (Nie et al., "FlexMoE: Scaling Large-scale Sparse
-- Pre-trained Model Training via Dynamic Device Placement", SIGMOD 2023),
-- reached as moe:rebalance(opt, opts).
--
-- The layer counts, over the training calls since the last rebalance, the
-- rows each rank sent to each expert (the same table on every rank: the
-- loads are exchanged at each call). From it the scheduler computes the
-- balance ratio (the most rows a rank's experts processed / the mean) and,
-- when it is above a threshold, plans FlexMoE's three moves greedily:
--   Expand  e → q   a new replica of expert e on rank q (the replicas
--                   split e's rows: venom.nn_moe_parallel.assign),
--   Shrink  e @ q   rank q drops its replica of e (e keeps at least one),
--   Migrate e q → t e's replica on q moves to t,
-- with a cost model in units of one row through one expert, over the
-- window's calls:
--   window cost = max over ranks q of (rows q's experts process
--                                      + a2a_cost · rows q sends or receives
--                                      + sync_cost · calls · replicated
--                                        experts q holds a replica of)
-- (sync_cost: the replicas' gradient all-reduce, per call and replica).
-- A move is taken when it lowers the window cost by more than its one-off
-- price (move_cost for Expand and Migrate: sending the expert's weights and
-- optimizer state; Shrink is free), the best net gain first, until the
-- ratio is under the threshold, no move pays, or max_moves. Every rank
-- plans from the same numbers, so all plan the same moves; an Expand or
-- Migrate copies the expert's weights and optimizer state bit for bit, so
-- the training computes the same numbers as without the moves (placement
-- changes speed, not math). Every rank keeps at least one expert.
local venom = require "venom"
local util = require "venom.util"
local parallel = require "venom.nn_moe_parallel"
local fail = util.fail

local M = {}

local DEFAULTS = { threshold = 1.2, a2a_cost = 0.25, move_cost = 64, sync_cost = 16,
                   max_moves = 4, calls = 1, expand = true }

-- The window cost and balance ratio of the placement `replicas` for
-- `load` (source rank q's rows of expert e at load[q * E + e]).
local function window_cost(load, replicas, P, c)
  local E = #replicas
  local count = parallel.assign(load, replicas, P)
  local work, comm, syncs = {}, {}, {}
  for q = 1, P do work[q], comm[q], syncs[q] = 0, 0, 0 end
  for e = 1, E do
    for q = 1, P do
      for h = 1, P do
        local n = count[e][q][h]
        work[h] = work[h] + n
        if h ~= q then -- sent by q, received by h, and the outputs come back
          comm[q], comm[h] = comm[q] + n, comm[h] + n
        end
      end
    end
    if #replicas[e] > 1 then
      for _, h in ipairs(replicas[e]) do syncs[h + 1] = syncs[h + 1] + 1 end
    end
  end
  local cost, max_work, total = 0, 0, 0
  for q = 1, P do
    cost = math.max(cost, work[q] + c.a2a_cost * comm[q] + c.sync_cost * c.calls * syncs[q])
    max_work, total = math.max(max_work, work[q]), total + work[q]
  end
  return cost, total > 0 and max_work / (total / P) or 1
end

-- A copy of the placement (lists of ranks) with rank `add` added to and
-- rank `drop` removed from expert e's list (kept ascending); with no e, a
-- plain copy.
local function with(replicas, e, add, drop)
  local out = {}
  for k, ranks in ipairs(replicas) do
    local list = {}
    for _, q in ipairs(ranks) do
      if not (k == e and q == drop) then list[#list + 1] = q end
    end
    if k == e and add then
      list[#list + 1] = add
      table.sort(list)
    end
    out[k] = list
  end
  return out
end

--- The moves for `load` (the P·E rows of the window: source rank q's rows
-- of expert e at q·E + e) from the placement `replicas` (for each of the E
-- experts the ascending list of ranks that hold it, 0-based), and the
-- balance ratio before and after them. opts (defaults): threshold = 1.2,
-- a2a_cost = 0.25, move_cost = 64 (rows), sync_cost = 16 (rows per call
-- and replica), max_moves = 4, calls = 1 (calls in the window: the
-- per-call sync cost is counted that many times), expand = true (false:
-- no Expand, so Migrate moves only, and Shrink for replicas there are).
-- Returns {moves = {{kind
-- = "expand" | "shrink" | "migrate", expert, from, to}, ...}, ratio,
-- planned_ratio, cost, planned_cost, replicas = the planned placement};
-- Expand copies from `from` (the expert's first holder) to `to`, Shrink
-- drops the replica on `from` (to = nil). `replicas` is not changed.
function M.plan(load, replicas, P, opts)
  local who = "nn.MoE:rebalance"
  opts = util.check_options(opts, { "threshold", "a2a_cost", "move_cost", "sync_cost",
    "max_moves", "calls", "expand" }, who)
  local c = {}
  for k, v in pairs(DEFAULTS) do c[k] = opts[k] == nil and v or opts[k] end
  for _, k in ipairs({ "threshold", "a2a_cost", "move_cost", "sync_cost" }) do
    if type(c[k]) ~= "number" or not (c[k] >= 0 and c[k] < math.huge) then
      fail(("%s: %s must be a finite number >= 0, got %s"):format(who, k, tostring(c[k])))
    end
  end
  util.check_int(c.max_moves, "max_moves", { min = 0, who = who })
  util.check_int(c.calls, "calls", { min = 1, who = who })
  if type(c.expand) ~= "boolean" then
    fail(("%s: expand must be true or false, got %s"):format(who, tostring(c.expand)))
  end
  local E = #replicas
  local place = with(replicas)
  local cost, ratio = window_cost(load, place, P, c)
  local out = { moves = {}, ratio = ratio, cost = cost }
  while ratio > c.threshold and #out.moves < c.max_moves do
    local held = {} -- experts each rank holds
    for q = 0, P - 1 do held[q] = 0 end
    for e = 1, E do
      for _, q in ipairs(place[e]) do held[q] = held[q] + 1 end
    end
    local best -- the move with the largest net gain > 0
    local function try(mv, price, trial)
      local gain = cost - window_cost(load, trial, P, c) - price
      if gain > 0 and (not best or gain > best.gain) then
        best = { gain = gain, move = mv, place = trial }
      end
    end
    for e = 1, E do
      local ranks = place[e]
      for to = 0, P - 1 do
        if not parallel.holds(place, e, to) then
          for _, from in ipairs(ranks) do -- Migrate: from keeps another expert
            if held[from] > 1 then
              try({ kind = "migrate", expert = e, from = from, to = to }, c.move_cost,
                with(place, e, to, from))
            end
          end
          if c.expand then
            try({ kind = "expand", expert = e, from = ranks[1], to = to }, c.move_cost,
              with(place, e, to))
          end
        end
      end
      if #ranks > 1 then
        for _, at in ipairs(ranks) do -- Shrink: at keeps another expert
          if held[at] > 1 then
            try({ kind = "shrink", expert = e, from = at }, 0, with(place, e, nil, at))
          end
        end
      end
    end
    if not best then break end
    out.moves[#out.moves + 1] = best.move
    place = best.place
    cost, ratio = window_cost(load, place, P, c)
  end
  out.planned_ratio, out.planned_cost, out.replicas = ratio, cost, place
  return out
end

-- A number (an optimizer's step count) from rank `root`, exactly.
local function broadcast_int(dist, v, root)
  local t = venom.tensor({ v or -1 }, { dtype = "i64" })
  dist.broadcast(t, root)
  return t:totable()[1]
end

--- Expand: rank `to` gets a replica of expert e copied from rank `from`
-- (one of e's holders), with its optimizer state in `opt` (the optimizer
-- that holds the experts' parameters on every rank; nil: weights only),
-- bit for bit. A collective: every rank calls it with the same arguments.
function M.expand(moe, e, from, to, opt)
  local dist = require "venom.distributed"
  local me = dist.rank()
  -- A template of the expert on every rank, to receive into (its random
  -- draws undone: the ranks' random streams stay in step).
  local rng = venom.get_rng_state()
  local fresh = moe:build_expert(e)
  venom.set_rng_state(rng)
  local old = me == from and moe.experts[e] or nil
  local sd = (old or fresh):state_dict()
  venom.no_grad(function()
    for _, k in ipairs(util.sorted_keys(sd)) do
      if venom.is_tensor(sd[k]) then
        sd[k] = sd[k]:contiguous()
        dist.broadcast(sd[k], from)
      end
    end
  end)
  if me == to then fresh:load_state_dict(sd) end
  local fields = opt and opt._state_fields or {}
  local old_params, new_params = old and old:parameters(), fresh:parameters()
  for i, p in ipairs(new_params) do
    local st = old and opt and opt.state[old_params[i]]
    local has = broadcast_int(dist, st and 1 or 0, from) == 1
    if has then
      local moved = {}
      for _, field in ipairs(util.sorted_keys(fields)) do
        if fields[field] == "number" then
          moved[field] = broadcast_int(dist, st and st[field], from)
        else
          local v = st and st[field]:contiguous() or venom.zeros(p:shape())
          moved[field] = dist.broadcast(v, from)
        end
      end
      if me == to then opt:add_parameter(p, moved) end
    elseif me == to and opt then
      opt:add_parameter(p)
    end
  end
  if me == to then moe.experts[e] = fresh end
  moe.replicas[e] = with(moe.replicas, e, to)[e]
end

--- Shrink: rank `at` drops its replica of expert e (and the replica's
-- parameters from `opt`). e must keep another replica. Every rank calls it.
function M.shrink(moe, e, at, opt)
  local dist = require "venom.distributed"
  if dist.rank() == at then
    if opt then
      for _, p in ipairs(moe.experts[e]:parameters()) do opt:remove_parameter(p) end
    end
    moe.experts[e] = nil
  end
  moe.replicas[e] = with(moe.replicas, e, nil, at)[e]
end

--- Moves expert e's replica on rank `from` to rank `to` (Expand on `to`,
-- then Shrink on `from`), with its optimizer state in `opt`. A collective.
function M.migrate(moe, e, from, to, opt)
  M.expand(moe, e, from, to, opt)
  M.shrink(moe, e, from, opt)
end

--- Plans (M.plan on the calls since the last rebalance) and applies the
-- moves; resets the window. Returns the plan.
function M.rebalance(moe, opt, opts)
  if not moe.replicas then
    fail("nn.MoE:rebalance: the layer is not expert-parallel (expert_parallel)")
  end
  if moe.pending_sync then
    fail("nn.MoE:rebalance: a forward of this layer has not had its backward yet (its replicas' "
      .. "gradients are not reduced); rebalance between opt:step() and the next forward")
  end
  -- opt is checked before any move: a move is a collective, and an
  -- optimizer that lacks the experts' parameters would fail on one rank
  -- half-way (remove_parameter) or silently drop their state.
  if opt ~= nil then
    if type(opt) ~= "table" or type(opt.params) ~= "table"
      or type(opt.add_parameter) ~= "function" then
      fail(("nn.MoE:rebalance: opt must be the optimizer that holds the experts' parameters "
        .. "(optim.SGD, Adam, AdamW) or nil, got a %s"):format(type(opt)))
    end
    local held = {}
    for _, p in ipairs(opt.params) do held[p] = true end
    for _, p in ipairs(moe.experts:parameters()) do
      if not held[p] then
        fail("nn.MoE:rebalance: opt does not hold this rank's expert parameters; pass the "
          .. "optimizer built over them (or nil to move weights without optimizer state)")
      end
    end
  end
  local dist = require "venom.distributed"
  local E, P = moe.config.experts, dist.world_size()
  local window = moe.window or {}
  for i = 1, P * E do window[i] = window[i] or 0 end
  local o = opts -- calls defaults to the window's
  if o == nil or type(o) == "table" and o.calls == nil then
    o = {}
    for k, v in pairs(opts or {}) do o[k] = v end
    o.calls = moe.window_calls or 1
  end
  local plan = M.plan(window, moe.replicas, P, o)
  for _, mv in ipairs(plan.moves) do
    if mv.kind == "expand" then M.expand(moe, mv.expert, mv.from, mv.to, opt)
    elseif mv.kind == "shrink" then M.shrink(moe, mv.expert, mv.from, opt)
    else M.migrate(moe, mv.expert, mv.from, mv.to, opt) end
  end
  moe.window, moe.window_calls = nil, nil
  return plan
end

return M
