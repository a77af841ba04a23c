-- Tutorial 2 on a small slice of Fashion-MNIST, once per mode: the run
-- succeeds, prints the schedule's events up to the final pattern, and
-- reports the pruned layers at their target; a bad option exits with
-- status 2; a run stopped and resumed matches the uninterrupted one. Skipped when the dataset package is not installed.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local data = require "venom.data"

local f = io.open(data.FASHION_MNIST_ROOT .. "/train-labels-idx1-ubyte.gz", "rb")
if not f then
  tap.skip("dataset-fashion-mnist is not installed", 1)
  tap.done()
  return
end
f:close()

local exe = os.getenv("VENOM_EXE") or arg[-1]

local function tutorial(args)
  local p = io.popen(("'%s' tutorials/02-sparse-fashion-mnist.lua --limit 1000 --hidden 64 "
    .. "--batch-size 100 --epochs 2 %s 2>&1; echo \"rc=$?\""):format(exe, args))
  local out = p:read("*a")
  p:close()
  return out, tonumber(out:match("rc=(%d+)\n$"))
end

-- 20 steps: dense up to step 4, pruning at 4, 5, …, 12, fine-tuning after.
local out, rc = tutorial("--target 16:2:8 --every 1")
tap.is(rc, 0, "vnm run" .. (rc ~= 0 and ": " .. out or ""))
tap.ok(out:find("step     4  target sparsity   0.00%%  1 dense, 3 dense") ~= nil,
  "the first event, at the start of pruning, is dense")
tap.ok(out:find("step    12  target sparsity  75.00%%  1 16:2:8, 3 16:2:8") ~= nil,
  "the last event reaches 75% and 16:2:8 in both hidden layers")
tap.ok(out:find("\n1      16:2:8 ") ~= nil and out:find("\n3      16:2:8 ") ~= nil,
  "the report lists both layers at 16:2:8")
tap.ok(out:find("vnm 16:2:8: test accuracy") ~= nil, "the final line names the pattern")

-- --rewind 0.5: the lr restarts at 0.5·lr after the last event (step 12), so
-- step 13 trains with 5e-4 (the log's lr is the rate the step used), while
-- step 12 still has the first cosine's; the layers end at exactly 2 of 8
-- (layer 1: 64 rows · 98 groups · 2, layer 3: 64 · 8 · 2).
local log = os.tmpname() .. ".csv"
out, rc = tutorial("--target 16:2:8 --every 1 --rewind 0.5 --log " .. log)
tap.is(rc, 0, "vnm run with --rewind" .. (rc ~= 0 and ": " .. out or ""))
local lr_at = {}
for line in (testutil.slurp(log) or ""):gmatch("[^\n]+") do
  local step, lr = line:match("^(%d+),%d+,[^,]*,([^,]+),")
  if step then lr_at[tonumber(step)] = tonumber(lr) end
end
os.remove(log)
local first = 0.5 * (1 + math.cos(math.pi * (11 - 1) / (20 - 1))) * 1e-3 -- warm-up: 1 step
tap.near(lr_at[12] or 0, first, 1e-12, "--rewind: step 12 trains on the first cosine's lr")
tap.near(lr_at[13] or 0, 5e-4, 1e-12, "--rewind 0.5: step 13 trains with 5e-4")
tap.ok(out:find("\n1      16:2:8 +12544 of 50176 ") ~= nil
  and out:find("\n3      16:2:8 +1024 of 4096 ") ~= nil,
  "--rewind: both layers end with exactly 2 of every 8 weights")
tap.ok(out:find("the lr restarts at 0.0005 after step 12") ~= nil, "--rewind: the restart is announced")
out, rc = tutorial("--prune-end 1")
tap.ok(rc == 0 and out:find("pruning vnm towards 64:2:8: steps 4 to 20, every 1 steps %(20 steps "
  .. "in all%)\n") ~= nil, "no step after the last event: no restart")

-- The same with --rewind given: refused, as it would do nothing.
out, rc = tutorial("--prune-end 1 --rewind 0.5")
tap.ok(rc == 2 and out:find("%-%-rewind restarts .* %(step 20%), which leaves nothing to restart in 20 steps") ~= nil,
  "--rewind with nothing to restart: an error, status 2" .. (rc ~= 2 and ": " .. out or ""))

out, rc = tutorial("--mode nm --target 2:4")
tap.is(rc, 0, "nm run" .. (rc ~= 0 and ": " .. out or ""))
tap.ok(out:find("\n1      2:4 +25088 of 50176 +50.00%%") ~= nil, "nm: layer 1 keeps 2 of 4")

out, rc = tutorial("--mode unstructured --sparsity 0.9")
tap.is(rc, 0, "unstructured run" .. (rc ~= 0 and ": " .. out or ""))
tap.ok(out:find("\n3      90.0%% +410 of 4096 +89.99%%") ~= nil,
  "unstructured: ⌊0.9·4096⌋ = 3686 weights pruned in layer 3, 410 kept")

-- An lr so large that the first step overflows the weights, with pruning
-- from step 0: the pruning event that meets them ends the run with an
-- error line and status 1, not a traceback.
out, rc = tutorial("--lr 1e308 --prune-start 0")
tap.ok(rc == 1 and out:find("error: GMP:step: layer '1': weight %(%d+, %d+%) is %-?[na][an][nf]") ~= nil
  and not out:find("stack traceback", 1, true), "a diverged run at a pruning event: an error line, status 1")

out, rc = tutorial("--mode nm --target 64:2:8")
tap.ok(rc == 2 and out:find("pattern must be N:M") ~= nil, "a vnm pattern with --mode nm: status 2")
out, rc = tutorial("--prune-start 0.7 --prune-end 0.5")
tap.ok(rc == 2 and out:find("prune%-start") ~= nil, "prune-start after prune-end: status 2")

-- --save / --resume: stopped after epoch 1 (step 10, mid-way through the
-- pruning, with the layers at an intermediate V:2:M) and resumed, the run
-- prints epoch 2's loss and ends with the checkpoint of the run never
-- stopped, byte for byte.
local slurp = testutil.slurp
local base = os.tmpname()
local full, stopped, resumed = base .. ".full", base .. ".stopped", base .. ".resumed"
local args = "--target 16:2:8 --every 1 --save "
local want
want, rc = tutorial(args .. full)
tap.is(rc, 0, "vnm run with --save" .. (rc ~= 0 and ": " .. want or ""))
out, rc = tutorial(args .. stopped .. " --stop-after 1")
tap.ok(rc == 0 and out:find("stopped after epoch 1 of 2") ~= nil and not out:find("epoch 2/2  "),
  "--stop-after 1 saves and stops after epoch 1" .. (rc ~= 0 and ": " .. out or ""))
out, rc = tutorial(args .. resumed .. " --resume " .. stopped)
tap.ok(rc == 0 and out:find("resumed from .* after epoch 1") ~= nil,
  "--resume continues with epoch 2" .. (rc ~= 0 and ": " .. out or ""))
local loss2 = want:match("epoch 2/2  %a+ +train loss (%S+)")
tap.ok(loss2 ~= nil and out:match("epoch 2/2  %a+ +train loss (%S+)") == loss2,
  "epoch 2 prints the same train loss")
local a, b = slurp(full), slurp(resumed)
tap.ok(a and a == b, "the final checkpoint equals the uninterrupted run's, byte for byte")
out, rc = tutorial("--epochs 3 --target 16:2:8 --every 1 --resume " .. stopped)
tap.ok(rc == 1 and out:find("a run of 2 epochs, not %-%-epochs 3") ~= nil,
  "resuming with other --epochs is refused")
out, rc = tutorial("--target 64:2:16 --every 1 --resume " .. stopped)
tap.ok(rc == 1 and out:find("had %-%-target 16:2:8; this one has %-%-target 64:2:16") ~= nil,
  "resuming with another --target is refused by name")
os.remove(base); os.remove(full); os.remove(stopped); os.remove(resumed)

tap.done()
