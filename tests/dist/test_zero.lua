-- ZeRO-1 under `mpirun -np 2`: dist.ZeroRedundancyOptimizer (the AdamW
-- state sharded: reduce_scatter of the gradients, a step on this rank's
-- slice, all_gather of the parameters) against plain DataParallel with
-- AdamW on every rank: the same losses over 20 steps (an MLP of 863
-- parameters: the flat vector is padded to 864), the same weights on both
-- ranks, half the optimizer state on each; and its bad input.
local tap = require "tests.dist.disttap"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local dist = require "venom.distributed"

local r, P = dist.rank(), dist.world_size()
local STEPS = 20
local criterion = nn.CrossEntropyLoss()

venom.manual_seed(3)
local X = venom.randn(STEPS * 16, 20)
local Y = (venom.rand(STEPS * 16) * 5):long() + 1
local function share(t, step)
  return t:narrow(1, (step - 1) * 16 + r * 8 + 1, 8)
end

-- Trains an MLP 20 → 33 → 5 for 20 steps; returns the global losses and the model.
local function train(with_zero)
  venom.manual_seed(42)
  local model = nn.mlp({ 20, 33, 5 })
  local opt, dp
  if with_zero then
    opt = dist.ZeroRedundancyOptimizer(model:parameters(), optim.AdamW, { lr = 1e-2 })
  else
    dp = dist.DataParallel(model)
    opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  end
  local losses = {}
  for step = 1, STEPS do
    opt:zero_grad()
    local l = criterion(model(share(X, step)), share(Y, step))
    l:backward()
    opt:step()
    losses[step] = dist.all_reduce_number(l:item(), "avg")
  end
  if dp then dp:free() end
  return losses, model, opt
end

local plain = train(false)
local losses, model, zero = train(true)
local worst = 0
for step = 1, STEPS do
  worst = math.max(worst, math.abs(losses[step] - plain[step]) / math.abs(plain[step]))
end
tap.ok(worst < 1e-5, ("ZeRO-1 AdamW on 2 ranks gives the losses of DataParallel + AdamW over 20 "
  .. "steps (max relative difference %.2g)"):format(worst))

local same = true
for _, p in ipairs(model:parameters()) do
  local g = dist.all_gather(p:detach():contiguous():reshape(p:numel()))
  same = same and (g:narrow(1, 1, p:numel()) - g:narrow(1, p:numel() + 1, p:numel())):abs():max():item() == 0
end
tap.ok(same, "ZeRO-1: the weights are identical on both ranks after 20 steps")
local mine, all = zero:shard_size()
local st = zero.optimizer.state[zero.shard]
tap.ok(mine == 432 and all == 864 and st.exp_avg:numel() == 432,
  ("each rank holds AdamW state for %d of the %d (863 + 1 padding) elements"):format(mine, all))

tap.error_like(function() dist.ZeroRedundancyOptimizer(model:parameters(), "adamw") end,
  "expected an optimizer constructor", "a non-function optimizer is refused")
tap.error_like(function()
  dist.ZeroRedundancyOptimizer(nn.mlp({ 4, r == 0 and 3 or 5 }):parameters(), optim.AdamW)
end, "the ranks' parameters differ", "ranks whose parameters differ all fail")
tap.done()
