-- Tutorial 1 with --save / --resume / --export-dense, on a small slice of
-- Fashion-MNIST: a run stopped after epoch 1 and resumed from its checkpoint
-- ends with the same checkpoint, byte for byte, as a run that went through
-- both epochs; the dense export holds the model's weights. Skipped when the
-- dataset package is not installed.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"
local data = require "venom.data"

local f = io.open(data.FASHION_MNIST_ROOT .. "/train-labels-idx1-ubyte.gz", "rb")
if not f then
  tap.skip("dataset-fashion-mnist is not installed", 1)
  tap.done()
  return
end
f:close()

local exe = os.getenv("VENOM_EXE") or arg[-1]
local dir = testutil.tmpdir()

-- --no-cosine: the schedule would otherwise depend on --epochs, which the
-- stopped run shortens.
local function tutorial(args)
  local p = io.popen(("'%s' tutorials/01-fashion-mnist.lua --limit 1000 --hidden 32 --no-cosine "
    .. "--batch-size 100 %s 2>&1; echo \"rc=$?\""):format(exe, args))
  local out = p:read("*a")
  p:close()
  return out, tonumber(out:match("rc=(%d+)\n$"))
end

local slurp = testutil.slurp

local full, stopped, resumed = dir .. "/full.st", dir .. "/stopped.st", dir .. "/resumed.st"
local dense = dir .. "/dense.st"
local out, rc = tutorial("--epochs 2 --save " .. full)
tap.is(rc, 0, "2 epochs with --save" .. (rc ~= 0 and ": " .. out or ""))
local want_loss = out:match("epoch 2/2  train loss (%S+)")
out, rc = tutorial("--epochs 1 --save " .. stopped)
tap.is(rc, 0, "1 epoch with --save" .. (rc ~= 0 and ": " .. out or ""))
out, rc = tutorial(("--epochs 2 --resume %s --save %s --export-dense %s"):format(stopped, resumed, dense))
tap.is(rc, 0, "--resume for epoch 2" .. (rc ~= 0 and ": " .. out or ""))
tap.ok(out:find("resumed from .* after epoch 1") and not out:find("epoch 1/2  train loss"),
  "the resumed run starts at epoch 2")
tap.is(out:match("epoch 2/2  train loss (%S+)"), want_loss, "epoch 2 prints the same train loss")
local a, b = slurp(full), slurp(resumed)
tap.ok(a and a == b, "the resumed run's final checkpoint equals the uninterrupted run's, byte for byte")
out, rc = tutorial(("--epochs 2 --lr 0.01 --resume %s"):format(stopped))
tap.ok(rc == 1 and out:find("the run that wrote it had %-%-lr 0%.001; this one has %-%-lr 0%.01 "),
  "a resume with another --lr is refused, naming both values: " .. (out:match("error: [^\n]*") or out))

local ck = venom.load(full)
local weights = venom.load(dense)
local names, same = {}, true
for name, t in pairs(weights) do
  names[#names + 1] = name
  local c = ck["model." .. name]
  same = same and c ~= nil and c:eq(t):sum():item() == t:numel()
end
table.sort(names)
tap.is(table.concat(names, " "), "1.bias 1.weight 3.bias 3.weight 5.bias 5.weight",
  "--export-dense writes the dense weights under their dotted names")
tap.ok(same, "--export-dense holds the trained weights")

os.execute("rm -rf '" .. dir .. "'")
tap.done()
