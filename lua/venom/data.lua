--- venom.data — datasets and batching.
--
--     local ds = data.fashion_mnist("train")        -- {images=(N,28,28) u8, labels=(N) i64, n=N}
--     local loader = data.DataLoader({x, y}, {batch_size = 128, shuffle = true})
--     for xb, yb in loader do ... end               -- one epoch: #loader batches
--     local train, val = data.fortunes()             -- byte tokens 1..256, i64 (n)
--     local x, y = data.random_windows(train, 32, 128) -- (32, 128) inputs, next-token targets
local venom = require "venom"
local util = require "venom.util"
local fail = util.fail

local data = {}

data.FASHION_MNIST_ROOT = "/usr/share/datasets/fashion-mnist"
local FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"

local FILES = {
  train = { "train-images-idx3-ubyte", "train-labels-idx1-ubyte" },
  test = { "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte" },
}

-- Path of an IDX file under root: the .gz file, or the uncompressed one if
-- only that exists. Errors name the missing path (and the package to install).
local function find_file(who, root, name, hint)
  local path = root .. "/" .. name .. ".gz"
  for _, p in ipairs({ path, root .. "/" .. name }) do
    local f = io.open(p, "rb")
    if f then
      f:close()
      return p
    end
  end
  local msg = ("%s: cannot open %s (no such file)"):format(who, path)
  if hint then msg = msg .. "; " .. hint end
  fail(msg)
end

-- venom.idx_load with its error (a missing or malformed file) raised at the
-- caller's line rather than inside this file.
local function idx_load(who, path)
  local ok, t = pcall(venom.idx_load, path)
  if not ok then fail(("%s: %s"):format(who, util.error_text(t))) end
  return t
end

-- The labels of the MNIST-format files count classes 0..9.
local NUM_CLASSES = 10

local function load_idx(who, root, split, hint)
  if type(root) ~= "string" then
    fail(("%s: root must be a directory path (a string), got %s"):format(who, type(root)))
  end
  local files = FILES[split]
  if not files then
    fail(("%s: split must be 'train' or 'test', got %s"):format(who, tostring(split)))
  end
  local images_path = find_file(who, root, files[1], hint)
  local labels_path = find_file(who, root, files[2], hint)
  local images = idx_load(who, images_path)
  local raw = idx_load(who, labels_path)
  if images:dim() ~= 3 then
    fail(("%s: %s holds a tensor of %d dims, expected 3 (N, rows, cols)")
      :format(who, images_path, images:dim()))
  end
  if raw:dim() ~= 1 then
    fail(("%s: %s holds a tensor of %d dims, expected 1 (N)"):format(who, labels_path, raw:dim()))
  end
  local n = images:size(1)
  if raw:size(1) ~= n then
    fail(("%s: %s has %d images but %s has %d labels"):format(who, images_path, n,
      labels_path, raw:size(1)))
  end
  -- A label outside 0..9 would become a class no model output has.
  for _, ext in ipairs(n > 0 and { "max", "min" } or {}) do
    local t = raw[ext](raw)
    local v = t:item()
    t:free()
    if v < 0 or v >= NUM_CLASSES then
      local at = raw["arg" .. ext](raw)
      local pos = at:item()
      at:free()
      fail(("%s: %s holds label %d at position %d (of %d); expected 0..%d")
        :format(who, labels_path, v, pos, n, NUM_CLASSES - 1))
    end
  end
  -- The files count classes from 0; Lua counts from 1.
  local labels = raw:long()
  raw:free()
  labels:add_(1)
  return { images = images, labels = labels, n = n }
end

--- Reads MNIST-format IDX files from directory `root` for `split` ("train":
-- train-images-idx3-ubyte.gz, ...; "test": t10k-...). Returns {images = u8
-- tensor (N, 28, 28), labels = i64 tensor (N) of classes 1..10, n = N}.
function data.mnist(root, split)
  return load_idx("data.mnist", root, split, nil)
end

--- Mean and standard deviation of the Fashion-MNIST training pixels scaled
-- to [0, 1] (Xiao, Rasul & Vollgraf 2017).
data.FASHION_MNIST_MEAN, data.FASHION_MNIST_STD = 0.2860, 0.3530

-- u8 pixels → a new f32 tensor of (x/255 − mean)/std (one multiply and one
-- subtract, in place on the f32 copy).
local function normalize_pixels(u8, mean, std)
  local x = u8:float()
  x:mul_(1 / (255 * std))
  x:sub_(mean / std)
  return x
end

--- u8 images (N, H, W) → f32 rows (n, H·W) of (x/255 − mean)/std, with n =
-- min(N, limit) (limit 0 or nil: all). One f32 copy is made (scaled in
-- place). Returns the rows and n. Errors name a bad argument: images not a
-- tensor of at least 2 dims, mean not a finite number, std not a positive
-- finite number, limit not an integer >= 0.
function data.flatten_images(images, mean, std, limit)
  local who = "data.flatten_images"
  local usage = " (arguments: images, mean, std[, limit])"
  if not venom.is_tensor(images) or images:dim() < 2 then
    fail(("%s: images must be a tensor (N, H, W), got %s%s"):format(who,
      venom.is_tensor(images) and ("a %d-d tensor"):format(images:dim()) or type(images), usage))
  end
  if type(mean) ~= "number" or mean ~= mean or math.abs(mean) == math.huge then
    fail(("%s: mean must be a finite number, got %s%s"):format(who, tostring(mean), usage))
  end
  if type(std) ~= "number" or not (std > 0 and std < math.huge) then
    fail(("%s: std must be a positive number, got %s%s"):format(who, tostring(std), usage))
  end
  if limit ~= nil then util.check_int(limit, "limit", { min = 0, who = who }) end
  local n = images:size(1)
  if limit and limit > 0 and limit < n then n = limit end
  local u8 = images:narrow(1, 1, n)
  local x = normalize_pixels(u8, mean, std)
  local rows = x:reshape(n, -1)
  u8:free(); x:free()
  return rows, n
end

--- Fashion-MNIST (Xiao et al. 2017) from the Debian package
-- dataset-fashion-mnist. opts.root overrides the directory.
function data.fashion_mnist(split, opts)
  opts = util.check_options(opts, { "root" }, "data.fashion_mnist")
  local root = opts.root or data.FASHION_MNIST_ROOT
  return load_idx("data.fashion_mnist", root, split or "train",
    ("install the Debian package %s (apt-get install %s)")
      :format(FASHION_MNIST_PACKAGE, FASHION_MNIST_PACKAGE))
end

--- The ten Fashion-MNIST class names, indexed by label 1..10.
data.FASHION_MNIST_CLASSES = {
  "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
  "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
}

--- Fashion-MNIST ready to train a multilayer perceptron on, as the
-- tutorials and benchmarks do: both splits (data.fashion_mnist), each image
-- a row of 784 f32 values normalized with the training set's mean and
-- standard deviation (the values data.flatten_images gives; the sets stay
-- u8 in memory, 55 MB, and each batch is normalized when it is drawn, by
-- the loaders' transform), in two DataLoaders: the first
-- `limit` training images (0: all) shuffled in batches of batch_size, and
-- the test images in batches of 1000. opts: root, limit = 0,
-- batch_size = 128, device = "cpu", distributed = false (true: each rank of
-- venom.distributed takes its share of both sets through a
-- data.DistributedSampler, in batches of batch_size / world size, so that
-- batch_size stays the global batch). Returns the train and test loaders.
function data.fashion_mnist_loaders(opts)
  opts = util.check_options(opts, { "root", "limit", "batch_size", "device", "distributed" },
    "data.fashion_mnist_loaders")
  local train = data.fashion_mnist("train", { root = opts.root })
  local test = data.fashion_mnist("test", { root = opts.root })
  local mean, std = data.FASHION_MNIST_MEAN, data.FASHION_MNIST_STD
  if opts.limit ~= nil then
    util.check_int(opts.limit, "limit", { min = 0, who = "data.fashion_mnist_loaders" })
  end
  local n_train = train.images:size(1)
  if opts.limit and opts.limit > 0 and opts.limit < n_train then n_train = opts.limit end
  local x_train = train.images:narrow(1, 1, n_train):reshape(n_train, -1) -- u8 rows
  local y_train = train.labels:narrow(1, 1, n_train)
  local x_test = test.images:reshape(test.images:size(1), -1)
  local function transform(xb, yb) return normalize_pixels(xb, mean, std), yb end
  local bs = opts.batch_size or 128
  if opts.distributed then
    local P = venom.core.dist_world_size()
    if bs % P ~= 0 then
      fail(("data.fashion_mnist_loaders: batch_size %d is not a multiple of the %d ranks")
        :format(bs, P))
    end
    return data.DataLoader({ x_train, y_train }, { batch_size = bs / P, device = opts.device,
             sampler = data.DistributedSampler(n_train), transform = transform }),
           data.DataLoader({ x_test, test.labels }, { batch_size = 1000, device = opts.device,
             sampler = data.DistributedSampler(x_test:size(1), { shuffle = false }),
             transform = transform })
  end
  return data.DataLoader({ x_train, y_train },
           { batch_size = bs, shuffle = true, device = opts.device, transform = transform }),
         data.DataLoader({ x_test, test.labels }, { batch_size = 1000, device = opts.device,
           transform = transform })
end

-- The options every script that trains the Fashion-MNIST MLP takes: name →
-- {default, help text}.
local FASHION_MNIST_OPTIONS = {
  epochs = { 5, "passes over the training set" },
  batch_size = { 128, "images per optimizer step" },
  lr = { 1e-3, "AdamW learning rate (the peak of the schedule)" },
  hidden = { 1024, "width of the two hidden layers" },
  seed = { 0, "seed of the engine RNG (weights, shuffling)" },
  weight_decay = { 0.01, "AdamW decoupled weight decay" },
  cosine = { true, "warm-up then cosine decay of the lr (--no-cosine: constant lr)" },
  limit = { 0, "train on the first N images only (0 = all)" },
  root = { data.FASHION_MNIST_ROOT, "directory holding the IDX files" },
  device = { "cpu", "cpu or cuda: where the model trains" },
}

--- The command line of a script that trains an MLP on Fashion-MNIST with
-- AdamW (tutorials 1 and 2): the options epochs, batch_size, lr, hidden,
-- seed, weight_decay, cosine, limit, root and device, plus the script's own
-- `more` (name → {default, help text}; a shared name given there takes the
-- script's default and help). Returns the defaults and the help texts for
-- util.parse_cli, and a function that checks the shared options' values
-- (util.check_arg_*), to call from the script's own check.
function data.fashion_mnist_options(more)
  local who = "data.fashion_mnist_options"
  if more ~= nil and type(more) ~= "table" then
    fail(("%s: more must be a table of name → {default, help text}, got %s"):format(who, type(more)))
  end
  for name, o in pairs(more or {}) do
    if type(name) ~= "string" or type(o) ~= "table" or o[1] == nil or type(o[2]) ~= "string" then
      fail(("%s: more[%s] must be {default, help text}, got %s"):format(who, tostring(name),
        type(o) == "table" and "{" .. tostring(o[1]) .. ", " .. tostring(o[2]) .. "}" or type(o)))
    end
  end
  local defaults, help = {}, {}
  for _, set in ipairs({ FASHION_MNIST_OPTIONS, more or {} }) do
    for name, o in pairs(set) do defaults[name], help[name] = o[1], o[2] end
  end
  local function check(o)
    util.check_arg_int(o, "epochs", 1)
    util.check_arg_int(o, "batch_size", 1)
    util.check_arg_int(o, "hidden", 1)
    util.check_arg_int(o, "limit", 0)
    util.check_arg_int(o, "seed", 0)
    util.check_arg_number(o, "lr", 0)
    util.check_arg_number(o, "weight_decay", 0, true)
    util.check_arg_device(o, "device")
  end
  return defaults, help, check
end

-- DataLoader -------------------------------------------------------------------

local Loader = {}
local sampling = require "venom.data_sampler"

--- data.DistributedSampler(n, opts): this rank's share of each epoch in a
-- distributed run (venom.data_sampler has the details).
data.DistributedSampler = sampling.DistributedSampler

--- Batches the tensors in `tensors` (a list such as {x, y}, all with the same
-- first dimension N) along that dimension.
-- opts: batch_size = 64, shuffle = false (a fresh permutation from the
--   engine RNG, venom.randperm, at every loader:iter()), drop_last = false
--   (drop a last batch smaller than batch_size), transform = fn (called as
--   fn(b1, b2, ...) on each batch; its results are what the iterator yields),
--   device = "cpu" (each batch is copied to this device, e.g. "cuda", before
--   the transform: the data stays in host memory and one batch at a time
--   crosses over), sampler = a data.DistributedSampler (this rank's share
--   of each epoch, in place of shuffle).
-- `tensors` may also be a data set with a get_batch method, such as
-- data.ImageFolder: each batch is then ds:get_batch(positions, workers),
-- with opts.workers = 0 (threads decoding the batch's files; 0: this one).
-- `#loader` is the number of batches per epoch. A batch is one index_select
-- per tensor when shuffling and a view (narrow, no copy) otherwise.
-- `for b1, b2, ... in loader do` runs one epoch (as loader:iter() does):
-- each for loop starts a new epoch (a new permutation when shuffling), also
-- after a loop left with break.
function data.DataLoader(tensors, opts)
  local who = "data.DataLoader"
  local dataset = type(tensors) == "table" and type(tensors.get_batch) == "function" and tensors
  if type(tensors) ~= "table" or (#tensors == 0 and not dataset) then
    fail(who .. ": expected a list of tensors such as {x, y} or a data set, got " .. type(tensors))
  end
  opts = util.check_options(opts, { "batch_size", "shuffle", "drop_last", "transform", "device",
    "workers", "sampler" }, who)
  local device = opts.device or "cpu"
  if device ~= "cpu" and device ~= "cuda" then
    fail(who .. ": device must be 'cpu' or 'cuda', got " .. tostring(device))
  end
  if device == "cuda" and not venom.cuda.is_available() then
    fail(who .. ": device 'cuda' asked for, but no CUDA device is available")
  end
  local n
  for i, t in ipairs(tensors) do
    if not venom.is_tensor(t) then
      fail(("%s: element %d is a %s, expected a tensor"):format(who, i, type(t)))
    end
    if t:dim() < 1 then
      fail(("%s: tensor %d is a scalar; tensors need a first (sample) dimension"):format(who, i))
    end
    local ni = t:size(1)
    n = n or ni
    if ni ~= n then
      fail(("%s: tensor 1 has %d samples (first dimension) but tensor %d has %d")
        :format(who, n, i, ni))
    end
  end
  if dataset then n = util.check_int(dataset.n, "the data set's n", { min = 0, who = who }) end
  if opts.workers ~= nil and not dataset then
    fail(who .. ": workers applies to a data set that decodes files (data.ImageFolder), not to tensors")
  end
  local workers = util.check_int(opts.workers or 0, "workers", { min = 0, max = 1024, who = who })
  local bs = util.check_int(opts.batch_size or 64, "batch_size", { min = 1, who = who })
  for _, k in ipairs({ "shuffle", "drop_last" }) do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      fail(("%s: %s must be true or false, got %s"):format(who, k, tostring(opts[k])))
    end
  end
  if opts.transform ~= nil and type(opts.transform) ~= "function" then
    fail(who .. ": transform must be a function, got " .. type(opts.transform))
  end
  local sampler = opts.sampler
  if sampler ~= nil then
    if not sampling.is_sampler(sampler) then
      fail(who .. ": sampler must be a data.DistributedSampler, got " .. type(sampler))
    end
    if opts.shuffle then fail(who .. ": give shuffle to the sampler, not to the loader") end
    if sampler.n ~= n then
      fail(("%s: the sampler is for %d samples but the tensors have %d"):format(who, sampler.n, n))
    end
  end
  local state = {
    tensors = tensors, n = sampler and sampler.num_samples or n, batch_size = bs, sampler = sampler,
    shuffle = opts.shuffle and true or false,
    drop_last = opts.drop_last and true or false,
    transform = opts.transform, device = device, dataset = dataset or nil, workers = workers,
  }
  -- LuaJIT honours __len only on userdata, so the loader is a proxy.
  local proxy = newproxy(true)
  local mt = getmetatable(proxy)
  mt.__index = function(_, k) return Loader[k] or state[k] end
  mt.__newindex = state
  mt.__len = function(self) return Loader.num_batches(self) end
  -- The generic for calls the loader as f(nil, previous first value): nil
  -- there means a new loop, hence a new epoch.
  mt.__call = function(self, _, previous)
    if previous == nil or not state.epoch then state.epoch = Loader.iter(self) end
    local res = { state.epoch() }
    if res[1] == nil then state.epoch = nil end
    return unpack(res, 1, table.maxn(res))
  end
  mt.__tostring = function()
    return ("DataLoader(%d samples, batch_size=%d, shuffle=%s, drop_last=%s)")
      :format(state.n, state.batch_size, tostring(state.shuffle), tostring(state.drop_last))
  end
  return proxy
end

-- `loader.iter()` (a dot for a colon) leaves self nil: say so.
local function check_self(self, name)
  if type(self) ~= "userdata" or not rawequal(self.iter, Loader.iter) then
    fail(("DataLoader:%s: call it with a colon, loader:%s()"):format(name, name))
  end
end

--- Number of batches per epoch (also #loader).
function Loader.num_batches(self)
  check_self(self, "num_batches")
  if self.drop_last then
    return math.floor(self.n / self.batch_size)
  end
  return math.ceil(self.n / self.batch_size)
end

--- Iterator over one epoch: `for b1, b2, ... in loader:iter() do`. The
-- batches are new tensors (or views); call :free() on them when done to
-- return their memory at once.
function Loader.iter(self)
  check_self(self, "iter")
  local tensors, n, bs = self.tensors, self.n, self.batch_size
  local nb, transform = Loader.num_batches(self), self.transform
  local perm = self.sampler and self.sampler:indices() or self.shuffle and venom.randperm(n) or nil
  local k = 0
  local batch = {}
  return function()
    k = k + 1
    if k > nb then
      if perm then perm:free() end
      return nil
    end
    local start = (k - 1) * bs + 1
    local len = math.min(bs, n - start + 1)
    local idx = perm and perm:narrow(1, start, len)
    if self.dataset then
      local positions = idx and idx:totable() or {}
      for j = #positions + 1, len do positions[j] = start + j - 1 end
      batch = { self.dataset:get_batch(positions, self.workers) }
    else
      for i, t in ipairs(tensors) do
        batch[i] = idx and t:index_select(1, idx) or t:narrow(1, start, len)
      end
    end
    for i = 1, #batch do
      if batch[i]:device() ~= self.device then
        local host = batch[i]
        batch[i] = host:to(self.device)
        host:free()
      end
    end
    if idx then idx:free() end
    if transform then
      return transform(unpack(batch, 1, #batch))
    end
    return unpack(batch, 1, #batch)
  end
end

-- Byte-level text ----------------------------------------------------------------

data.FORTUNES_ROOT = "/usr/share/games/fortunes"
local FORTUNES_PACKAGE = "fortunes"

-- The English fortune files of Debian's fortunes package (the plain text;
-- the .dat indexes and .u8 links are left out), in a fixed order so that the
-- corpus, and the split, are the same on every machine.
data.FORTUNES_FILES = {
  "art", "ascii-art", "computers", "cookie", "debian", "definitions", "disclaimer",
  "drugs", "education", "ethnic", "food", "fortunes", "goedel", "humorists", "kids",
  "knghtbrd", "law", "linux", "linuxcookie", "literature", "love", "magic", "medicine",
  "men-women", "miscellaneous", "news", "paradoxum", "people", "perl", "pets",
  "platitudes", "politics", "pratchett", "riddles", "science", "songs-poems", "sports",
  "startrek", "tao", "translate-me", "wisdom", "work", "zippy",
}

-- Bytes per venom.tensor call: bounds the Lua table built for each piece.
local CHUNK = 65536

-- The bytes of string s as i64 tokens byte + 1 (1..256), a (#s) tensor.
local function tokens_of(s)
  local pieces, buf = {}, {}
  for start = 1, #s, CHUNK do
    local stop = math.min(start + CHUNK - 1, #s)
    for i = start, stop do buf[i - start + 1] = s:byte(i) end
    for i = stop - start + 2, #buf do buf[i] = nil end
    pieces[#pieces + 1] = venom.tensor(buf, "u8")
  end
  local bytes = #pieces == 1 and pieces[1] or venom.cat(pieces, 1)
  local ids = bytes:long()
  ids:add_(1)
  for _, p in ipairs(pieces) do p:free() end
  if bytes ~= pieces[1] then bytes:free() end
  return ids
end

local read_file = util.read_file

-- The train/validation split of a text: the first ⌊split·n⌋ bytes train.
local function split_text(who, s, opts)
  opts = util.check_options(opts, { "split" }, who)
  local split = opts.split or 0.9
  if type(split) ~= "number" or not (split > 0 and split < 1) then
    fail(who .. ": split must be a number in (0, 1), got " .. tostring(split))
  end
  local n_train = math.floor(split * #s)
  if n_train < 2 or #s - n_train < 2 then
    fail(("%s: a text of %d bytes is too short to split %g/%g (each part needs 2 bytes)")
      :format(who, #s, split, 1 - split))
  end
  return tokens_of(s:sub(1, n_train)), tokens_of(s:sub(n_train + 1))
end

--- Byte-level tokens of the text file at `path`: each byte b becomes the
-- token b + 1, so the vocabulary is 1..256 (data.TEXT_VOCAB). Returns two
-- i64 tensors, train and val: the first ⌊split·n⌋ bytes and the rest.
-- opts: split = 0.9, a number in (0, 1). Errors name the unreadable path.
function data.text(path, opts)
  local who = "data.text"
  if type(path) ~= "string" then
    fail(("%s: path must be a string, got %s"):format(who, type(path)))
  end
  return split_text(who, read_file(who, path), opts)
end

--- The vocabulary size of data.text: one token per byte value.
data.TEXT_VOCAB = 256

--- The English fortune-cookie corpus of the Debian package fortunes
-- (data.FORTUNES_FILES under data.FORTUNES_ROOT, concatenated, about 2.8 MB)
-- as byte-level tokens, split like data.text. opts: split = 0.9, root = the
-- directory. A missing directory or file is an error naming the package.
function data.fortunes(opts)
  local who = "data.fortunes"
  opts = util.check_options(opts, { "split", "root" }, who)
  local root = opts.root or data.FORTUNES_ROOT
  if type(root) ~= "string" then
    fail(("%s: root must be a directory path (a string), got %s"):format(who, type(root)))
  end
  local parts = {}
  for i, name in ipairs(data.FORTUNES_FILES) do
    parts[i] = read_file(who, root .. "/" .. name, ("install the Debian package %s "
      .. "(apt-get install %s)"):format(FORTUNES_PACKAGE, FORTUNES_PACKAGE))
  end
  return split_text(who, table.concat(parts), { split = opts.split })
end

--- data.corpus(path) → train, val, name: data.text(path) when path is a
-- non-empty string, else data.fortunes(); name is the path or "fortunes"
-- (the language-model tutorials' --text option).
function data.corpus(path)
  if path ~= nil and path ~= "" then
    local train, val = data.text(path)
    return train, val, path
  end
  local train, val = data.fortunes()
  return train, val, "fortunes"
end

--- A batch of language-model training windows from the 1-D token tensor
-- `tokens`: batch_size windows of block_size + 1 consecutive tokens, each at
-- a start drawn uniformly from the engine RNG (venom.manual_seed makes the
-- batches repeat). Returns x and y, i64 (batch_size, block_size): y is x
-- shifted by one token, the next-token targets.
function data.random_windows(tokens, batch_size, block_size)
  local who = "data.random_windows"
  if not venom.is_tensor(tokens) or tokens:dim() ~= 1 then
    fail(("%s: tokens must be a 1-D tensor, got %s"):format(who,
      venom.is_tensor(tokens) and ("a %d-d tensor"):format(tokens:dim()) or type(tokens)))
  end
  util.check_int(batch_size, "batch_size", { min = 1, who = who })
  util.check_int(block_size, "block_size", { min = 1, who = who })
  local n = tokens:size(1)
  if n < block_size + 1 then
    fail(("%s: %d tokens are fewer than a window of block_size + 1 = %d")
      :format(who, n, block_size + 1))
  end
  local u = venom.rand(batch_size)
  local draws = u:totable()
  u:free()
  local rows = {}
  for b = 1, batch_size do
    -- n − block_size starts are possible: 1 .. n − block_size.
    local start = math.min(math.floor(draws[b] * (n - block_size)), n - block_size - 1) + 1
    local w = tokens:narrow(1, start, block_size + 1)
    rows[b] = w:reshape(1, block_size + 1)
    w:free()
  end
  local win = venom.cat(rows, 1)
  for _, r in ipairs(rows) do r:free() end
  local xv, yv = win:narrow(2, 1, block_size), win:narrow(2, 2, block_size)
  local x, y = xv:contiguous(), yv:contiguous()
  xv:free(); yv:free(); win:free()
  return x, y
end

-- data.planetoid (citation graphs) lives in lua/venom/data_planetoid.lua.
data.planetoid = require("venom.data_planetoid").planetoid

-- data.ImageFolder, data.transforms and data.export_image_folder live in
-- lua/venom/data_image.lua, loaded on first use.
setmetatable(data, { __index = function(_, k) return require("venom.data_image")[k] end })

return data
