-- distributed.ZeroRedundancyOptimizer and nn.MoE's expert_parallel in a
-- process started without mpirun (a world of one): the same numbers as
-- the plain optimizer, and bad arguments refused with a clear error.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local dist = require "venom.distributed"

tap.error_like(function() dist.ZeroRedundancyOptimizer(nn.Linear(4, 3):parameters(), optim.AdamW) end,
  "call venom.distributed.init%(%) first", "ZeRO before init is refused")
tap.error_like(function() nn.MoE(4, 8, { experts = 4, expert_parallel = true }) end,
  "expert_parallel needs a distributed run", "MoE expert_parallel before init is refused")
dist.init()
tap.is(dist.world_size(), 1, "without mpirun: a world of one")

venom.manual_seed(1)
local a, b = nn.Linear(4, 3), nn.Linear(4, 3)
venom.no_grad(function() b.weight:copy_(a.weight); b.bias:copy_(a.bias) end)
local oa = optim.AdamW(a:parameters(), { lr = 1e-2 })
local ob = dist.ZeroRedundancyOptimizer(b:parameters(), optim.AdamW, { lr = 1e-2 })
local x = venom.randn(5, 4)
for _ = 1, 3 do
  oa:zero_grad(); a(x):sum():backward(); oa:step()
  ob:zero_grad(); b(x):sum():backward(); ob:step()
end
tap.is((a.weight - b.weight):abs():max():item() + (a.bias - b.bias):abs():max():item(), 0,
  "ZeRO in a world of one: AdamW's weights exactly")

local w = venom.randn(3):requires_grad_(true)
tap.error_like(function() dist.ZeroRedundancyOptimizer({ w, w }, optim.SGD, { lr = 0.1 }) end,
  "params%[2%] appears twice", "ZeRO: a repeated parameter is refused")
tap.error_like(function() dist.ZeroRedundancyOptimizer({ w * 2 }, optim.SGD, { lr = 0.1 }) end,
  "params%[1%] must be a leaf tensor that requires a gradient", "ZeRO: a computed tensor is refused")
tap.error_like(function() dist.ZeroRedundancyOptimizer({ venom.randn(3) }, optim.SGD, { lr = 0.1 }) end,
  "params%[1%] must be a leaf tensor that requires a gradient",
  "ZeRO: a tensor without requires_grad is refused")
tap.error_like(function() dist.ZeroRedundancyOptimizer({ w }, function() end) end,
  "make_optimizer returned nil, expected an optimizer", "ZeRO: a constructor returning nothing is refused")

venom.manual_seed(3)
local p = nn.MoE(4, 8, { experts = 4 })
venom.manual_seed(3)
local q = nn.MoE(4, 8, { experts = 4, expert_parallel = true })
local xx = venom.randn(6, 4)
tap.is((p(xx) - q(xx)):abs():max():item(), 0, "MoE expert_parallel in a world of one: the plain layer's output")
tap.error_like(function() nn.MoE(4, 8, { experts = 4, expert_parallel = { 0, 1, 0, 0 } }) end,
  "expert_parallel%[2%] must be a rank in 0%.%.0, got 1", "MoE: an owner rank past the world is refused")
-- rebalance's optimizer must hold the experts' parameters (on 2 ranks an
-- Expand added the new replica's parameters to the wrong one, which the
-- training loop never steps), checked before any move
local qopt = optim.AdamW(q:parameters(), { lr = 1e-3 })
tap.ok(pcall(q.rebalance, q, qopt) and pcall(q.rebalance, q, nil),
  "MoE:rebalance takes the model's optimizer or nil")
tap.error_like(function() q:rebalance(optim.AdamW(nn.Linear(2, 2):parameters(), { lr = 1e-3 })) end,
  "opt does not hold this rank's expert parameters", "MoE:rebalance refuses an optimizer without the experts")
tap.error_like(function() q:rebalance(3) end, "opt must be the optimizer .* or nil, got a number",
  "MoE:rebalance refuses an opt that is not an optimizer")
tap.done()
