-- Tutorial 8: a convolutional network on Fashion-MNIST, dense or V:N:M sparse.
--
-- Tutorial 1's multilayer perceptron sees an image as 784 unrelated numbers
-- and stops near 89-90% test accuracy. A convolutional network (LeCun et
-- al. 1998) slides small filters over the image instead, so a stroke or an
-- edge is recognised wherever it is; two stages of convolution are enough
-- to pass 92% on Fashion-MNIST.
--
-- Run it with
--
--     venom tutorials/08-cnn.lua                          # 10 epochs, defaults below
--     venom tutorials/08-cnn.lua --epochs 2 --width 16     # quicker, smaller
--     venom tutorials/08-cnn.lua --augment                 # random crops and flips
--     venom tutorials/08-cnn.lua --device cuda             # train on the GPU (section 3)
--     venom tutorials/08-cnn.lua --sparse 64:2:8           # V:N:M conv and linear layer (GMP)
--     venom tutorials/08-cnn.lua --sparse 64:2:8 --rewind 0   # the same without the lr restart
--     venom tutorials/08-cnn.lua --log run.csv --plot run.png   # training curves
--     venom tutorials/08-cnn.lua --export-images fm           # IDX files → fm/{train,test}/<class>/*.png
--     venom tutorials/08-cnn.lua --root-images fm --workers 4 # train from those PNG files
--     venom tutorials/08-cnn.lua --help
--
-- The data comes from the Debian package dataset-fashion-mnist (IDX files
-- under /usr/share/datasets/fashion-mnist), as in tutorial 1, or from a
-- folder of image files (--root-images, section 2b).
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local data = require "venom.data"
local util = require "venom.util"
local prune = require "venom.prune"
local plot = require "venom.plot"
-- models/ sits next to tutorials/: find it from this script's path.
local root = arg[0]:match("^(.*)/tutorials/[^/]*$") or "."
package.path = root .. "/?.lua;" .. package.path
local CNN = require "models.cnn"

-- 1. Options ------------------------------------------------------------------------
--
-- The options of tutorial 1 (--epochs, --batch-size, --lr, --seed,
-- --weight-decay, --cosine, --limit, --root; --hidden is the classifier's
-- hidden layer here), plus this tutorial's own.
local defaults, help, check_shared = data.fashion_mnist_options({
  epochs = { 10, "passes over the training set" },
  hidden = { 128, "width of the classifier's hidden layer" },
  width = { 32, "channels of the first convolution (the second has twice as many)" },
  augment = { false, "random crops (4 pixels of padding) and horizontal flips of the training images" },
  sparse = { "", "V:2:M, e.g. 64:2:8: prune the second conv and the first linear layer to V:N:M (GMP; needs --epochs 2 or more)" },
  prune_end = { 0.6, "with --sparse: fraction of the training steps at which the sparse layers are compressed for good" },
  prune_ramp = { "cubic", "with --sparse: cubic (the sparsity grows through 2:4, 2:5, ... to V:2:M) or none (V:2:M from the first event)" },
  rewind = { 1, "with --sparse: after the last pruning event restart the cosine at this fraction of --lr "
    .. "(learning-rate rewinding, as in tutorial 2; 0: the first cosine goes on)" },
  log = { "", "write the training curves to FILE.csv or FILE.jsonl" },
  plot = { "", "draw the training curves to FILE.png or FILE.svg after every epoch (gnuplot)" },
  export_images = { "", "write the IDX images as DIR/{train,test}/<class>/*.png (first --limit of each) and exit" },
  root_images = { "", "train and test on DIR/train and DIR/test (data.ImageFolder) instead of the IDX files" },
  workers = { 2, "with --root-images: threads decoding each batch's image files" },
})
local log, folders
local rewind_given -- --rewind on the command line: refused below if it has nothing to restart
local opts = util.parse_cli(arg, defaults, help, function(o, given)
  rewind_given = given.rewind
  check_shared(o)
  util.check_arg_int(o, "width", 1)
  if o.sparse ~= "" then
    local ok, err = pcall(prune.check_target, "vnm", o.sparse)
    if not ok then util.fail("--sparse: " .. util.error_text(err)) end
    local V, M = o.sparse:match("^(%d+):%d+:(%d+)$")
    local why = require("venom.sparse").cuda_layout_error(tonumber(V), tonumber(M))
    if o.device == "cuda" and why then
      util.fail(("--sparse %s with --device cuda: %s, e.g. 64:2:8"):format(o.sparse, why))
    end
    -- GMP trains the first epoch dense and prunes in the later ones (section 4).
    if o.epochs < 2 then
      util.fail(("--sparse needs --epochs 2 or more (the first epoch trains dense, pruning runs "
        .. "in the later ones), got --epochs %d"):format(o.epochs))
    end
    if not (o.prune_end > 1 / o.epochs and o.prune_end <= 1) then
      util.fail(("--prune-end must be after the first epoch (> 1/%d) and at most 1, got %g")
        :format(o.epochs, o.prune_end))
    end
    if o.prune_ramp ~= "cubic" and o.prune_ramp ~= "none" then
      util.fail("--prune-ramp must be cubic or none, got " .. o.prune_ramp)
    end
  end
  util.check_arg_fraction(o, "rewind")
  if given.rewind and (o.sparse == "" or not o.cosine) then
    util.fail("--rewind restarts the cosine schedule after the last pruning event; it needs "
      .. "--sparse and cannot be used with --no-cosine")
  end
  util.check_arg_int(o, "workers", 0)
  if o.export_images ~= "" and o.root_images ~= "" then
    util.fail("--export-images writes a folder and exits: give --root-images DIR in a second run")
  end
  if o.export_images ~= "" then
    local f = io.open(o.export_images, "rb") -- a directory opens, then fails to read
    if f then
      local _, dir_err = f:read(0)
      f:close()
      if not dir_err then util.fail(("--export-images: %s is a file, not a directory"):format(o.export_images)) end
    end
  end
  if o.root_images ~= "" then
    if o.limit ~= 0 then
      util.fail("--limit applies to the IDX files; for fewer images with --root-images, export "
        .. "fewer (--export-images DIR --limit N)")
    end
    folders = {} -- listing the folders here finds a missing or empty one at the start
    for _, split in ipairs({ "train", "test" }) do
      local ok, ds = pcall(data.ImageFolder, o.root_images .. "/" .. split, { channels = 1 })
      if not ok then util.fail("--root-images: " .. util.error_text(ds)) end
      folders[split] = ds
    end
    if table.concat(folders.train.classes, "/") ~= table.concat(folders.test.classes, "/") then
      util.fail(("--root-images: %s/train and %s/test have different class folders")
        :format(o.root_images, o.root_images))
    end
  end
  log = util.check_outputs(o, { "step", "epoch", "loss", "lr", "train_loss", "test_accuracy" })
end)
venom.manual_seed(opts.seed)

-- 2. Data ----------------------------------------------------------------------------
--
-- The images are normalised as in tutorial 1 (data.flatten_images: one f32
-- row of 784 values per image, mean 0 and variance 1 over the training set)
-- and then seen as (N, 1, 28, 28): one channel of 28 × 28 pixels, the NCHW
-- layout every convolution here takes. The reshape is a view: no copy.
local mean, std = data.FASHION_MNIST_MEAN, data.FASHION_MNIST_STD

-- --export-images DIR: the IDX images as PNG files (lossless: the same
-- bytes) in the ImageFolder layout DIR/<split>/<class>/<k>.png, then exit.
-- The folder names start with the label, 01-t-shirt-top ... 10-ankle-boot,
-- so that their sorted order (ImageFolder's labels) is the IDX label order.
-- --limit N exports the first N images of each split.
if opts.export_images ~= "" then
  local classes = {}
  for c, name in ipairs(data.FASHION_MNIST_CLASSES) do
    classes[c] = ("%02d-%s"):format(c, name:lower():gsub("[^%w]+", "-"))
  end
  for _, split in ipairs({ "train", "test" }) do
    local ok, err = pcall(function()
      local set = data.fashion_mnist(split, { root = opts.root })
      local n = opts.limit > 0 and math.min(opts.limit, set.images:size(1)) or set.images:size(1)
      local written = data.export_image_folder(set.images:narrow(1, 1, n), set.labels:narrow(1, 1, n),
        opts.export_images .. "/" .. split, { classes = classes })
      print(("%d %s images written to %s/%s"):format(written, split, opts.export_images, split))
      set.images:free()
    end)
    if not ok then util.die(err) end
  end
  return -- the script ends here (os.exit would skip closing the Lua state)
end

local function images(split, limit)
  local ok, set = pcall(data.fashion_mnist, split, { root = opts.root })
  if not ok then util.die(set) end
  local x, n = data.flatten_images(set.images, mean, std, limit)
  set.images:free()
  return x:reshape(n, 1, 28, 28), set.labels:narrow(1, 1, n)
end
-- --augment: every training batch is shifted and mirrored at random, so the
-- network never sees the same image twice. Each image is padded by 4 pixels
-- of background (black: (0 − mean)/std after normalisation), a 28 × 28
-- window is cut at a random offset (0..8 each way), and half the images are
-- flipped left to right (index_select with the columns reversed). The random
-- numbers come from the engine's RNG, so a seed repeats the run.
local PAD = 4
local reversed = venom.arange(28, 0, -1):long() -- 1-based columns 28, 27, ..., 1
local function augment(x, y)
  local B = x:size(1)
  local padded = venom.full({ B, 1, 28 + 2 * PAD, 28 + 2 * PAD }, -mean / std)
  padded:narrow(3, PAD + 1, 28):narrow(4, PAD + 1, 28):copy_(x)
  local dy = venom.randint(0, 2 * PAD + 1, B):totable()
  local dx = venom.randint(0, 2 * PAD + 1, B):totable()
  local flip = venom.randint(0, 2, B):totable()
  local out = venom.empty(B, 1, 28, 28)
  for i = 1, B do
    local crop = padded:select(1, i):narrow(2, dy[i] + 1, 28):narrow(3, dx[i] + 1, 28)
    if flip[i] == 1 then crop = crop:index_select(3, reversed) end
    out:select(1, i):copy_(crop)
  end
  padded:free(); x:free()
  return out, y
end

local train_loader, test_loader
if not folders then
  local x_train, y_train = images("train", opts.limit)
  local x_test, y_test = images("test")
  -- --augment works on the host (one batch at a time) and then moves the
  -- batch to --device; without it the loader moves each batch itself.
  local function augment_to_device(x, y)
    x, y = augment(x, y)
    return x:to(opts.device), y:to(opts.device)
  end
  train_loader = data.DataLoader({ x_train, y_train }, { batch_size = opts.batch_size,
    shuffle = true, transform = opts.augment and augment_to_device or nil,
    device = opts.augment and "cpu" or opts.device })
  test_loader = data.DataLoader({ x_test, y_test }, { batch_size = 1000, device = opts.device })
else
  -- 2b. --root-images DIR: the same images as files ------------------------------------
  --
  -- data.ImageFolder lists DIR/train/<class>/*.png (classes sorted by name,
  -- labelled 1, 2, ...); the DataLoader decodes each batch's files on
  -- --workers threads. The transforms give the tensors of the IDX path:
  -- ToTensor (u8 (28, 28, 1) → f32 (1, 28, 28) in [0, 1]) and Normalize
  -- with the same mean and std; with --augment, RandomCrop pads 4 pixels of
  -- black (0, before Normalize) and cuts a 28 × 28 window, and
  -- RandomHorizontalFlip mirrors half the images: augment() above, on the
  -- u8 images.
  local T = data.transforms
  local normalise = { T.ToTensor(), T.Normalize({ mean }, { std }) }
  local train_tf = opts.augment and { T.RandomCrop(28, { padding = PAD }), T.RandomHorizontalFlip(),
    normalise[1], normalise[2] } or normalise
  local function folder(split, tf)
    local ok, ds = pcall(data.ImageFolder, opts.root_images .. "/" .. split,
      { channels = 1, transform = tf })
    if not ok then util.die(ds) end
    return ds
  end
  train_loader = data.DataLoader(folder("train", train_tf), { batch_size = opts.batch_size,
    shuffle = true, workers = opts.workers, device = opts.device })
  test_loader = data.DataLoader(folder("test", normalise), { batch_size = 1000,
    workers = opts.workers, device = opts.device })
end

-- 3. Model ------------------------------------------------------------------------------
--
-- models/cnn.lua: two stages of Conv2d (3 × 3, padding 1: the size stays),
-- BatchNorm2d, ReLU and MaxPool2d(2) (28 → 14 → 7), then Flatten and two
-- linear layers. nn.Conv2d computes each output pixel as a dot product of a
-- 3 × 3 × C_in window with each filter: venom unfolds the windows into
-- columns (im2col) and multiplies them by the filters with one OpenBLAS
-- GEMM (on CUDA: the same im2col as a kernel and a cuBLAS GEMM; --device
-- cuda moves the parameters and the running statistics there with
-- model:to, and the loaders move each batch). Batch normalisation (Ioffe & Szegedy 2015) rescales each channel by
-- the batch's mean and variance while training and keeps running averages
-- of them for evaluation (model:eval()); those averages are saved with the
-- weights in model:state_dict().
local model = CNN({ width = opts.width, hidden = opts.hidden })
model:to(opts.device)
local criterion = nn.CrossEntropyLoss()
print(model)
print(("%d parameters; %d training images, %d test images%s%s"):format(model:num_parameters(),
  train_loader.n, test_loader.n, opts.augment and " (augmented)" or "",
  folders and " from " .. opts.root_images or ""))

-- 4. Optimizer, schedule and (with --sparse) pruning ------------------------------------
--
-- AdamW with a warm-up and cosine decay of the learning rate, as in tutorial 1.
-- --sparse V:2:M prunes the second convolution and the first linear layer
-- gradually (GMP, Zhu & Gupta 2017, as in tutorial 2): dense for the first
-- epoch, then up to the V:N:M layout by 60% of the steps (--prune-end), then
-- fine-tuning. During that window the layers keep their dense weights (the
-- shadow): at each of 20 events the pattern is chosen afresh from them, the
-- forward uses the kept weights and all of them train (prune.GMP's
-- defaults). The cubic ramp passes through 2:4, 2:5, ..., 2:M, and each new
-- M regroups the columns; --prune-ramp none goes to V:2:M at the first event
-- and spends the window re-choosing that pattern, as SR-STE (Zhou et al.
-- 2021) trains at its final N:M pattern from the start. At 10 epochs both
-- end about 0.5 points below dense (bench/RESULTS.md), so cubic stays; the
-- learning-rate rewinding below (--rewind 1, the default) brings the gap to
-- about 0.4.
-- A convolution is pruned as its im2col matrix: the weight (C_out, C_in, 3,
-- 3) seen as (C_out, C_in·9), so each block of V filters keeps the same 4 of
-- every M inputs (window positions × channels) and each filter 2 of those.
-- GMP then swaps in nn.SparseConv2d, which multiplies the unfolded windows
-- by the compressed weights with the V:N:M SpMM.
local opt = optim.AdamW(model:parameters(), { lr = opts.lr, weight_decay = opts.weight_decay })
local total = opts.epochs * #train_loader
local gmp, t_end
if opts.sparse ~= "" then
  local t0 = #train_loader
  local span = math.max(1, math.floor(opts.prune_end * total) - t0)
  local dt = math.max(1, math.floor(span / 20))
  local s_f = 1 - 2 / tonumber(opts.sparse:match("(%d+)$"))
  local ok, g = pcall(prune.GMP, model, { optimizer = opt, pattern = opts.sparse,
    s_i = opts.prune_ramp == "none" and s_f or 0,
    layers = CNN.sparse_layers, t0 = t0, n = math.max(1, math.floor(span / dt)), dt = dt })
  if not ok then util.die(g) end
  gmp, t_end = g, t0 + g.n * dt -- t_end: the step of the last pruning event
end
-- --rewind F (with --sparse, default 1): learning-rate rewinding (Renda et
-- al. 2020), as in tutorial 2. After the last pruning event the cosine
-- restarts at F·lr and decays to 0 again by the end, so the compressed
-- layers are fine-tuned with a fresh schedule's large steps instead of the
-- small ones of the first cosine's tail: at 10 epochs the 2:8 network ends
-- 0.35–0.42 points below dense instead of 0.51–0.59 (bench/RESULTS.md,
-- two seeds; --rewind 0 lets the first cosine go on). A run whose last
-- event is its last step (--prune-end 1) has nothing to restart (a --rewind
-- given for it is refused).
local sched, restart
if opts.cosine then
  local sched_opts, no_restart
  sched_opts, restart, no_restart = optim.rewind_options{ total_steps = total,
    warmup_steps = math.floor(total / 20), last_event = t_end or total, rewind = gmp and opts.rewind or 0,
    lr = opts.lr }
  if rewind_given and no_restart then -- the step counts are known only now
    util.die("--rewind " .. no_restart .. "; lower --prune-end", 2)
  end
  sched = optim.CosineWarmup(opt, sched_opts)
end
if restart then
  print(("the lr restarts at %g after step %d (the last pruning event)"):format(opts.rewind * opts.lr, restart))
end

-- 5. Training ------------------------------------------------------------------------------
--
-- util.train_epoch runs forward, loss, backward, AdamW step over the loader;
-- after each step the schedule moves on and GMP prunes at its events.
-- util.accuracy evaluates in eval mode (batch norm with the running
-- statistics, no dropout) without the tape.
local records = log and log.records or {}
local function record(r) if log then log:write(r) else records[#records + 1] = r end end
local step, step_loss = 0, nil
local function logged_criterion(...) step_loss = criterion(...) return step_loss end
local panels = {
  { x = "step", y = { "loss" }, ylabel = "training loss" },
  { x = "epoch", y = { "test_accuracy" }, ylabel = "test accuracy (%)", style = "+-" },
}
local final_acc, times = 0, {}
for epoch = 1, opts.epochs do
  -- A file of --root-images that fails to decode fails the batch that reads
  -- it: util.die reports it in one line (exit status 1), no traceback.
  local ok, loss, seen, train_time = pcall(util.train_epoch, model, train_loader, logged_criterion, opt, {
    desc = ("epoch %d/%d"):format(epoch, opts.epochs), epoch = epoch, lr = opts.lr,
    after_step = function()
      step = step + 1
      record({ step = step, epoch = epoch, loss = step_loss:item(), lr = opt.lr })
      if sched then sched:step() end
      if gmp then gmp:step() end
    end })
  if not ok then util.die(loss) end
  local ok_acc, acc = pcall(util.accuracy, model, test_loader)
  if not ok_acc then util.die(acc) end
  final_acc = acc
  times[#times + 1] = train_time
  print(("epoch %d/%d  train loss %.4f  test accuracy %.2f%%  %.2f s/epoch (%.0f images/s)%s")
    :format(epoch, opts.epochs, loss, 100 * final_acc, train_time, seen / train_time,
      gmp and ("  sparsity %.1f%%"):format(100 * gmp:sparsity()) or ""))
  record({ step = step, epoch = epoch, train_loss = loss, test_accuracy = 100 * final_acc })
  if opts.plot ~= "" then
    local ok_plot, err = pcall(plot.curves, opts.plot, records, panels)
    if not ok_plot then util.die(err) end
  end
end
if log then log:close() end

-- With --sparse: what the pruned layers hold.
if gmp then
  for _, r in ipairs(gmp:report()) do
    print(("layer %-3s %-8s %d of %d weights kept (%.1f%% sparse)"):format(r.name, r.pattern,
      r.nnz, r.size, 100 * r.sparsity))
  end
end
table.sort(times)
print(("final test accuracy %.2f%%%s, median %.2f s/epoch"):format(100 * final_acc,
  gmp and (" (sparse %s)"):format(opts.sparse) or " (dense)", times[math.ceil(#times / 2)]))
