-- Groups of ranks and FlexMoE replicas on 3 ranks (`mpirun -np 3`, see
-- dist.cmake): dist.new_group's all-reduce moves data among its members
-- only; lists that differ or are bad fail on every rank; and an expert
-- replicated on ranks 0 and 2 averages its gradients over those two alone
-- (rank 1 holds no replica and takes no part), with the numbers of the
-- one-process model and replicas that stay bitwise equal.
local tap = require "tests.dist.disttap"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local dist = require "venom.distributed"

local r, P = dist.rank(), dist.world_size()
local TOL = 1e-5
if P ~= 3 then
  tap.ok(false, ("this test needs 3 ranks, got %d"):format(P))
  tap.done()
  return
end

do
  local g = dist.new_group({ 0, 2 })
  local x = venom.full({ 3 }, r + 1)
  if r ~= 1 then
    g:all_reduce(x, "sum")
    tap.ok(x:get(1) == 4 and x:get(3) == 4 and g:size() == 2 and g:rank() == r / 2,
      ("group {0, 2}: all_reduce sums ranks 0 and 2 only (1 + 3 = %g), this rank is member %s")
      :format(x:get(1), tostring(g:rank())))
  else
    tap.error_like(function() g:all_reduce(x) end, "rank 1 is not in this group of 2 ranks",
      "group {0, 2}: rank 1 is not a member and may not call its all_reduce")
    tap.ok(x:get(1) == 2 and g:rank() == nil and not g:contains(1), "rank 1's tensor is untouched")
  end
  g:free()
  g:free()
end

tap.error_like(function() dist.new_group(r == 1 and { 0, 1 } or { 0, 2 }) end,
  "the ranks passed different lists", "new_group with different lists on the ranks: an error on every rank")
tap.error_like(function() dist.new_group({ 0, 3 }) end, "rank 3 %(entry 2%) is not in 0..2",
  "new_group with a rank outside the world")
tap.error_like(function() dist.new_group({ 2, 2 }) end, "rank 2 is listed twice",
  "new_group with a rank listed twice")

-- nn.MoE with 3 experts, expert 1 on ranks 0 and 2: the reference holds
-- all experts and runs the three shares of each batch (each routed on its
-- own, as each rank routes its own tokens), 5 AdamW steps.
do
  local D, H, E, C, B = 8, 16, 3, 3, 8 -- B rows per rank
  local criterion = nn.CrossEntropyLoss()
  local function build(moe_opts)
    return nn.Sequential(nn.Linear(D, H), nn.MoE(H, 24, moe_opts), nn.Linear(H, C))
  end
  local function loss_of(m, x, y) return criterion(m(x), y) + m[2].aux_loss end
  local moe_opts = { experts = E, k = 2, capacity_factor = math.huge }
  venom.manual_seed(42)
  local ref = build(moe_opts)
  moe_opts.expert_parallel = { { 0, 2 }, 1, 2 }
  venom.manual_seed(42)
  local model = build(moe_opts)
  local dp = dist.DataParallel(model)
  local ref_opt = optim.AdamW(ref:parameters(), { lr = 1e-2 })
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  venom.manual_seed(7)
  local steps = 5
  local X, Y = venom.randn(steps * B * P, D), (venom.rand(steps * B * P) * C):long() + 1
  local worst = 0
  for step = 1, steps do
    local x, y = X:narrow(1, (step - 1) * B * P + 1, B * P), Y:narrow(1, (step - 1) * B * P + 1, B * P)
    ref_opt:zero_grad()
    local l_ref
    for q = 0, P - 1 do
      local lq = loss_of(ref, x:narrow(1, q * B + 1, B), y:narrow(1, q * B + 1, B)) / P
      l_ref = l_ref and l_ref + lq or lq
    end
    l_ref:backward()
    opt:zero_grad()
    local l = loss_of(dp, x:narrow(1, r * B + 1, B), y:narrow(1, r * B + 1, B))
    l:backward()
    ref_opt:step(); opt:step()
    local global = dist.all_reduce_number(l:item(), "avg")
    worst = math.max(worst, math.abs(global - l_ref:item()) / math.abs(l_ref:item()))
  end
  dp:free()
  -- expert 1's weights on ranks 0 and 2 (rank 1 sends zeros: it has none)
  local moe = model[2]
  local n = moe.expert_numel[1]
  local mine = venom.zeros(n)
  if r ~= 1 then
    local flat = {}
    for _, p in ipairs(moe.experts[1]:parameters()) do flat[#flat + 1] = p:detach():reshape(-1) end
    mine = venom.cat(flat, 1)
  end
  local all = dist.all_gather(mine)
  local spread = (all:narrow(1, 1, n) - all:narrow(1, 2 * n + 1, n)):abs():max():item()
  local group = moe.replica_groups and moe.replica_groups["0,2"]
  tap.ok(worst < TOL and spread == 0 and group and group:size() == 2,
    ("3 ranks, expert 1 replicated on ranks 0 and 2: the 1-process losses over %d steps (max "
      .. "relative difference %.2g), replicas bitwise equal, their gradients averaged over a "
      .. "group of %s ranks"):format(steps, worst, group and group:size() or "no"))
end

tap.done()
