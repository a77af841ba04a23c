-- Expert parallelism under `mpirun -np 2`: nn.MoE with expert_parallel
-- keeps each rank's experts only and exchanges the tokens with
-- all_to_all. The reference is the same model with all experts in this
-- process, run on both ranks' shares of each batch (each share routed on
-- its own, as each rank routes its own): the losses over 10 AdamW steps and
-- every gradient of the first step must agree within float rounding, for
-- several placements (placement changes where an expert runs, not what it
-- computes). Also: the differentiable all_to_all, a rank whose experts get
-- no token, and bad placements.
local tap = require "tests.dist.disttap"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local dist = require "venom.distributed"

local r, P = dist.rank(), dist.world_size()
local TOL = 1e-5

-- all_to_all's backward sends the gradient back where the rows came from:
-- with loss ½Σy², dL/dy = y, so x.grad must be grad_scale · x exactly.
do
  venom.manual_seed(10 + r)
  local x = venom.randn(4, 3):requires_grad_(true)
  local counts = r == 0 and { 1, 3 } or { 2, 2 }
  local y, got = dist.all_to_all(x, counts, 0.5)
  local loss = (y * y):sum() * 0.5
  loss:backward()
  local d = (x.grad - x:detach() * 0.5):abs():max():item()
  tap.ok(d == 0 and y:size(1) == (r == 0 and 3 or 5) and got[1] == (r == 0 and 1 or 3),
    ("all_to_all is differentiable: the gradient goes back to the sending rank, times "
      .. "grad_scale (error %g)"):format(d))
end

tap.error_like(function() dist.all_to_all(venom.randn(2, 3), { 1, 1 }, 0 / 0) end,
  "grad_scale = %-?nan; expected a finite number", "a grad_scale that is not finite is refused")

local criterion = nn.CrossEntropyLoss()
local D, H, E, C = 8, 16, 4, 3

local function build(moe_opts)
  return nn.Sequential(nn.Linear(D, H), nn.MoE(H, 24, moe_opts), nn.Linear(H, C))
end

-- loss of a model on (x, y): cross-entropy plus the MoE's balance loss.
local function loss_of(m, x, y)
  local l = criterion(m(x), y)
  return l + m[2].aux_loss
end

-- The largest relative difference between the gradients of the
-- expert-parallel model's parameters and the reference's of the same name.
local function grad_difference(model, ref)
  local want = {}
  for _, np in ipairs(ref:named_parameters()) do want[np[1]] = np[2] end
  local worst = 0
  for _, np in ipairs(model:named_parameters()) do
    local g, w = np[2].grad, want[np[1]].grad
    if g and w then
      local scale = math.max(w:abs():max():item(), 1e-30)
      worst = math.max(worst, (g - w):abs():max():item() / scale)
    elseif g or w then -- an expert no token reached gets no gradient in both, or it is a difference
      worst = math.huge
    end
  end
  return worst
end

-- Trains the reference (all experts, both shares of each batch) and the
-- expert-parallel model (this rank's share) side by side.
local function equivalence(opts, steps, prepare, after_step)
  local moe_opts = { experts = E, k = opts.k, capacity_factor = opts.capacity_factor }
  venom.manual_seed(42)
  local ref = build(moe_opts)
  moe_opts.expert_parallel = opts.placement
  venom.manual_seed(42)
  local model = build(moe_opts)
  if prepare then prepare(ref); prepare(model) end
  local dp = dist.DataParallel(model)
  local ref_opt = optim.AdamW(ref:parameters(), { lr = 1e-2 })
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  venom.manual_seed(7)
  local X, Y = venom.randn(steps * 16, D), (venom.rand(steps * 16) * C):long() + 1
  local worst_loss, worst_grad, rank_balance = 0, 0, {}
  for step = 1, steps do
    local x, y = X:narrow(1, (step - 1) * 16 + 1, 16), Y:narrow(1, (step - 1) * 16 + 1, 16)
    ref_opt:zero_grad()
    local l_ref = nil
    for q = 0, P - 1 do
      local lq = loss_of(ref, x:narrow(1, q * 8 + 1, 8), y:narrow(1, q * 8 + 1, 8)) / P
      l_ref = l_ref and l_ref + lq or lq
    end
    l_ref:backward()
    opt:zero_grad()
    local l = loss_of(dp, x:narrow(1, r * 8 + 1, 8), y:narrow(1, r * 8 + 1, 8))
    l:backward()
    worst_grad = math.max(worst_grad, dist.all_reduce_number(grad_difference(model, ref), "max"))
    ref_opt:step(); opt:step()
    if after_step then after_step(step, model, opt) end
    local global = dist.all_reduce_number(l:item(), "avg")
    worst_loss = math.max(worst_loss, math.abs(global - l_ref:item()) / math.abs(l_ref:item()))
    rank_balance[step] = model[2].stats.rank_balance
  end
  dp:free()
  return worst_loss, worst_grad, model, rank_balance
end

do
  local wl, wg, model = equivalence({ k = 1, capacity_factor = 1.25, placement = true }, 10)
  local local_experts = #model[2].experts:children()
  tap.ok(wl < TOL and wg < TOL and local_experts == E / P, ("Switch (k = 1, capacity 1.25), "
    .. "experts 1-2 on rank 0, 3-4 on rank 1: 2 ranks give the 1-process losses over 10 steps "
    .. "(max relative difference %.2g) and gradients (%.2g); %d experts held here"):format(wl, wg,
      local_experts))
end

do
  local wl, wg, model, balance = equivalence({ k = 2, capacity_factor = math.huge,
    placement = { 1, 0, 0, 1 } }, 10)
  local st = model[2].stats
  local total = 0
  for _, v in ipairs(st.rank_load) do total = total + v end
  tap.ok(wl < TOL and wg < TOL, ("k = 2, placement {1, 0, 0, 1}: the same losses (%.2g) and "
    .. "gradients (%.2g)"):format(wl, wg))
  tap.ok(total == 2 * 16 and #st.rank_load == P and balance[10] >= 1,
    ("stats.rank_load counts every (token, expert) row of the global batch once (%d = 2 × 16), "
      .. "rank_balance %.3g"):format(total, balance[10]))
end

-- A zero router: every token's scores tie and it goes to expert 1 (the
-- lower expert first), so rank 1's experts get no row in the first step
-- (and no gradient, as in the reference), yet both exchanges' backwards
-- still meet on every rank.
do
  local zero_router = function(m) venom.no_grad(function() m[2].router.weight:fill_(0) end) end
  local wl, wg = equivalence({ k = 1, capacity_factor = math.huge, placement = true }, 3,
    zero_router)
  tap.ok(wl < TOL and wg < TOL, ("all tokens on rank 0's expert (rank 1's get none): the same "
    .. "losses (%.2g) and gradients (%.2g)"):format(wl, wg))
end

-- The tiny GPT with an expert-parallel MoE in both blocks: 2 ranks × batch
-- 4 against the model with all experts on both shares, 5 steps.
do
  local GPT = require "models.gpt"
  local V, T = 32, 8
  local function gpt(ep)
    return GPT({ vocab_size = V, block_size = T, n_layer = 2, n_head = 2, n_embd = 16, dropout = 0,
                 moe = { experts = 4, k = 1, every = 1, expert_parallel = ep } })
  end
  venom.manual_seed(42)
  local ref = gpt(nil)
  venom.manual_seed(42)
  local model = gpt(true)
  local dp = dist.DataParallel(model)
  local ref_opt = optim.AdamW(ref:parameters(), { lr = 1e-2 })
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  venom.manual_seed(9)
  local tokens = (venom.rand(5 * 8, T + 1) * V):long() + 1
  local worst = 0
  for step = 1, 5 do
    local w = tokens:narrow(1, (step - 1) * 8 + 1, 8)
    local x, y = w:narrow(2, 1, T):contiguous(), w:narrow(2, 2, T):contiguous()
    ref_opt:zero_grad()
    local l_ref = (ref:loss(x:narrow(1, 1, 4), y:narrow(1, 1, 4))
      + ref:loss(x:narrow(1, 5, 4), y:narrow(1, 5, 4))) / 2
    l_ref:backward()
    ref_opt:step()
    opt:zero_grad()
    local l = dp:loss(x:narrow(1, r * 4 + 1, 4), y:narrow(1, r * 4 + 1, 4))
    l:backward()
    opt:step()
    local global = dist.all_reduce_number(l:item(), "avg")
    worst = math.max(worst, math.abs(global - l_ref:item()) / math.abs(l_ref:item()))
  end
  dp:free()
  tap.ok(worst < TOL, ("GPT (tiny, MoE in both blocks, 2 of 4 experts per rank): 2 ranks × batch "
    .. "4 give the 1-process losses over 5 steps (max relative difference %.2g)"):format(worst))
end

-- An expert with replicas (FlexMoE's Expand): expert 1 on both ranks, which
-- split its rows and average their gradients after each backward. The
-- numbers stay the 1-process ones, and the two replicas stay bitwise
-- equal (same gradient, same AdamW step).
local parallel = require "venom.nn_moe_parallel"
local placement = require "venom.nn_moe_placement"

-- The largest difference between this rank's and the other ranks'
-- parameters of expert e (0 when they are bit for bit the same).
local function replica_spread(moe, e)
  local flat = {}
  for _, p in ipairs(moe.experts[e]:parameters()) do flat[#flat + 1] = p:detach():reshape(-1) end
  local mine = venom.cat(flat, 1)
  local all = dist.all_gather(mine)
  local n, worst = mine:size(1), 0
  for q = 1, P - 1 do
    worst = math.max(worst, (all:narrow(1, q * n + 1, n) - all:narrow(1, 1, n)):abs():max():item())
  end
  return worst
end

do
  local split_rows
  local wl, wg, model = equivalence({ k = 2, capacity_factor = math.huge,
    placement = { { 0, 1 }, 0, 1, 1 } }, 10, nil, function(step, m)
      if step == 1 then split_rows = m[2].stats.rank_load end
    end)
  tap.ok(wl < TOL and wg < TOL and replica_spread(model[2], 1) == 0,
    ("expert 1 replicated on both ranks (placement {{0, 1}, 0, 1, 1}), k = 2: the 1-process "
      .. "losses (%.2g) and gradients (%.2g), replicas bitwise equal after 10 steps; rows per "
      .. "rank in step 1: %d, %d"):format(wl, wg, split_rows[1], split_rows[2]))
end

-- Expert 1 (rank 0) takes almost every token (a router that prefers it):
-- after step 2 rebalance replicates it (Expand, with its AdamW state), after
-- step 5 rank 0 drops its replica again (Shrink); the numbers stay the
-- 1-process ones throughout.
do
  local kinds, spread = {}, -1
  local wl, wg, model = equivalence({ k = 1, capacity_factor = math.huge, placement = true }, 8,
    function(m) venom.no_grad(function() m[2].router.weight:narrow(1, 1, 1):add_(2) end) end,
    function(step, m, opt)
      if step == 2 then
        local plan = m[2]:rebalance(opt, { threshold = 1, a2a_cost = 0, move_cost = 0,
                                           sync_cost = 0 })
        for _, mv in ipairs(plan.moves) do kinds[#kinds + 1] = mv.kind .. " " .. mv.expert end
      elseif step == 5 then
        spread = replica_spread(m[2], 1)
        placement.shrink(m[2], 1, 0, opt)
        kinds[#kinds + 1] = "shrink 1"
      end
    end)
  local held = 0
  for e = 1, E do if parallel.holds(model[2].replicas, e, r) then held = held + 1 end end
  local expanded = kinds[1] and kinds[1]:match("^expand 1") ~= nil
  tap.ok(expanded and wl < TOL and wg < TOL and spread == 0 and #model[2].replicas[1] == 1
    and held == #model[2].experts:children(), ("Expand of the hot expert after step 2 (%s), "
      .. "Shrink after step 5: the losses (%.2g) and gradients (%.2g) stay the 1-process ones, "
      .. "the replicas were bitwise equal (%g)"):format(table.concat(kinds, ", "), wl, wg, spread))
end

-- The FlexMoE scheduler's plan on a skewed load: experts 1 and 2 (rank 0)
-- get 80 and 60 rows, 3 and 4 (rank 1) 10 each: ratio 140 / 80 = 1.75.
-- Moving expert 2 to rank 1 gives 80 / 80 (ratio 1); moving expert 1 only
-- 100 / 80; replicating expert 1 on rank 1 100 / 80 too.
do
  local load = { 40, 30, 5, 5, 40, 30, 5, 5 }
  local blocks = { { 0 }, { 0 }, { 1 }, { 1 } }
  local plan = placement.plan(load, blocks, 2, { a2a_cost = 0, move_cost = 0 })
  local mv = plan.moves[1] or {}
  tap.ok(#plan.moves == 1 and mv.kind == "migrate" and mv.expert == 2 and mv.from == 0
    and mv.to == 1 and plan.ratio == 1.75 and plan.planned_ratio == 1,
    ("the scheduler moves expert 2 to rank 1 (%d moves, ratio %g → %g)")
      :format(#plan.moves, plan.ratio, plan.planned_ratio))
  local dear = placement.plan(load, blocks, 2, { a2a_cost = 0, move_cost = 1000 })
  tap.ok(#dear.moves == 0 and dear.planned_ratio == 1.75,
    "a move that costs more than it saves is not planned")
  -- Three hot experts (40 rows from each rank each) on two ranks: Migrate
  -- alone stays at 160 / 120 = 4/3; a replica of expert 1 on rank 1 splits
  -- its 80 rows 40 / 40 (each replica its own rank's rows): 120 / 120.
  local hot = { 40, 40, 40, 0, 40, 40, 40, 0 }
  local only = placement.plan(hot, blocks, 2, { a2a_cost = 0, move_cost = 0, expand = false })
  local rep = placement.plan(hot, blocks, 2, { a2a_cost = 0, move_cost = 0, sync_cost = 0 })
  mv = rep.moves[1] or {}
  tap.ok(math.abs(only.planned_ratio - 4 / 3) < 1e-12 and #rep.moves == 1 and mv.kind == "expand"
    and mv.expert == 1 and mv.from == 0 and mv.to == 1 and rep.planned_ratio == 1
    and rep.replicas[1][1] == 0 and rep.replicas[1][2] == 1,
    ("3 hot experts on 2 ranks: Migrate alone reaches ratio %.4g, Expand of expert 1 onto rank "
      .. "1 reaches %g"):format(only.planned_ratio, rep.planned_ratio))
  -- A replica whose expert gets no row only costs its gradient all-reduce:
  -- Shrink drops it (on the first holder) when sync_cost > 0.
  local cold = placement.plan({ 0, 40, 0, 0, 0, 0, 20, 20 }, { { 0, 1 }, { 0 }, { 1 }, { 1 } }, 2,
    { threshold = 0, a2a_cost = 0, move_cost = 0, sync_cost = 5 })
  mv = cold.moves[1] or {}
  tap.ok(#cold.moves == 1 and mv.kind == "shrink" and mv.expert == 1 and mv.from == 0
    and cold.planned_cost == 40, ("a cold replica is shrunk (%d moves: %s %s, cost %g → %g)")
      :format(#cold.moves, tostring(mv.kind), tostring(mv.expert), cold.cost, cold.planned_cost))
  -- The split of an expert's rows among its replicas: each takes its quota
  -- (⌈N/R⌉ first), its own rank's rows first.
  local c = parallel.assign({ 7, 0, 2, 0 }, { { 0, 1 }, { 1 } }, 2)
  tap.ok(c[1][1][1] == 5 and c[1][1][2] == 2 and c[1][2][2] == 2 and c[1][2][1] == 0
    and c[2][1][2] == 0, ("expert 1 with 7 + 2 rows on replicas 0 and 1: 5 stay on rank 0, 2 "
      .. "go to rank 1, rank 1 keeps its 2 (%d %d %d %d)"):format(c[1][1][1], c[1][1][2],
        c[1][2][1], c[1][2][2]))
end

-- Rebalancing during training: after step 3 the scheduler moves experts
-- (weights and AdamW state) between the ranks; the losses and gradients of
-- the following steps are still those of the one-process model.
do
  local moves = 0
  local wl, wg, model = equivalence({ k = 1, capacity_factor = math.huge, placement = true }, 8,
    function(m) -- a router that prefers expert 1: rank 0 overloaded
      venom.no_grad(function() m[2].router.weight:narrow(1, 1, 1):add_(0.5) end)
    end, function(step, m, opt)
      if step == 3 then
        local plan = m[2]:rebalance(opt, { threshold = 1, a2a_cost = 0, move_cost = 0,
                                           expand = false })
        moves = #plan.moves
      end
    end)
  local held = 0
  for e = 1, E do if parallel.holds(model[2].replicas, e, r) then held = held + 1 end end
  tap.ok(moves > 0 and wl < TOL and wg < TOL and held == #model[2].experts:children(),
    ("rebalance (Migrate only) after step 3 moved %d experts; the losses (%.2g) and gradients "
      .. "(%.2g) stay the 1-process ones"):format(moves, wl, wg))
end

-- Checkpoints of an expert-parallel model: each rank writes its own file
-- (rank 0 `path`, rank 1 `path.rank1`) with its experts and their AdamW
-- state; a fresh model with the same placement resumes and trains on as the
-- uninterrupted one does, bit for bit. Another placement, another world
-- size and a missing rank file are refused on every rank, changing nothing.
do
  local checkpoint = require "venom.checkpoint"
  local path = ("%s/venom-ep-%d.safetensors"):format(os.getenv("TMPDIR") or "/tmp",
    dist.all_reduce_number(r == 0 and os.time() or 0, "max"))
  local mine = r == 0 and path or path .. ".rank" .. r
  local function setup(placement)
    venom.manual_seed(42)
    local m = build({ experts = E, k = 2, capacity_factor = math.huge, expert_parallel = placement })
    return m, dist.DataParallel(m), optim.AdamW(m:parameters(), { lr = 1e-2 })
  end
  venom.manual_seed(7)
  local X, Y = venom.randn(6 * 16, D), (venom.rand(6 * 16) * C):long() + 1
  local function train(dp, opt, from, to)
    local losses = {}
    for step = from, to do
      local at = (step - 1) * 16 + r * 8 + 1
      opt:zero_grad()
      local l = loss_of(dp, X:narrow(1, at, 8), Y:narrow(1, at, 8))
      l:backward()
      opt:step()
      losses[#losses + 1] = l:item()
    end
    return losses
  end
  local placement = { { 0, 1 }, 0, 1, 1 }
  local _, dp, opt = setup(placement)
  train(dp, opt, 1, 3)
  checkpoint.save(path, { model = dp, optim = opt }, { step = 3 })
  local want = train(dp, opt, 4, 6)
  dp:free()
  local m2, dp2, opt2 = setup(placement)
  local meta = checkpoint.load(path, { model = dp2, optim = opt2 })
  local got = train(dp2, opt2, 4, 6)
  local same = #got == 3
  for i = 1, 3 do same = same and got[i] == want[i] end
  tap.ok(meta.step == "3" and same and dist.all_reduce_number(same and 0 or 1, "max") == 0,
    ("an expert-parallel checkpoint (one file per rank, expert 1 replicated) resumes: steps 4-6 "
      .. "give the uninterrupted run's losses bit for bit (%.6g %.6g %.6g)"):format(got[1], got[2], got[3]))

  -- a refused load leaves the model as it was (m2 has trained 3 steps past the file)
  local function unchanged_after(fn)
    local before = m2[1].weight:clone()
    local ok, err = pcall(fn)
    return not ok and (m2[1].weight - before):abs():max():item() == 0, err
  end
  local _, dp3, opt3 = setup({ 0, 0, 1, 1 })
  tap.error_like(function() checkpoint.load(path, { model = dp3, optim = opt3 }) end,
    "was written with the expert placement {0%+1,0,1,1} and the model has {0,0,1,1}",
    "an expert-parallel checkpoint into a model of another placement: refused on every rank")
  dp3:free()
  local tensors, md = venom.load(mine)
  md.world_size = "3"
  venom.save(mine, tensors, md)
  local kept, err = unchanged_after(function() checkpoint.load(path, { model = dp2, optim = opt2 }) end)
  tap.ok(kept and tostring(err):find("written by a run of 3 ranks and this run has 2", 1, true),
    "an expert-parallel checkpoint of 3 ranks on 2: refused on every rank, nothing loaded")
  md.world_size = "2"
  venom.save(mine, tensors, md)
  dist.barrier()
  if r == 1 then os.remove(mine) end
  dist.barrier()
  kept, err = unchanged_after(function() checkpoint.load(path, { model = dp2, optim = opt2 }) end)
  tap.ok(kept and tostring(err):find(r == 1 and "no '.-rank1' for rank 1 of 2" or
    "rank 1 could not load its part of"),
    ("a missing rank file: refused on every rank, rank 0's load undone (%s)"):format(tostring(err)))
  dp2:free()
  os.remove(mine)
end
tap.error_like(function() nn.MoE(H, 24, { experts = 3, expert_parallel = true }) end,
  "2 ranks do not divide 3", "expert_parallel = true with 3 experts on 2 ranks is refused")
tap.error_like(function() nn.MoE(H, 24, { experts = 4, expert_parallel = { 0, 1 } }) end,
  "lists 2 owner ranks for 4 experts", "a placement of the wrong length is refused")
tap.error_like(function() nn.MoE(H, 24, { experts = 4, expert_parallel = { 0, 0, 0, 0 } }) end,
  "rank 1 owns none of the 4 experts", "a rank without experts is refused")
tap.error_like(function() nn.MoE(H, 24, { experts = 4, expert_parallel = { 0, 2, 1, 0 } }) end,
  "expert_parallel%[2%] must be a rank in 0..1", "an owner rank outside the world is refused")
tap.error_like(function()
  nn.MoE(H, 24, { experts = 4, expert_parallel = { { 1, 0 }, 0, 1, 1 } })
end, "expert_parallel%[1%] must list distinct ranks in ascending order",
  "replicas out of order are refused")
tap.error_like(function() nn.MoE(H, 24, { experts = 4, expert_parallel = { {}, 0, 1, 1 } }) end,
  "expert_parallel%[1%] lists no rank", "an expert with no replica is refused")
tap.error_like(function()
  nn.MoE(H, 24, { experts = 4, expert_parallel = r == 0 and { 0, 1, 0, 1 } or { 0, 1, 1, 0 } })
end, "the ranks passed different expert placements", "ranks that disagree on the placement all fail")

tap.done()
