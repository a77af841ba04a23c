-- The ranks of tests/dist/netns.sh: one in each of two network namespaces,
-- over Open MPI's TCP transport. Checks that the ranks really sit in
-- different namespaces, then trains an MLP with DataParallel for 10 steps
-- and compares its losses with one process on the whole batch (1e-5).
local tap = require "tests.dist.disttap"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local dist = require "venom.distributed"

local r, P = dist.rank(), dist.world_size()
local f = io.popen("readlink /proc/self/ns/net 2>/dev/null")
local ns = tonumber((f and f:read("*l") or ""):match("%[(%d+)%]") or -1)
if f then f:close() end
local all = dist.all_gather(venom.tensor({ ns }, "i64"))
tap.ok(P == 2 and all:get(1) ~= all:get(2) and all:get(1) > 0,
  ("2 ranks in 2 network namespaces (%d and %d)"):format(all:get(1), all:get(P)))

venom.manual_seed(3)
local X, Y = venom.randn(10 * 16, 20), (venom.rand(10 * 16) * 5):long() + 1
venom.manual_seed(42)
local ref = nn.mlp({ 20, 32, 5 })
venom.manual_seed(42)
local model = nn.mlp({ 20, 32, 5 })
local dp = dist.DataParallel(model)
local ref_opt = optim.AdamW(ref:parameters(), { lr = 1e-2 })
local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
local criterion = nn.CrossEntropyLoss()
local worst = 0
for step = 1, 10 do
  local x, y = X:narrow(1, (step - 1) * 16 + 1, 16), Y:narrow(1, (step - 1) * 16 + 1, 16)
  local l_ref = criterion(ref(x), y)
  ref_opt:zero_grad(); l_ref:backward(); ref_opt:step()
  local l = criterion(dp(x:narrow(1, r * 8 + 1, 8)), y:narrow(1, r * 8 + 1, 8))
  opt:zero_grad(); l:backward(); opt:step()
  local global = dist.all_reduce_number(l:item(), "avg")
  worst = math.max(worst, math.abs(global - l_ref:item()) / math.abs(l_ref:item()))
end
tap.ok(worst < 1e-5 and dp:stats().steps == 10, ("DataParallel over TCP between the namespaces: "
  .. "the 1-process losses over 10 steps (max relative difference %.2g)"):format(worst))
tap.done()
