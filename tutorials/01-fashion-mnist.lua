-- Tutorial 1: training a multilayer perceptron on Fashion-MNIST.
--
-- Fashion-MNIST (Xiao, Rasul & Vollgraf 2017) has 60,000 training and 10,000
-- test images of clothing, 28×28 grey levels, in ten classes (T-shirt, trouser,
-- pullover, ...). It is a drop-in replacement for MNIST that is harder to
-- fit: a good multilayer perceptron reaches about 89% test accuracy.
--
-- Run it with
--
--     venom tutorials/01-fashion-mnist.lua                 # 5 epochs, defaults below
--     venom tutorials/01-fashion-mnist.lua --epochs 1 --hidden 256 --no-cosine
--     venom tutorials/01-fashion-mnist.lua --save run.safetensors    # later: --resume run.safetensors
--     venom tutorials/01-fashion-mnist.lua --log run.csv --plot run.png # training curves
--     venom tutorials/01-fashion-mnist.lua --sparse 64:2:8  # V:N:M sparse hidden layers
--     venom tutorials/01-fashion-mnist.lua --device cuda    # train on the GPU
--     venom tutorials/01-fashion-mnist.lua --device cuda --sparse 64:2:8  # Sparse Tensor Cores
--     mpirun -np 2 venom tutorials/01-fashion-mnist.lua --distributed  # 2 processes (section 7)
--     venom tutorials/01-fashion-mnist.lua --help
--
-- The data comes from the Debian package dataset-fashion-mnist, which puts the
-- four IDX files under /usr/share/datasets/fashion-mnist.
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local data = require "venom.data"
local util = require "venom.util"
local checkpoint = require "venom.checkpoint"
local plot = require "venom.plot"
local dist = require "venom.distributed"

-- 1. Options ------------------------------------------------------------------
--
-- util.parse_cli reads `--name value` pairs. The defaults also fix each
-- option's type, so `--epochs five` is an error rather than a surprise, and
-- the function at the end refuses values out of range before any data is
-- loaded. A bad command line prints "error: ..." on stderr and exits with
-- status 2. data.fashion_mnist_options gives the defaults, help texts and
-- checks of the options every script that trains this MLP takes (--epochs,
-- --batch-size, --lr, --hidden, --seed, --weight-decay, --cosine, --limit,
-- --root, --device); the table below adds this tutorial's own.
local defaults, help, check_shared = data.fashion_mnist_options({
  save = { "", "write a checkpoint (weights, optimizer, schedule, RNG) to FILE after every epoch" },
  resume = { "", "continue from a checkpoint written by --save, with the epoch after it" },
  export_dense = { "", "write the trained weights as plain dense tensors (safetensors) to FILE" },
  sparse = { "", "V:N:M, e.g. 64:2:8: make the hidden layers V:N:M sparse (see section 3 of this file)" },
  device = { "cpu", "cpu or cuda: where the model trains (see section 3 of this file)" },
  log = { "", "write the training curves to FILE.csv or FILE.jsonl (see section 6 of this file)" },
  plot = { "", "draw the training curves to FILE.png or FILE.svg after every epoch (gnuplot)" },
  distributed = { false, "data parallel over the processes mpirun starts; --batch-size stays the "
    .. "global batch (see section 7 of this file)" },
})
-- Files the run writes are checked here too, so that a typo in a directory
-- name stops the run at once instead of after the first epoch. The metrics
-- log (--log) is opened here: its columns are the keys of every record below.
local log
local opts = util.parse_cli(arg, defaults, help, function(o)
  check_shared(o)
  if o.sparse ~= "" then
    local V, N, M = o.sparse:match("^(%d+):(%d+):(%d+)$")
    if not (V and tonumber(V) >= 1 and tonumber(N) == 2 and tonumber(M) >= 4) then
      util.fail("--sparse must be V:2:M with V >= 1 and M >= 4, e.g. 64:2:8; got " .. o.sparse)
    end
    local why = require("venom.sparse").cuda_layout_error(tonumber(V), tonumber(M))
    if o.device == "cuda" and why then
      util.fail(("--sparse %s with --device cuda: %s, e.g. 64:2:8"):format(o.sparse, why))
    end
  end
  util.check_arg_file(o, "resume")
  dist.check_arg(o)
  if o.distributed and o.device == "cuda" then
    util.fail("--distributed trains on the CPU (this build has no NCCL)")
  end
  -- Only rank 0 writes files (and prints) in a distributed run.
  if dist.is_main() then
    log = util.check_outputs(o, { "step", "epoch", "loss", "lr", "train_loss", "test_accuracy" })
  end
end)
if not dist.is_main() then print = function() end end

-- Every random choice below (initial weights, the order of the batches) is
-- drawn from the engine's RNG, so a seed makes the whole run repeatable.
venom.manual_seed(opts.seed)

-- 2. Data ------------------------------------------------------------------------
--
-- data.fashion_mnist returns u8 images (N, 28, 28) and i64 labels (N). Labels
-- count from 1 like everything else in Lua: class 1 is "T-shirt/top".
--
-- The network wants f32 inputs of mean ≈ 0 and variance ≈ 1. The training
-- images have mean 0.2860 and standard deviation 0.3530 once scaled to
-- [0, 1], so data.flatten_images maps x ↦ (x/255 − 0.2860) / 0.3530 (one
-- multiply and one subtract, in place on one f32 copy) and makes each image
-- a row of 784 values.
--
-- A DataLoader cuts the tensors into batches along their first dimension.
-- With shuffle = true it draws a new permutation every epoch (from the seeded
-- RNG), and each batch is gathered with one index_select per tensor. The
-- loaders keep the images as u8 rows (60,000 × 784 bytes: 47 MB, where f32
-- would take 188 MB) and their transform normalizes each batch as it is
-- drawn, with the same two operations.
--
-- data.fashion_mnist_loaders does these three steps for both splits (the
-- next tutorial and bench/epoch.lua train on the same data). If the files
-- are missing, util.die says where we looked and which package provides
-- them, and exits with status 1 so that scripts and CI notice.
local ok, train_loader, test_loader = pcall(data.fashion_mnist_loaders, { root = opts.root,
  limit = opts.limit, batch_size = opts.batch_size, device = opts.device,
  distributed = opts.distributed })
if not ok then util.die(train_loader) end

-- 3. Model -------------------------------------------------------------------------
--
-- Two hidden layers of H = --hidden units with ReLU between them:
-- nn.mlp({784, H, H, 10}) is
-- nn.Sequential(nn.Linear(784, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(),
-- nn.Linear(H, 10)). nn.Linear(in, out) holds W (out, in) and b (out),
-- initialized from U(−1/√in, 1/√in) as in PyTorch, and computes x·Wᵀ + b.
-- The last layer outputs 10 logits, one per class; the softmax is folded
-- into the loss.
local model = nn.mlp({ 28 * 28, opts.hidden, opts.hidden, 10 })
local criterion = nn.CrossEntropyLoss()

-- --sparse V:N:M turns the two hidden layers into nn.SparseLinear (VENOM,
-- Castro et al. 2023): in every block of V rows × M columns of a weight
-- matrix, the rows keep the same 4 columns and each row keeps 2 of them, so
-- 64:2:8 keeps 25% of the weights. sparse.sparsify picks that pattern once,
-- by magnitude, from the freshly initialised weights; training then updates
-- only the kept values (the layer's parameter is the compressed array), and
-- the forward and backward products skip the pruned weights. The output
-- layer ("5", 10 rows) stays dense. To compare with the dense model, run
-- the same command without --sparse: the epoch lines have the same format
-- (bench/RESULTS.md has both runs side by side). With --device cuda the
-- sparse layers run on Sparse Tensor Cores (mma.sp) in bf16 with f32
-- accumulation, while the values the optimizer updates stay f32.
if opts.sparse ~= "" then
  local V, N, M = opts.sparse:match("^(%d+):(%d+):(%d+)$")
  local ok, err = pcall(require("venom.sparse").sparsify, model,
    { V = tonumber(V), N = tonumber(N), M = tonumber(M), skip = { "5" } })
  if not ok then util.die(err) end -- e.g. M wider than the layers: --sparse 64:2:2048
end

-- --device cuda moves the parameters to the GPU (model:to copies each one
-- there); the data loaders above hand out batches already copied to the
-- same device, so every op of a training step runs on the GPU. Create the
-- optimizer after this: it holds the parameters it updates.
model:to(opts.device)
if opts.distributed then dist.DataParallel(model) end

print(model)
print(("%d parameters; %d training images, %d test images")
  :format(model:num_parameters(), (train_loader.sampler or train_loader).n,
    (test_loader.sampler or test_loader).n))

-- 4. Optimizer --------------------------------------------------------------------
--
-- AdamW (Loshchilov & Hutter 2019) is Adam with the weight decay applied to
-- the weights directly instead of being added to the gradient. The learning
-- rate rises linearly from 0 over the first 5% of the steps (Adam's early
-- steps are noisy while its moment estimates settle), then follows half a
-- cosine down to 0 at the last step. Ending at a small learning rate is worth
-- about two points of test accuracy here over a constant one (--no-cosine),
-- whose test accuracy keeps jumping around 87-88% from epoch to epoch.
local opt = optim.AdamW(model:parameters(), { lr = opts.lr, weight_decay = opts.weight_decay })
local sched
if opts.cosine then
  local total = opts.epochs * #train_loader
  sched = optim.CosineWarmup(opt, { warmup_steps = math.floor(total / 20), total_steps = total })
end

-- Checkpoints. --save FILE writes the whole training state after every
-- epoch: the weights, AdamW's moments and step counts, the schedule's
-- position and the RNG state, as one safetensors file written atomically (a
-- crash mid-save leaves the previous checkpoint intact). --resume FILE
-- restores all of it and carries on with the next epoch; on the CPU the
-- resumed run computes the same losses, bit for bit, as one never stopped.
-- It needs the same options, except --epochs (a run may be extended), the
-- output files, the device and the seed (the RNG state is in the
-- checkpoint): the checkpoint records them and a resume that changes one
-- is an error.
local RUN_OPTIONS = { "batch_size", "cosine", "hidden", "limit", "lr", "sparse", "weight_decay" }
local parts = { model = model, optim = opt, sched = sched }
local first_epoch = 1
if opts.resume ~= "" then
  local ok, meta = pcall(checkpoint.load, opts.resume, parts)
  if not ok then util.die(meta) end
  local changed = checkpoint.check_options(meta, opts, opts.resume)
  if changed then util.die(changed) end
  first_epoch = tonumber(meta.epoch) + 1
  if first_epoch > opts.epochs then
    util.die(("%s is from the end of epoch %d; --epochs %d leaves nothing to train (raise "
      .. "--epochs)"):format(opts.resume, first_epoch - 1, opts.epochs))
  end
  print(("resumed from %s after epoch %d"):format(opts.resume, first_epoch - 1))
end

-- 5. Evaluation ---------------------------------------------------------------------
--
-- In eval mode (no dropout here, but it is a good habit) and without the tape
-- (venom.no_grad), predict the arg-max class and count matches: util.accuracy.
local function accuracy() return dist.mean(util.accuracy(model, test_loader), test_loader.n) end

-- 6. Training ------------------------------------------------------------------------
--
-- One step: forward, loss, clear the old gradients, backward (which
-- accumulates into each parameter's .grad), update, and the learning-rate
-- schedule. util.train_epoch runs these steps over the loader, behind a
-- progress bar. The tape frees what it saved once backward is done; the
-- batch, the logits and the loss are freed right away too, so the memory
-- goes back to the allocator's cache without waiting for Lua's garbage
-- collector. If the loss turns NaN or infinite, training has diverged
-- (every later step would be NaN too): the run stops there with an error.
--
-- Training curves. --log FILE writes one record per step (the batch's loss
-- and the learning rate it was trained with) and one per epoch (the mean
-- training loss and the test accuracy), flushed line by line, so a run that
-- is stopped keeps its log. util.train_epoch calls the criterion once per
-- step: the wrapper below keeps that step's loss for the record. --plot
-- FILE draws the records (venom.plot.curves, with gnuplot) after every
-- epoch: the loss per step above, the test accuracy per epoch below.
local curves, records = opts.log ~= "" or opts.plot ~= "", log and log.records or {}
local function record(r)
  if not dist.is_main() then return end
  if log then log:write(r) else records[#records + 1] = r end
end
local step, step_loss = (first_epoch - 1) * #train_loader, nil
local function logged_criterion(...) step_loss = criterion(...) return step_loss end
local panels = {
  { x = "step", y = { "loss" }, ylabel = "training loss" },
  { x = "epoch", y = { "test_accuracy" }, ylabel = "test accuracy (%)", style = "+-" },
}
-- 7. Several processes (--distributed) ---------------------------------------------
--
-- Started by `mpirun -np P`, every process runs this script on its own
-- share of the data: data.DistributedSampler gives rank r the samples at
-- positions r+1, r+1+P, ... of the epoch's permutation (the same on every
-- rank: the same seed), in batches of --batch-size / P, so the ranks' k-th
-- batches together are the k-th batch of a 1-process run.
-- dist.DataParallel(model) (section 3) broadcast rank 0's weights, and it
-- averages the gradients over the ranks during each backward (in buckets
-- whose all-reduce overlaps the rest of the backward), so every rank takes
-- the same optimizer step. The numbers printed are global: dist.mean
-- combines each rank's mean loss and accuracy, weighted by its samples. A
-- 2-process run prints what the 1-process run prints, up to float
-- rounding; rank 0 alone prints and writes the log, the plot and the
-- checkpoint (which resumes on as many processes as wrote it).
local epoch_times, final_acc = {}, nil
for epoch = first_epoch, opts.epochs do
  local loss, seen, train_time = util.train_epoch(model, train_loader, logged_criterion, opt, {
    desc = ("epoch %d/%d"):format(epoch, opts.epochs), epoch = epoch, lr = opts.lr,
    after_step = function()
      step = step + 1
      if curves then
        record({ step = step, epoch = epoch, lr = opt.lr,
                 loss = dist.mean(step_loss:item(), 1) })
      end
      if sched then sched:step() end
    end, progress = dist.is_main() })
  -- Global numbers in a distributed run (section 7).
  loss, seen = dist.mean(loss, seen), dist.all_reduce_number(seen)
  train_time = dist.all_reduce_number(train_time, "max")
  local acc = accuracy()
  epoch_times[#epoch_times + 1], final_acc = train_time, acc
  print(("epoch %d/%d  train loss %.4f  test accuracy %.2f%%  %.2f s/epoch (%.0f images/s)")
    :format(epoch, opts.epochs, loss, 100 * acc, train_time, seen / train_time))
  record({ step = step, epoch = epoch, train_loss = loss, test_accuracy = 100 * acc })
  if opts.plot ~= "" and dist.is_main() then
    local ok_plot, err = pcall(plot.curves, opts.plot, records, panels)
    if not ok_plot then util.die(err) end
  end
  if opts.save ~= "" then
    local meta = { epoch = epoch, options = checkpoint.options_meta(opts, RUN_OPTIONS) }
    checkpoint.save(opts.save, parts, meta)
  end
end

if log then log:close() end

-- With --sparse, what the sparse layers hold and the run's mean epoch time,
-- to put next to the dense run's.
if opts.sparse ~= "" and final_acc then
  local total = 0
  for _, t in ipairs(epoch_times) do total = total + t end
  for _, i in ipairs({ 1, 3 }) do
    local st = model[i]:stats()
    print(("layer %d: %d × %d, %d of %d weights kept (%.1f%%), %s compressed vs %s dense")
      :format(i, st.rows, st.cols, st.nnz, st.rows * st.cols, 100 * (1 - st.sparsity),
              util.format_bytes(st.bytes), util.format_bytes(st.dense_bytes)))
  end
  print(("sparse %s: test accuracy %.2f%%, %.2f s/epoch on average (the dense baseline: the "
    .. "same command without --sparse)"):format(opts.sparse, 100 * final_acc, total / #epoch_times))
end

-- --export-dense FILE writes only the weights, as plain dense tensors under
-- their dotted names ("1.weight", "1.bias", ...), for any safetensors reader.
if opts.export_dense ~= "" and dist.is_main() then
  venom.save(opts.export_dense, model:dense_state_dict())
end
