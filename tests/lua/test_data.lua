-- venom.data: DataLoader batching and shuffling; IDX dataset loading (small
-- files written here, and the real Fashion-MNIST when it is installed).
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local data = require "venom.data"

-- x = 1..n (f32), y = 2·x (i64): a batch keeps its pairs aligned iff y = 2x.
local function dataset(n)
  local xs, ys = {}, {}
  for i = 1, n do xs[i], ys[i] = i, 2 * i end
  return venom.tensor(xs), venom.tensor(ys, "i64")
end

-- All x values of one epoch, in order, plus the batch sizes; checks y = 2x.
-- direct: iterate `for ... in loader` rather than loader:iter().
local function epoch(loader, direct)
  local seen, sizes, aligned = {}, {}, true
  for xb, yb in direct and loader or loader:iter() do
    local xt, yt = xb:totable(), yb:totable()
    sizes[#sizes + 1] = #xt
    for i, v in ipairs(xt) do
      seen[#seen + 1] = v
      if yt[i] ~= 2 * v then aligned = false end
    end
  end
  return seen, table.concat(sizes, ","), aligned
end

local function is_permutation(list, n)
  if #list ~= n then return false end
  local count = {}
  for _, v in ipairs(list) do count[v] = (count[v] or 0) + 1 end
  for i = 1, n do
    if count[i] ~= 1 then return false end
  end
  return true
end

-- Batch counts ---------------------------------------------------------------------------
do
  local x, y = dataset(10)
  local l = data.DataLoader({ x, y }, { batch_size = 3 })
  tap.is(#l, 4, "#loader: 10 samples in batches of 3 is 4 batches")
  local seen, sizes, aligned = epoch(l)
  tap.is(sizes, "3,3,3,1", "no shuffle: batch sizes, last one short")
  tap.is(table.concat(seen, ","), "1,2,3,4,5,6,7,8,9,10", "no shuffle: samples in order")
  tap.ok(aligned, "no shuffle: x and y stay aligned")

  local d = data.DataLoader({ x, y }, { batch_size = 3, drop_last = true })
  tap.is(#d, 3, "#loader with drop_last: 3 batches")
  tap.is(select(2, epoch(d)), "3,3,3", "drop_last drops the short batch")
  tap.is(#data.DataLoader({ x, y }, { batch_size = 5, drop_last = true }), 2,
    "drop_last with an exact fit keeps every batch")
  tap.is(#data.DataLoader({ x }), 1, "default batch_size 64")
  tap.is(#data.DataLoader({ x }, { batch_size = 20 }), 1, "batch larger than the data")

  local m = venom.randn(10, 3)
  local ml = data.DataLoader({ m }, { batch_size = 4, shuffle = true })
  local shapes = {}
  for xb in ml:iter() do shapes[#shapes + 1] = table.concat(xb:shape(), "x") end
  tap.is(table.concat(shapes, " "), "4x3 4x3 2x3", "2-D tensor: batches keep trailing dims")

  local calls = 0
  local tl = data.DataLoader({ x, y }, { batch_size = 5, transform = function(xb, yb)
    calls = calls + 1
    return xb * 10, yb
  end })
  local firsts = {}
  for xb in tl:iter() do firsts[#firsts + 1] = xb:totable()[1] end
  tap.is(calls, 2, "transform runs once per batch")
  tap.is(table.concat(firsts, ","), "10,60", "transform's results are what the loop sees")
  tap.ok(tostring(l):find("DataLoader(10 samples, batch_size=3", 1, true), "tostring(loader)")
end

-- Shuffling ------------------------------------------------------------------------------
do
  local n = 100
  local x, y = dataset(n)
  local l = data.DataLoader({ x, y }, { batch_size = 16, shuffle = true })
  venom.manual_seed(7)
  local e1, sizes, aligned = epoch(l)
  local e2 = epoch(l)
  tap.ok(is_permutation(e1, n), "shuffle: each sample exactly once per epoch")
  tap.ok(is_permutation(e2, n), "shuffle: second epoch too")
  tap.ok(aligned, "shuffle: x and y stay aligned")
  tap.is(sizes, "16,16,16,16,16,16,4", "shuffle: batch sizes")
  tap.ok(table.concat(e1, ",") ~= table.concat(e2, ","), "shuffle: a new order each epoch")
  local sorted = true
  for i = 2, n do if e1[i] < e1[i - 1] then sorted = false end end
  tap.ok(not sorted, "shuffle: the order is not the identity")
  venom.manual_seed(7)
  tap.is(table.concat(epoch(l), ","), table.concat(e1, ","), "shuffle: reproducible under manual_seed")
end

-- Bad arguments --------------------------------------------------------------------------
do
  local x = dataset(10)
  tap.error_like(function() data.DataLoader({ x, venom.zeros(9) }) end,
    "tensor 1 has 10 samples %(first dimension%) but tensor 2 has 9", "mismatched first dims")
  tap.error_like(function() data.DataLoader({ x }, { batch_size = 0 }) end,
    "batch_size must be a positive integer, got 0", "batch_size 0")
  tap.error_like(function() data.DataLoader(x) end, "expected a list of tensors", "a tensor, not a list")
  tap.error_like(function() data.DataLoader({ x, "y" }) end, "element 2 is a string, expected a tensor",
    "a string in the list")
end

-- for ... in loader: one epoch per loop -------------------------------------------------------
do
  local x, y = dataset(10)
  local l = data.DataLoader({ x, y }, { batch_size = 4 })
  local seen, sizes, aligned = epoch(l, true)
  tap.is(sizes, "4,4,2", "for in loader: the batches of one epoch")
  tap.is(table.concat(seen, ","), "1,2,3,4,5,6,7,8,9,10", "for in loader: samples in order")
  tap.ok(aligned, "for in loader: x and y stay aligned")
  local again = 0
  for _ in l do again = again + 1 end
  tap.is(again, 3, "for in loader: the next loop is a new epoch")
  for _ in l do break end
  local after_break = {}
  for xb in l do after_break[#after_break + 1] = xb:totable()[1] end
  tap.is(table.concat(after_break, ","), "1,5,9", "for in loader: a loop left by break does not "
    .. "shorten the next epoch")

  local n = 50
  local sx, sy = dataset(n)
  local sl = data.DataLoader({ sx, sy }, { batch_size = 8, shuffle = true })
  local e1, _, ok = epoch(sl, true)
  local e2 = epoch(sl, true)
  tap.ok(is_permutation(e1, n) and is_permutation(e2, n) and ok,
    "for in loader with shuffle: each sample once per epoch, aligned")
  tap.ok(table.concat(e1, ",") ~= table.concat(e2, ","), "for in loader with shuffle: a new order")
  local t = data.DataLoader({ x }, { batch_size = 5, transform = function(xb) return xb * 2, "tag" end })
  local tags = {}
  for xb, tag in t do tags[#tags + 1] = xb:totable()[1] .. tag end
  tap.is(table.concat(tags, ","), "2tag,12tag", "for in loader: the transform's results")
  tap.error_like(function() l.iter() end, "call it with a colon, loader:iter%(%)",
    "loader.iter() (a dot) is a clear error")
end

-- Bad arguments to the data functions ------------------------------------------------------
do
  local imgs = venom.zeros({ 2, 2, 2 }, { dtype = "u8" })
  tap.error_like(function() data.flatten_images(imgs, 100) end,
    "data.flatten_images: std must be a positive number, got nil %(arguments: images, mean, std",
    "flatten_images(images, 100): std missing")
  tap.error_like(function() data.flatten_images(100) end,
    "data.flatten_images: images must be a tensor %(N, H, W%), got number", "flatten_images: no images")
  tap.error_like(function() data.flatten_images(imgs, "0.5", 1) end,
    "mean must be a finite number, got 0.5", "flatten_images: mean a string")
  tap.error_like(function() data.flatten_images(imgs, 0.5, 0) end,
    "std must be a positive number, got 0", "flatten_images: std 0")
  tap.error_like(function() data.flatten_images(imgs, 0.5, 1, -1) end,
    "limit must be .*integer.*got %-1", "flatten_images: negative limit")
  tap.error_like(function() data.flatten_images(venom.zeros(3), 0.5, 1) end,
    "images must be a tensor %(N, H, W%), got a 1%-d tensor", "flatten_images: a 1-d tensor")

  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p '" .. dir .. "'")
  tap.error_like(function() data.text(dir) end,
    "data.text: " .. dir:gsub("%p", "%%%0") .. " is a directory; expected a file",
    "data.text(directory): a clear error")
  tap.error_like(function() data.fortunes({ root = dir }) end,
    "cannot open " .. dir:gsub("%p", "%%%0") .. "/art %(No such file or directory%); install",
    "data.fortunes: a missing file is named")
  os.execute("mkdir -p '" .. dir .. "/art'")
  tap.error_like(function() data.fortunes({ root = dir }) end,
    "/art is a directory; expected a file", "data.fortunes: a directory in place of a file")
  os.execute("rm -rf '" .. dir .. "'")

  local x = dataset(4)
  tap.error_like(function() data.DataLoader({ x }, { shuffle = "yes" }) end,
    "shuffle must be true or false, got yes", "DataLoader: shuffle not a boolean")
  tap.error_like(function() data.DataLoader({ x }, { drop_last = 1 }) end,
    "drop_last must be true or false, got 1", "DataLoader: drop_last not a boolean")
  tap.error_like(function() data.fashion_mnist_options(5) end,
    "more must be a table", "fashion_mnist_options: more not a table")
  tap.error_like(function() data.fashion_mnist_options({ warmup = 3 }) end,
    "more%[warmup%] must be {default, help text}, got number", "fashion_mnist_options: a bare default")
end

-- IDX files written here -------------------------------------------------------------------
local idx = require "idxfile"
local be32, write, idx_images, idx_labels = idx.be32, idx.write, idx.images, idx.labels

do
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p '" .. dir .. "'")
  write(dir .. "/t10k-images-idx3-ubyte", idx_images(3))
  write(dir .. "/t10k-labels-idx1-ubyte", idx_labels({ 0, 9, 4 }))
  local ds = data.mnist(dir, "test")
  tap.is(ds.n, 3, "mnist: n from the files")
  tap.is(table.concat(ds.images:shape(), "x"), "3x28x28", "mnist: images (N, 28, 28)")
  tap.is(ds.images:dtype(), "u8", "mnist: images are u8")
  tap.is(ds.labels:dtype(), "i64", "mnist: labels are i64")
  tap.is(table.concat(ds.labels:totable(), ","), "1,10,5", "mnist: labels shifted to 1-based")
  tap.is(ds.images:get(1, 1, 2), 14, "mnist: pixel values read as stored")

  write(dir .. "/train-images-idx3-ubyte", idx_images(2))
  write(dir .. "/train-labels-idx1-ubyte", idx_labels({ 1, 2, 3 }))
  tap.error_like(function() data.mnist(dir, "train") end,
    "train%-images%-idx3%-ubyte has 2 images but .*train%-labels%-idx1%-ubyte has 3 labels",
    "mnist: image and label counts differ")
  tap.error_like(function() data.mnist(dir, "validation") end,
    "split must be 'train' or 'test', got validation", "mnist: bad split")
  os.execute("rm -rf '" .. dir .. "'")
end

tap.error_like(function() data.fashion_mnist("train", { root = "/nonexistent/fm" }) end,
  "cannot open /nonexistent/fm/train%-images%-idx3%-ubyte%.gz.*install the Debian package dataset%-fashion%-mnist",
  "fashion_mnist: a missing root names the path and the package")

-- The real Fashion-MNIST, when installed --------------------------------------------------------
local probe = io.open(data.FASHION_MNIST_ROOT .. "/t10k-labels-idx1-ubyte.gz", "rb")
if probe then
  probe:close()
  local test = data.fashion_mnist("test")
  tap.is(test.n, 10000, "Fashion-MNIST test: 10,000 images")
  tap.is(table.concat(test.images:shape(), "x"), "10000x28x28", "Fashion-MNIST test: image shape")
  tap.is(test.labels:min():item(), 1, "Fashion-MNIST test: smallest label is 1")
  tap.is(test.labels:max():item(), 10, "Fashion-MNIST test: largest label is 10")
  local train = data.fashion_mnist("train")
  tap.is(train.n, 60000, "Fashion-MNIST train: 60,000 images")
  tap.is(table.concat(train.labels:shape(), "x"), "60000", "Fashion-MNIST train: label shape")
  -- The tutorial normalizes with this mean; check it on the real pixels.
  local mean = train.images:float():mean():item() / 255
  tap.near(mean, 0.2860, 5e-4, "Fashion-MNIST train: pixel mean 0.2860")
  -- The loaders keep u8 images and normalize per batch: the same values,
  -- bit for bit, as flatten_images' f32 copy of the whole set.
  local tl, vl = data.fashion_mnist_loaders({ limit = 300, batch_size = 100 })
  tap.is(tl.tensors[1]:dtype() .. " " .. vl.tensors[1]:dtype(), "u8 u8",
    "fashion_mnist_loaders: the sets stay u8")
  local xb, yb
  for b1, b2 in vl:iter() do xb, yb = b1, b2; break end
  local rows = data.flatten_images(test.images, data.FASHION_MNIST_MEAN, data.FASHION_MNIST_STD,
    1000)
  tap.is(xb:dtype() .. " " .. table.concat(xb:shape(), "x"), "f32 1000x784",
    "fashion_mnist_loaders: f32 batches of 784")
  tap.ok(xb:eq(rows):min():item() == 1 and yb:eq(test.labels:narrow(1, 1, 1000)):min():item() == 1,
    "fashion_mnist_loaders: a batch equals flatten_images' rows exactly")
  tap.is(#tl, 3, "fashion_mnist_loaders: limit 300 in batches of 100")
else
  tap.skip("Fashion-MNIST not installed (dataset-fashion-mnist)", 11)
end

-- flatten_images: u8 (N, H, W) → f32 rows of (x/255 − mean)/std, first `limit` images.
do
  local imgs = venom.tensor({ { { 0, 255 }, { 51, 102 } }, { { 1, 2 }, { 3, 4 } }, { { 9, 9 }, { 9, 9 } } }, "u8")
  local rows, n = data.flatten_images(imgs, 0.5, 0.25, 2)
  tap.is(n, 2, "flatten_images: limit")
  tap.is(table.concat(rows:shape(), "x"), "2x4", "flatten_images: one row per image")
  local want = { (0 / 255 - 0.5) / 0.25, (1 - 0.5) / 0.25, (0.2 - 0.5) / 0.25, (0.4 - 0.5) / 0.25 }
  local got, worst = rows:totable()[1], 0
  for i = 1, 4 do worst = math.max(worst, math.abs(got[i] - want[i])) end
  tap.ok(worst < 1e-5, "flatten_images: (x/255 − mean)/std")
end

-- data.corpus: the text file when a path is given, its name as the third value
do
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(("0123456789"):rep(3))
  f:close()
  local tr, va, name = data.corpus(path)
  local tr2, va2 = data.text(path)
  local same = tr:size(1) == tr2:size(1) and va:size(1) == va2:size(1)
    and (tr - tr2):abs():max():item() == 0 and (va - va2):abs():max():item() == 0
  tap.ok(name == path and same, "data.corpus(path) is data.text(path), named by the path")
  os.remove(path)
  tap.error_like(function() data.corpus(path) end, "data.text: .*" .. path:gsub("%p", "%%%0"),
    "data.corpus: a missing file is data.text's error")
end

tap.done()
