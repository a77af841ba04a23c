--- venom.nn_moe_placement — FlexMoE-style dynamic expert placement for an
-- expert-parallel nn.MoE (Nie et al., "FlexMoE: Scaling Large-scale Sparse
-- Pre-trained Model Training via Dynamic Device Placement", SIGMOD 2023),
-- reached as moe:rebalance(opt, opts).
--
-- The layer counts, over the training calls since the last rebalance, the
-- rows each rank sent to each expert (the same table on every rank: the
-- loads are exchanged at each call). From it the scheduler computes the
-- balance ratio (the most rows a rank's experts processed / the mean) and,
-- when it is above a threshold, plans Migrate moves greedily with a cost
-- model in units of one row through one expert:
--   step cost = max over ranks q of (rows q's experts process
--                                    + a2a_cost · rows q sends or receives)
-- A move (expert e from its rank to another) is taken when it lowers the
-- cost of the observed window by more than move_cost (the one-off price of
-- moving the expert's weights and optimizer state), best move first, until
-- the ratio is under the threshold, no move pays, or max_moves. Every rank
-- plans from the same numbers, so all plan the same moves; then each move
-- sends the expert's weights and optimizer state from its old rank to its
-- new one, bit for bit, so the training computes the same numbers as
-- without the move (placement changes speed, not math).
--
-- Not built: FlexMoE's Expand and Shrink (replicas of a hot expert that
-- split its tokens and all-reduce their gradients among themselves); the
-- layer's placement is one owner per expert.
local venom = require "venom"
local util = require "venom.util"
local fail = util.fail

local M = {}

local DEFAULTS = { threshold = 1.2, a2a_cost = 0.25, move_cost = 64, max_moves = 4 }

-- Per-rank rows processed and rows exchanged under `owner`, from load
-- (source rank q, expert e) at load[q * E + e].
local function rank_costs(load, owner, P, E, a2a_cost)
  local work, comm = {}, {}
  for q = 1, P do work[q], comm[q] = 0, 0 end
  for q = 0, P - 1 do
    for e = 1, E do
      local n, to = load[q * E + e], owner[e]
      work[to + 1] = work[to + 1] + n
      if to ~= q then -- sent by q, received by `to`, and the outputs come back
        comm[q + 1] = comm[q + 1] + n
        comm[to + 1] = comm[to + 1] + n
      end
    end
  end
  local cost, max_work, total = 0, 0, 0
  for q = 1, P do
    cost = math.max(cost, work[q] + a2a_cost * comm[q])
    max_work, total = math.max(max_work, work[q]), total + work[q]
  end
  return cost, total > 0 and max_work / (total / P) or 1
end

--- The moves for `load` (the P·E rows of M.window: source rank q's rows
-- of expert e at q·E + e) under `owner` (E ranks, 0-based), and the
-- balance ratio before and after them. opts (defaults): threshold = 1.2,
-- a2a_cost = 0.25, move_cost = 64 (rows), max_moves = 4. Returns
-- {moves = {{expert, from, to}, ...}, ratio, planned_ratio, cost,
-- planned_cost}; the placement `owner` is not changed.
function M.plan(load, owner, P, opts)
  local who = "nn.MoE:rebalance"
  opts = util.check_options(opts, { "threshold", "a2a_cost", "move_cost", "max_moves" }, who)
  local c = {}
  for k, v in pairs(DEFAULTS) do c[k] = opts[k] == nil and v or opts[k] end
  for _, k in ipairs({ "threshold", "a2a_cost", "move_cost" }) do
    if type(c[k]) ~= "number" or not (c[k] >= 0 and c[k] < math.huge) then
      fail(("%s: %s must be a finite number >= 0, got %s"):format(who, k, tostring(c[k])))
    end
  end
  util.check_int(c.max_moves, "max_moves", { min = 0, who = who })
  local E = #owner
  local place = {}
  for e = 1, E do place[e] = owner[e] end
  local cost, ratio = rank_costs(load, place, P, E, c.a2a_cost)
  local out = { moves = {}, ratio = ratio, cost = cost }
  while ratio > c.threshold and #out.moves < c.max_moves do
    local count = {}
    for e = 1, E do count[place[e]] = (count[place[e]] or 0) + 1 end
    local best, best_e, best_to = cost, nil, nil
    for e = 1, E do
      local from = place[e]
      if count[from] > 1 then -- every rank keeps an expert
        for to = 0, P - 1 do
          if to ~= from then
            place[e] = to
            local try = rank_costs(load, place, P, E, c.a2a_cost)
            if try < best then best, best_e, best_to = try, e, to end
            place[e] = from
          end
        end
      end
    end
    if not best_e or cost - best <= c.move_cost then break end
    out.moves[#out.moves + 1] = { expert = best_e, from = place[best_e], to = best_to }
    place[best_e] = best_to
    cost, ratio = rank_costs(load, place, P, E, c.a2a_cost)
  end
  out.planned_ratio, out.planned_cost = ratio, cost
  return out
end

-- A number (an optimizer's step count) from rank `root`, exactly.
local function broadcast_int(dist, v, root)
  local t = venom.tensor({ v or -1 }, { dtype = "i64" })
  dist.broadcast(t, root)
  return t:totable()[1]
end

--- Moves expert e of `moe` to rank `to`, with its optimizer state in `opt`
-- (the optimizer that holds the experts' parameters on every rank; nil:
-- weights only). A collective: every rank calls it with the same e and to.
function M.migrate(moe, e, to, opt)
  local dist = require "venom.distributed"
  local me, from = dist.rank(), moe.owner[e]
  if from == to then return end
  -- A template of the expert on every rank, to receive into (its random
  -- draws undone: the ranks' random streams stay in step).
  local rng = venom.get_rng_state()
  local fresh = moe:build_expert(e)
  venom.set_rng_state(rng)
  local old = me == from and moe.experts[e] or nil
  local sd, names = (old or fresh):state_dict(), nil
  names = util.sorted_keys(sd)
  venom.no_grad(function()
    for _, k in ipairs(names) do
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
  if old and opt then
    for _, p in ipairs(old_params) do opt:remove_parameter(p) end
  end
  if me == from then moe.experts[e] = nil end
  if me == to then moe.experts[e] = fresh end
  moe.owner[e] = to
end

--- Plans (M.plan on the calls since the last rebalance) and applies the
-- moves; resets the window. Returns the plan.
function M.rebalance(moe, opt, opts)
  if not moe.owner then fail("nn.MoE:rebalance: the layer is not expert-parallel (expert_parallel)") end
  local dist = require "venom.distributed"
  local E, P = moe.config.experts, dist.world_size()
  local window = moe.window or {}
  for i = 1, P * E do window[i] = window[i] or 0 end
  local plan = M.plan(window, moe.owner, P, opts)
  for _, mv in ipairs(plan.moves) do M.migrate(moe, mv.expert, mv.to, opt) end
  moe.window = nil
  return plan
end

return M
