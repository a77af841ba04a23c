-- venom.image and data.ImageFolder: Fashion-MNIST test images exported as
-- PNG files (data.export_image_folder) read back through ImageFolder and the
-- DataLoader equal the IDX bytes exactly, with the same labels; 2 workers
-- give the same batches as 0 under the same seed, random transforms
-- included; each transform against a reference computed here; bad folders
-- and files give errors naming them.
package.path = "tests/lua/?.lua;" .. package.path
local T = require "tap"
local venom = require "venom"
local testutil = require "testutil"
local data = venom.data
local image = venom.image
local tf = data.transforms

T.plan(39)

local tmp = testutil.tmpdir()

-- max |a − b| over two tensors of one shape (any dtypes)
local function maxdiff(a, b)
  local d = (a:float() - b:float()):abs()
  local m = d:max():item()
  d:free()
  return m
end

local function same_shape(a, b)
  return table.concat(a:shape(), ",") == table.concat(b:shape(), ",")
end

-- Every batch of an epoch, concatenated: images and labels.
local function epoch(loader)
  local xs, ys = {}, {}
  for x, y in loader do xs[#xs + 1], ys[#ys + 1] = x, y end
  return venom.cat(xs, 1), venom.cat(ys, 1)
end

-- 1. Fashion-MNIST through PNG files and back ------------------------------------
local root_fm = data.FASHION_MNIST_ROOT
local f = io.open(root_fm .. "/t10k-images-idx3-ubyte.gz", "rb")
if not f then
  T.skip("Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)", 6)
else
  f:close()
  local test = data.fashion_mnist("test")
  local n = 300
  local images, labels = test.images:narrow(1, 1, n), test.labels:narrow(1, 1, n)
  local root = tmp .. "/fm"
  T.is(data.export_image_folder(images, labels, root), n, "export_image_folder writes 300 PNG files")
  local ds = data.ImageFolder(root)
  T.ok(ds.n == n and #ds.classes == 10 and ds.classes[1] == "01" and ds.classes[10] == "10",
    "ImageFolder finds the 300 files in 10 classes 01..10")
  -- The file name is the image's position in the IDX file.
  local pos = {}
  for k, p in ipairs(ds.paths) do pos[k] = tonumber(p:match("(%d+)%.png$")) end
  local order = venom.tensor(pos, "i64")
  local want_x = images:index_select(1, order)
  local want_y = labels:index_select(1, order)
  local x, y = epoch(data.DataLoader(ds, { batch_size = 64 }))
  T.is(table.concat(x:shape(), ","), n .. ",28,28,1", "batches of u8 (B, 28, 28, 1) images")
  T.is(maxdiff(x:view(n, 28, 28), want_x), 0, "decoded pixels equal the IDX bytes exactly")
  T.is(maxdiff(y, want_y), 0, "ImageFolder labels equal the IDX labels")
  -- ToTensor on the same files: x/255 in CHW
  local ds2 = data.ImageFolder(root, { transform = { tf.ToTensor() } })
  local xb = ds2:get_batch({ 1, 2, 3 })
  local ref = want_x:narrow(1, 1, 3):float():div(255):view(3, 1, 28, 28)
  T.ok(same_shape(xb, ref) and maxdiff(xb, ref) < 1e-7, "ToTensor through a batch: f32 (B, 1, 28, 28) = x/255")
end

-- 2. Workers and random transforms: the same batches for 0 and 2 workers ---------
local root = tmp .. "/rgb"
local n2, seed_img = 40, venom.randint(0, 256, { 40, 12, 10, 3 }, { dtype = "u8" })
local lab2 = {}
for i = 1, n2 do lab2[i] = (i % 3) + 1 end
data.export_image_folder(seed_img, lab2, root, { classes = { "cat", "dog", "emu" } })
local aug = { tf.RandomCrop({ 12, 10 }, { padding = 2 }), tf.RandomHorizontalFlip(), tf.ToTensor(),
  tf.Normalize({ 0.5, 0.4, 0.3 }, { 0.2, 0.25, 0.3 }) }
local ds = data.ImageFolder(root, { transform = aug })
T.ok(ds.classes[1] == "cat" and ds.class_to_idx.emu == 3, "classes by name, labelled from 1")
local runs = {}
for _, workers in ipairs({ 0, 2, 0 }) do
  venom.manual_seed(11)
  local x, y = epoch(data.DataLoader(ds, { batch_size = 16, shuffle = true, workers = workers }))
  runs[#runs + 1] = { x = x, y = y }
end
T.is(maxdiff(runs[1].x, runs[2].x), 0, "2 workers: the same augmented images as 0 workers")
T.is(maxdiff(runs[1].y, runs[2].y), 0, "2 workers: the same labels")
venom.manual_seed(5)
local xb = ds:get_batch({ 3, 1, 7 })
venom.manual_seed(5)
local one = {}
for k, i in ipairs({ 3, 1, 7 }) do one[k] = ds:get(i) end
T.ok(same_shape(xb, venom.zeros(3, 3, 12, 10)) and maxdiff(xb, venom.stack(one, 1)) == 0,
  "get_batch (ToTensor, Normalize on the stacked batch) equals ds:get image by image")
local fn_ds = data.ImageFolder(root, { transform = function(im) return image.hflip(im) end })
T.is(maxdiff(fn_ds:get_batch({ 2 }):select(1, 1), image.hflip(image.load(fn_ds.paths[2]))), 0,
  "a plain function as the transform")
local plain = data.ImageFolder(root, { transform = { tf.ToTensor(), tf.Normalize({ 0.5, 0.4, 0.3 }, { 0.2, 0.25, 0.3 }) } })
venom.manual_seed(11)
local px = epoch(data.DataLoader(plain, { batch_size = 16, shuffle = true }))
T.ok(maxdiff(runs[1].x, px) > 0.5, "the random transforms changed the images")
venom.manual_seed(12)
local x12 = epoch(data.DataLoader(ds, { batch_size = 16, shuffle = true, workers = 2 }))
T.ok(maxdiff(runs[1].x, x12) > 0.5, "another seed, other batches")

-- 3. Transforms against references ------------------------------------------------
local img = venom.randint(0, 256, { 5, 7, 3 }, { dtype = "u8" })
local t = tf.ToTensor()(img)
local ok = same_shape(t, venom.zeros(3, 5, 7))
for c = 1, 3 do for yy = 1, 5 do for xx = 1, 7 do
  ok = ok and math.abs(t:get(c, yy, xx) - img:get(yy, xx, c) / 255) < 1e-7
end end end
T.ok(ok, "ToTensor: (C, H, W) f32 = x[h][w][c] / 255")
local nt = tf.Normalize({ 0.1, 0.2, 0.3 }, { 0.5, 2, 4 })(t)
T.near(nt:get(2, 3, 4), (t:get(2, 3, 4) - 0.2) / 2, 1e-6, "Normalize: (x − mean[c]) / std[c]")
local cc = tf.CenterCrop(3)(img)
T.is(maxdiff(cc, img:narrow(1, 2, 3):narrow(2, 3, 3)), 0, "CenterCrop(3) of 5 x 7: rows 2..4, columns 3..5")
-- torchvision: top = round(0.5) = 0, left = round(1.5) = 2 (halves to even)
cc = tf.CenterCrop(4)(img)
T.is(maxdiff(cc, img:narrow(1, 1, 4):narrow(2, 3, 4)), 0, "CenterCrop(4) of 5 x 7: rows 1..4, columns 3..6")
local big = tf.CenterCrop({ 7, 9 })(img)
T.ok(maxdiff(big:narrow(1, 2, 5):narrow(2, 2, 7), img) == 0 and big:get(1, 1, 1) == 0,
  "CenterCrop larger than the image pads with 0")
local r = tf.Resize(4)(venom.zeros(8, 20, 1, { dtype = "u8" }))
T.is(table.concat(r:shape(), ","), "4,10,1", "Resize(n): the shorter side becomes n, aspect kept")
T.is(table.concat(tf.Resize({ 3, 3 })(img):shape(), ","), "3,3,3", "Resize({h, w}): exactly h x w")
-- RandomCrop: each crop is a window of the padded image, and every offset occurs
local padded = image.crop(img, -1, -1, 9, 11, 0) -- 2 pixels of 0 on each side
local crop = tf.RandomCrop({ 5, 7 }, { padding = 2 })
local seen, inside = {}, true
for _ = 1, 200 do
  local c = crop(img)
  local found
  for top = 1, 5 do for left = 1, 5 do
    local w = padded:narrow(1, top, 5):narrow(2, left, 7)
    if not found and maxdiff(c, w) == 0 then found = top .. "," .. left end
  end end
  inside = inside and found ~= nil
  if found then seen[found] = true end
  c:free()
end
local count = 0
for _ in pairs(seen) do count = count + 1 end
T.ok(inside, "RandomCrop: every crop is a window of the zero-padded image")
T.is(count, 25, "RandomCrop: all 25 offsets of 5 x 7 in the padded 9 x 11 occur in 200 draws")
venom.manual_seed(3)
local a1 = crop(img)
venom.manual_seed(3)
T.is(maxdiff(a1, crop(img)), 0, "RandomCrop repeats under the same seed")
local flips = 0
local flip = tf.RandomHorizontalFlip()
local mirrored = image.hflip(img)
for _ = 1, 200 do
  local o = flip(img)
  if maxdiff(o, mirrored) == 0 then flips = flips + 1 end
end
T.ok(flips > 70 and flips < 130, ("RandomHorizontalFlip(0.5): %d of 200 flipped"):format(flips))
T.is(maxdiff(tf.RandomHorizontalFlip(1)(img), mirrored), 0, "RandomHorizontalFlip(1) always mirrors")

-- 4. Bad folders and files ----------------------------------------------------------
local function error_like(fn, patterns, name)
  local okk, err = pcall(fn)
  local good = not okk
  for _, p in ipairs(patterns) do good = good and tostring(err):find(p, 1, true) ~= nil end
  T.ok(good, name)
  if not good then T.diag("got: %s", tostring(err)) end
end
local function write(path, bytes)
  local fh = assert(io.open(path, "wb"))
  fh:write(bytes)
  fh:close()
end
local bad = tmp .. "/bad"
venom.core.make_dir(bad)
write(bad .. "/readme.txt", "no classes here")
error_like(function() data.ImageFolder(bad) end, { bad, "no class folders" }, "a folder without class folders")
error_like(function() data.ImageFolder(tmp .. "/missing") end, { tmp .. "/missing", "No such file" },
  "a missing root")
venom.core.make_dir(bad .. "/a")
venom.core.make_dir(bad .. "/b")
image.save(bad .. "/a/1.png", venom.zeros(4, 4, 1, { dtype = "u8" }))
error_like(function() data.ImageFolder(bad) end, { bad .. "/b", "no image files" }, "an empty class")
write(bad .. "/b/x.png", "not a png at all")
local dsb = data.ImageFolder(bad)
error_like(function() dsb:get_batch({ 1, 2 }, 2) end, { bad .. "/b/x.png", "not an image" },
  "a file that is not an image (2 workers)")
local png = testutil.slurp(bad .. "/a/1.png")
write(bad .. "/b/x.png", png:sub(1, #png - 20))
error_like(function() epoch(data.DataLoader(data.ImageFolder(bad), { batch_size = 2 })) end,
  { bad .. "/b/x.png", "truncated" }, "a truncated PNG")
image.save(bad .. "/b/x.png", venom.zeros(5, 4, 1, { dtype = "u8" }))
error_like(function() data.ImageFolder(bad):get_batch({ 1, 2 }) end,
  { bad .. "/a/1.png", "(4, 4, 1)", bad .. "/b/x.png", "(5, 4, 1)", "Resize" },
  "images of different sizes without Resize")
T.is(table.concat(data.ImageFolder(bad, { transform = tf.Resize({ 4, 4 }) }):get_batch({ 1, 2 }):shape(), ","),
  "2,4,4,1", "the same images with Resize({4, 4}) stack")
error_like(function() data.DataLoader({ venom.zeros(3) }, { workers = 2 }) end, { "workers" },
  "workers with plain tensors is an error")
error_like(function() data.export_image_folder(venom.zeros(2, 3, 3, { dtype = "u8" }), { 1, 2 }, tmp .. "/e",
  { classes = { "b", "a" } }) end, { "sorted order" }, "export: class names out of sorted order")
error_like(function() tf.ToTensor()(venom.zeros(3, 3, 3)) end, { "ToTensor", "f32 (3, 3, 3)" },
  "ToTensor of an f32 tensor")

error_like(function() image.load(5) end, { "path must be a string" }, "image.load(5)")
error_like(function() image.save(tmp .. "/q.jpg", img, 500) end, { "quality must be 1..100, found 500" },
  "image.save with quality 500")
error_like(function() image.resize(img, 0, 3) end, { "image_resize", "0 x 3" }, "image.resize to 0 x 3")
error_like(function() image.load_batch({ tmp .. "/a.png", 7 }) end, { "paths[2] must be a string" },
  "image.load_batch with a number for a path")

os.execute("rm -rf '" .. tmp .. "'")
T.done()
