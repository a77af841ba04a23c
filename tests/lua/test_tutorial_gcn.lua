-- Tutorial 07 (GCN on Cora), short runs: it prints the per-epoch lines and
-- learns (the loss falls, test accuracy well above chance after 30 epochs);
-- --model sage and gat run; --seeds 2 prints the mean and spread; usage
-- errors exit with status 2 and missing data with status 1 naming the files.
-- The runs on Cora are skipped when ../shared/data/cora is not there.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"

local exe = os.getenv("VENOM_EXE") or arg[-1]
local ROOT = "../shared/data"

local function tutorial(args)
  local p = io.popen(("'%s' tutorials/07-gcn-cora.lua %s 2>&1; echo \"rc=$?\""):format(exe, args))
  local out = p:read("*a")
  p:close()
  return out, tonumber(out:match("rc=(%d+)\n$"))
end

-- Usage errors and missing data ---------------------------------------------------
local out, rc = tutorial("--model gcnn")
tap.ok(rc == 2 and out:find("^error: %-%-model must be gcn, sage or gat, got gcnn") ~= nil,
  "--model gcnn: a usage error, status 2")
out, rc = tutorial("--epochs 0")
tap.ok(rc == 2 and out:find("^error: %-%-epochs") ~= nil, "--epochs 0: a usage error, status 2")
local dir = testutil.tmpdir()
out, rc = tutorial("--root " .. dir)
tap.ok(rc == 1 and out:find("^error: data%.planetoid: cannot open .*cora%.content%.gz") ~= nil
  and out:find("cora%.cites and cora%.split") ~= nil,
  "a --root without the data: status 1, the expected files named")
if rc ~= 1 then tap.diag("%s", out) end
os.execute("rm -rf '" .. dir .. "'")

local f = io.open(ROOT .. "/cora/cora.cites", "rb")
if not f then
  tap.skip(ROOT .. "/cora is not there", 6)
  tap.done()
  return
end
f:close()

-- GCN, 30 epochs ----------------------------------------------------------------------
out, rc = tutorial("--epochs 30 --print-every 10")
tap.is(rc, 0, "GCN, 30 epochs: exit status 0")
local losses = {}
for l in out:gmatch("epoch +%d+/30  loss ([%d.]+)") do losses[#losses + 1] = tonumber(l) end
tap.ok(#losses == 4 and losses[4] < 0.9 * losses[1],
  ("prints epochs 1, 10, 20, 30 and the loss falls (%s)"):format(table.concat(losses, ", ")))
local acc = tonumber(out:match("seed 0: test accuracy ([%d.]+)%%"))
tap.ok(acc and acc > 60, ("test accuracy after 30 epochs well above chance (%s%%; 7 classes)")
  :format(tostring(acc)))
tap.ok(out:find("ms per training epoch") ~= nil, "prints the time per epoch")
if not acc then tap.diag("%s", out) end

-- SAGE and GAT, a few epochs; two seeds --------------------------------------------
out, rc = tutorial("--model sage --epochs 3 --seeds 2")
tap.ok(rc == 0 and out:find("SAGE on cora over 2 seeds: test accuracy [%d.]+%% ± [%d.]+%%") ~= nil,
  "--model sage --seeds 2: the mean and spread over the seeds")
if rc ~= 0 then tap.diag("%s", out) end
out, rc = tutorial("--model gat --epochs 2")
tap.ok(rc == 0 and out:find("seed 0: test accuracy") ~= nil, "--model gat runs")
if rc ~= 0 then tap.diag("%s", out) end

tap.done()
