-- Tutorial 8 on a small slice of Fashion-MNIST: a dense run learns (above
-- chance after one short epoch) and writes its log; --augment changes what
-- the network sees (another loss, same seed); --sparse prunes the second
-- conv and the first linear layer to the pattern, and --rewind restarts the
-- lr after its last event; a bad --sparse exits with
-- status 2; --export-images writes the IDX images as PNG files that decode
-- to the same bytes under folders that give the same labels, and
-- --root-images trains and tests from them. Skipped when the dataset
-- package is not installed.
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

local out3, rc3 = tutorial("--epochs 2 --sparse 8:2:8 --prune-ramp cubic")
tap.is(rc3, 0, "sparse run" .. (rc3 ~= 0 and ": " .. out3 or ""))
tap.ok(out3:find("layer 5   8:2:8    288 of 1152 weights kept %(75.0%% sparse%)") ~= nil,
  "the second conv (16 × 8·9) is at 8:2:8")
tap.ok(out3:find("layer 10  8:2:8 ") ~= nil, "the first linear layer is at 8:2:8")
tap.ok(out3:find("SparseConv2d") == nil and out3:find("sparse 8:2:8") ~= nil,
  "the final line names the pattern")

-- --prune-ramp none: the pattern from the first event (the end of epoch 1)
-- instead of the cubic ramp's 0% there; --prune-end 1 compresses at the end.
local out3b, rc3b = tutorial("--epochs 2 --sparse 8:2:8 --prune-ramp none --prune-end 1")
tap.ok(rc3b == 0 and out3:find("epoch 1/2 [^\n]* sparsity 0.0%%") ~= nil
  and out3b:find("epoch 1/2 [^\n]* sparsity 75.0%%") ~= nil
  and out3b:find("layer 5   8:2:8    288 of 1152 weights kept") ~= nil,
  "--prune-ramp none: 8:2:8 from the first event (cubic: 0% there)" .. (rc3b ~= 0 and ": " .. out3b or ""))

-- --rewind 0.25: 2 epochs of 8 steps, one pruning event at step 9 (the
-- last), no warm-up; the log's lr is the rate each step used. Step 9 still
-- has the first cosine's lr(8) = ½·(1 + cos(π·8/16))·1e-3, step 10 the
-- restart's 0.25·1e-3 (without the restart it would be lr(9) ≈ 4.0e-4);
-- both layers still end at exactly 2 of every 8 weights. The default
-- (--rewind 1) restarts at 1e-3; with --prune-end 1 the last event is the
-- last step, and there is nothing to restart.
local log = dir .. "/rewind.csv"
local out3c, rc3c = tutorial("--epochs 2 --sparse 8:2:8 --rewind 0.25 --log " .. log)
tap.is(rc3c, 0, "sparse run with --rewind" .. (rc3c ~= 0 and ": " .. out3c or ""))
local lr_at = {}
for line in (testutil.slurp(log) or ""):gmatch("[^\n]+") do
  local s, lr = line:match("^(%d+),%d+,[^,]*,([^,]+),")
  if s then lr_at[tonumber(s)] = tonumber(lr) end
end
tap.near(lr_at[9] or 0, 0.5 * (1 + math.cos(math.pi * 8 / 16)) * 1e-3, 1e-12,
  "--rewind: step 9 (the last pruning event) trains on the first cosine's lr")
tap.near(lr_at[10] or 0, 2.5e-4, 1e-12, "--rewind 0.25: step 10 trains with 0.25 · 1e-3")
tap.ok(out3c:find("the lr restarts at 0.00025 after step 9 (the last pruning event)", 1, true) ~= nil
  and out3:find("the lr restarts at 0.001 after step 9 (the last pruning event)", 1, true) ~= nil
  and out3b:find("restarts", 1, true) == nil,
  "--rewind: the restart is announced (by default at --lr; none with --prune-end 1)")
tap.ok(out3c:find("layer 5   8:2:8    288 of 1152 weights kept (75.0% sparse)", 1, true) ~= nil
  and out3c:find("layer 10  8:2:8    6272 of 25088 weights kept (75.0% sparse)", 1, true) ~= nil,
  "--rewind: both layers end at exactly 2 of every 8 weights")

-- Given on the command line where it has nothing to restart (the last
-- event is the last step), --rewind is refused (it did nothing quietly).
local out3d, rc3d = tutorial("--epochs 2 --sparse 8:2:8 --prune-end 1 --rewind 0.5")
tap.ok(rc3d == 2 and out3d:find("%-%-rewind restarts .* %(step 16%), which leaves nothing to restart") ~= nil,
  "--rewind with --prune-end 1: an error, status 2" .. (rc3d ~= 2 and ": " .. out3d or ""))

local out4, rc4 = tutorial("--sparse 8:3:8")
tap.is(rc4, 2, "a bad --sparse exits with status 2")
tap.ok(out4:find("--sparse: prune.GMP: pattern must be V:2:M", 1, true) ~= nil, "and says what a pattern is")

-- --export-images with --limit 300: the first 300 images of each split.
local images = dir .. "/images"
local out5, rc5 = testutil.run_script("tutorials/08-cnn.lua", "--export-images " .. images .. " --limit 300")
tap.ok(rc5 == 0 and out5:find("300 train images written") and out5:find("300 test images written"),
  "--export-images writes 300 train and 300 test images" .. (rc5 ~= 0 and ": " .. out5 or ""))
local venom = require "venom"
local data = require "venom.data"
local image = require "venom.image"
for _, split in ipairs({ "train", "test" }) do
  local set = data.fashion_mnist(split)
  local ok, ds = pcall(data.ImageFolder, images .. "/" .. split)
  tap.ok(ok and ds.n == 300 and #ds.classes == 10 and ds.classes[1] == "01-t-shirt-top"
    and ds.classes[10] == "10-ankle-boot", split .. ": 300 images in the ten class folders, in label order")
  local bad_pixels, bad_labels, seen, labels = 0, 0, {}, set.labels:totable()
  for i = 1, ok and ds.n or 0 do
    local k = tonumber(ds.paths[i]:match("/(%d+)%.png$"))
    seen[k] = true
    local png = image.load(ds.paths[i])
    local idx = set.images:select(1, k)
    if png:dim() ~= 3 or png:size(3) ~= 1 or png:dtype() ~= "u8"
      or testutil.max_diff(png:reshape(28, 28):totable(), idx:totable()) ~= 0 then
      bad_pixels = bad_pixels + 1
    end
    if ds.labels[i] ~= labels[k] then bad_labels = bad_labels + 1 end
    png:free(); idx:free()
  end
  local all = true
  for k = 1, 300 do all = all and seen[k] == true end
  tap.ok(all and bad_pixels == 0, split .. ": each of images 1..300 decodes to its IDX bytes exactly ("
    .. bad_pixels .. " differ)")
  tap.is(bad_labels, 0, split .. ": each folder's label is the IDX label")
  set.images:free()
end

local out6, rc6 = testutil.run_script("tutorials/08-cnn.lua", "--root-images " .. images
  .. " --epochs 1 --batch-size 50 --width 8 --hidden 32 --workers 2 --augment")
local acc6 = out6:match("epoch 1/1  train loss [%d.]+  test accuracy ([%d.]+)%%")
tap.ok(rc6 == 0 and acc6 and out6:find("300 training images, 300 test images %(augmented%) from "),
  "--root-images trains and tests from the PNG files: test accuracy " .. tostring(acc6)
  .. (rc6 ~= 0 and ": " .. out6 or ""))
local out7, rc7 = testutil.run_script("tutorials/08-cnn.lua", "--root-images " .. dir .. "/missing")
tap.ok(rc7 == 2 and out7:find("error: --root-images: ", 1, true) ~= nil,
  "a missing --root-images folder exits with status 2 and says so")

-- One corrupt PNG among the training images: the batch that reads it fails,
-- and the tutorial says so in one line with status 1, no traceback.
local bad = assert(io.open(images .. "/train/01-t-shirt-top/corrupt.png", "wb"))
bad:write("\137PNG\r\n\26\nnot really a PNG")
bad:close()
local out8, rc8 = testutil.run_script("tutorials/08-cnn.lua", "--root-images " .. images
  .. " --epochs 1 --batch-size 50 --width 8 --hidden 32 --workers 0")
tap.ok(rc8 == 1 and out8:find("error: ", 1, true) ~= nil and out8:find("corrupt.png", 1, true) ~= nil
  and out8:find("traceback", 1, true) == nil,
  "a corrupt PNG under --root-images: one error line naming it, exit status 1: " .. out8)

-- --sparse with one epoch would prune nothing (the first epoch is dense).
local out9, rc9 = tutorial("--epochs 1 --sparse 8:2:8")
tap.ok(rc9 == 2 and out9:find("--sparse needs --epochs 2 or more", 1, true) ~= nil,
  "--sparse with --epochs 1 exits with status 2 and says how many epochs it needs: " .. out9)

os.execute("rm -rf '" .. dir .. "'")
tap.done()
