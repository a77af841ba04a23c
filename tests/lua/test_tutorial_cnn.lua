-- Tutorial 8 on a small slice of Fashion-MNIST: a dense run learns (above
-- chance after one short epoch) and writes its log; --augment changes what
-- the network sees (another loss, same seed); --sparse prunes the second
-- conv and the first linear layer to the pattern; a bad --sparse exits with
-- status 2. Skipped when the dataset package is not installed.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
if not testutil.have_fashion_mnist(tap) then return end
local dir = testutil.tmpdir()

local function tutorial(args)
  return testutil.run_script("tutorials/08-cnn.lua",
    "--limit 512 --batch-size 64 --width 8 --hidden 32 " .. args)
end

local out, rc = tutorial("--epochs 1 --log " .. dir .. "/run.csv")
tap.is(rc, 0, "dense run" .. (rc ~= 0 and ": " .. out or ""))
local loss, acc = out:match("epoch 1/1  train loss ([%d.]+)  test accuracy ([%d.]+)%%")
tap.ok(acc and tonumber(acc) > 20, "one epoch on 512 images is well above chance (10%): " .. tostring(acc))
local csv = testutil.slurp(dir .. "/run.csv")
tap.ok(csv:find("test_accuracy") and select(2, csv:gsub("\n", "")) == 1 + 8 + 1,
  "--log: a header, 8 step records and 1 epoch record")

local out2, rc2 = tutorial("--epochs 1 --augment")
local loss2 = out2:match("epoch 1/1  train loss ([%d.]+)")
tap.ok(rc2 == 0 and loss2 and loss2 ~= loss, "--augment trains on other images (loss " ..
  tostring(loss2) .. " vs " .. tostring(loss) .. ")")

local out3, rc3 = tutorial("--epochs 2 --sparse 8:2:8")
tap.is(rc3, 0, "sparse run" .. (rc3 ~= 0 and ": " .. out3 or ""))
tap.ok(out3:find("layer 5   8:2:8    288 of 1152 weights kept %(75.0%% sparse%)") ~= nil,
  "the second conv (16 × 8·9) is at 8:2:8")
tap.ok(out3:find("layer 10  8:2:8 ") ~= nil, "the first linear layer is at 8:2:8")
tap.ok(out3:find("SparseConv2d") == nil and out3:find("sparse 8:2:8") ~= nil,
  "the final line names the pattern")

local out4, rc4 = tutorial("--sparse 8:3:8")
tap.is(rc4, 2, "a bad --sparse exits with status 2")
tap.ok(out4:find("--sparse: prune.GMP: pattern must be V:2:M", 1, true) ~= nil, "and says what a pattern is")

os.execute("rm -rf '" .. dir .. "'")
tap.done()
