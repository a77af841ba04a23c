-- Tutorial 2: sparse training by gradual magnitude pruning.
--
-- Tutorial 1 trained a dense multilayer perceptron on Fashion-MNIST; its
-- `--sparse` option fixed a V:N:M pattern on the freshly initialised weights.
-- Here the same network starts dense and is pruned while it learns, the
-- recipe of Zhu & Gupta (2017, "To prune, or not to prune"):
--
--   1. dense warm-up (the first 20% of the steps): the weights find their
--      sizes, so magnitude becomes a meaningful measure of importance;
--   2. pruning (20% → 60%): at regular steps the smallest weights are
--      removed, following the cubic schedule
--      s_t = s_f + (s_i − s_f)·(1 − (t − t0)/(n·Δt))³, which prunes fast
--      while many weights are redundant and slowly near the end;
--   3. fine-tuning (the last 40%) at the final pattern, with the learning
--      rate restarted at its peak and decaying to zero again (learning-rate
--      rewinding, Renda et al. 2020; --rewind 0 lets the first decay go on).
--
-- Run it with
--
--     venom tutorials/02-sparse-fashion-mnist.lua                  # 64:2:8 (75%), 5 epochs
--     venom tutorials/02-sparse-fashion-mnist.lua --target 64:2:16 # 87.5%
--     venom tutorials/02-sparse-fashion-mnist.lua --mode nm --target 2:4
--     venom tutorials/02-sparse-fashion-mnist.lua --mode unstructured --sparsity 0.75
--     venom tutorials/02-sparse-fashion-mnist.lua --save run.st    # later: --resume run.st
--     venom tutorials/02-sparse-fashion-mnist.lua --log run.csv --plot run.png  # curves
--     venom tutorials/02-sparse-fashion-mnist.lua --device cuda    # on the GPU
--     venom tutorials/02-sparse-fashion-mnist.lua --help
--
-- The data comes from the Debian package dataset-fashion-mnist, as in
-- tutorial 1.
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local data = require "venom.data"
local util = require "venom.util"
local prune = require "venom.prune"
local checkpoint = require "venom.checkpoint"
local plot = require "venom.plot"

-- 1. Options ------------------------------------------------------------------
--
-- Tutorial 1's options, plus the pruning ones. The check function refuses
-- bad values before any data is loaded ("error: ..." and status 2).
local defaults, help, check_shared = data.fashion_mnist_options({
  mode = { "vnm", "vnm (V:2:M sparse layers), nm (N:M masks) or unstructured (magnitude masks)" },
  target = { "", "final pattern: V:2:M for vnm (default 64:2:8), N:M for nm (default 2:4)" },
  sparsity = { 0.75, "final sparsity for --mode unstructured" },
  prune_start = { 0.2, "fraction of the training steps after which pruning starts" },
  prune_end = { 0.6, "fraction of the training steps at which the final pattern is reached" },
  every = { 0, "optimizer steps between two pruning events (0: 20 events over the pruning "
    .. "span, or one every step if it is shorter)" },
  shadow = { true, "vnm: train a dense shadow with SR-STE while pruning (--no-shadow: compress "
    .. "at every stage)" },
  decay = { 1, "vnm shadow: SR-STE decay lambda of the weights outside the pattern" },
  progression = { "every", "vnm: M stages every (4, 5, 6, ...) or doubling (4, 8, 16)" },
  score = { "magnitude", "vnm: magnitude or fisher (w^2 times Adam's squared-gradient average)" },
  rewind = { 1, "after the last pruning event restart the cosine at this fraction of --lr "
    .. "(learning-rate rewinding; 0: the first cosine goes on)" },
  save = { "", "write a checkpoint (weights, optimizer, schedules, RNG) to FILE after every epoch" },
  resume = { "", "continue from a checkpoint written by --save (same options), with the next "
    .. "epoch" },
  stop_after = { 0, "stop after this epoch, saving first with --save (0: run all --epochs)" },
  device = { "cpu", "cpu or cuda: where the model trains (sparse layers on Sparse Tensor Cores)" },
  log = { "", "write the training curves (loss, lr, sparsity, accuracy) to FILE.csv / .jsonl" },
  plot = { "", "draw the training curves to FILE.png or FILE.svg after every epoch (gnuplot)" },
})
-- The files the run writes are checked with the options, as in tutorial 1.
local log
local rewind_given -- --rewind on the command line: refused below if it has nothing to restart
local opts = util.parse_cli(arg, defaults, help, function(o, given)
  rewind_given = given.rewind
  check_shared(o)
  util.check_arg_int(o, "every", 0)
  util.check_arg_int(o, "stop_after", 0)
  if o.mode ~= "vnm" and o.mode ~= "nm" and o.mode ~= "unstructured" then
    util.fail("--mode must be vnm, nm or unstructured, got " .. o.mode)
  end
  if o.mode == "unstructured" and o.target ~= "" then
    util.fail("--target is a pattern for --mode vnm or nm; use --sparsity with unstructured")
  end
  if not (o.sparsity >= 0 and o.sparsity < 1) then
    util.fail("--sparsity must be in [0, 1), got " .. tostring(o.sparsity))
  end
  -- The final layout is checked now, as prune.GMP will, before any data loads.
  if o.mode == "unstructured" then
    prune.check_target(o.mode, o.sparsity)
  else
    prune.check_target(o.mode, o.target ~= "" and o.target or (o.mode == "nm" and "2:4" or "64:2:8"))
  end
  util.check_arg_number(o, "decay", 0, true)
  util.check_arg_fraction(o, "rewind")
  if given.rewind and not o.cosine then
    util.fail("--rewind restarts the cosine schedule; it cannot be used with --no-cosine")
  end
  if o.mode ~= "vnm" and (not o.shadow or o.decay ~= 1 or o.progression ~= "every"
      or o.score ~= "magnitude") then
    util.fail("--no-shadow, --decay, --progression and --score are options of --mode vnm")
  end
  if o.progression ~= "every" and o.progression ~= "doubling" then
    util.fail("--progression must be every or doubling, got " .. o.progression)
  end
  if o.score ~= "magnitude" and o.score ~= "fisher" then
    util.fail("--score must be magnitude or fisher, got " .. o.score)
  end
  if o.stop_after > o.epochs then
    util.fail(("--stop-after %d is past --epochs %d"):format(o.stop_after, o.epochs))
  end
  util.check_arg_file(o, "resume")
  if o.device == "cuda" and o.mode == "vnm" then
    local V, M = (o.target ~= "" and o.target or "64:2:8"):match("^(%d+):%d+:(%d+)$")
    local why = V and require("venom.sparse").cuda_layout_error(tonumber(V), tonumber(M))
    if why then
      util.fail(("--target %s with --device cuda: %s, e.g. 64:2:8"):format(o.target, why))
    end
  end
  if not (o.prune_start >= 0 and o.prune_start < o.prune_end and o.prune_end <= 1) then
    util.fail(("--prune-start and --prune-end must satisfy 0 <= start < end <= 1, got %g and %g")
      :format(o.prune_start, o.prune_end))
  end
  log = util.check_outputs(o, { "step", "epoch", "loss", "lr", "sparsity", "train_loss",
                                "test_accuracy" })
end)
if opts.target == "" then
  opts.target = opts.mode == "nm" and "2:4" or "64:2:8"
end

venom.manual_seed(opts.seed)

-- 2. Data (as in tutorial 1) ---------------------------------------------------------
local ok, train_loader, test_loader = pcall(data.fashion_mnist_loaders, { root = opts.root,
  limit = opts.limit, batch_size = opts.batch_size, device = opts.device })
if not ok then util.die(train_loader) end

-- 3. Model and optimizer (as in tutorial 1) ------------------------------------------
local model = nn.mlp({ 28 * 28, opts.hidden, opts.hidden, 10 })
local criterion = nn.CrossEntropyLoss()
local dense_bytes = 4 * model:num_parameters()
-- --device cuda: the parameters go to the GPU before the optimizer is built;
-- GMP then picks patterns on the CPU and sends the new layers back.
model:to(opts.device)
print(model)

local total_steps = opts.epochs * #train_loader
local opt = optim.AdamW(model:parameters(), { lr = opts.lr, weight_decay = opts.weight_decay })

-- 4. The pruning schedule ------------------------------------------------------------
--
-- prune.GMP takes the model and the optimizer. In vnm mode each hidden layer
-- goes through V:2:M stages as the target grows (2:4 → 2:5 → … → 2:8). By
-- default it keeps its dense weights meanwhile (a "dense shadow"): each
-- event picks the stage's pattern from them, the forward computes through
-- that pattern, and the gradient trains every weight (the straight-through
-- estimator; SR-STE's decay pulls those outside the pattern towards 0), so
-- a weight dropped at one stage can win its place back at the next. At the
-- last event the layer becomes an nn.SparseLinear holding exactly 2 of
-- every 8 weights per row, and the optimizer gets the compressed parameter
-- with the Adam moments of the kept weights. --no-shadow compresses at every
-- stage instead. In nm and unstructured modes the weights stay dense and
-- masked. The output layer (the last Linear, 10 rows) stays dense in every
-- mode.
local t0 = math.floor(opts.prune_start * total_steps)
local span = math.floor(opts.prune_end * total_steps) - t0
local dt = opts.every > 0 and opts.every or math.max(1, math.floor(span / 20))
local gmp_opts = { optimizer = opt, mode = opts.mode, t0 = t0, n = math.floor(span / dt), dt = dt }
if opts.mode == "unstructured" then
  gmp_opts.s_f = opts.sparsity
elseif opts.mode == "vnm" then
  gmp_opts.pattern, gmp_opts.shadow, gmp_opts.decay = opts.target, opts.shadow, opts.decay
  gmp_opts.progression, gmp_opts.score = opts.progression, opts.score
else
  gmp_opts.pattern = opts.target
end
local ok_gmp, gmp = pcall(prune.GMP, model, gmp_opts)
if not ok_gmp then -- e.g. --target 64:2:2048, wider than the layers, or too short a run
  util.die(gmp, 2) -- 2: a usage error
end

-- The learning rate: a linear warm-up over the first 5% of the steps, then a
-- cosine decay to 0 (as in tutorial 1). With --rewind F (default 1) it
-- restarts at F·lr when the final pattern is in place and decays to 0
-- again by the end (learning-rate rewinding, Renda et al. 2020): the sparse
-- layers are fine-tuned with the large steps of a fresh schedule rather
-- than the small ones of the first cosine's tail, which gains 0.2–0.4
-- points here (and 0.2 for the dense model given the same restart:
-- bench/RESULTS.md, issue 17). A run whose last event falls on the last
-- step has nothing to restart (a --rewind given for it is refused).
local t_end = t0 + gmp.n * dt -- the last pruning event
local lr_sched, restart
if opts.cosine then
  local sched_opts, no_restart
  sched_opts, restart, no_restart = optim.rewind_options{ total_steps = total_steps,
    warmup_steps = math.floor(total_steps / 20), last_event = t_end, rewind = opts.rewind, lr = opts.lr }
  if rewind_given and no_restart then -- the step counts are known only now
    util.die("--rewind " .. no_restart .. "; lower --prune-end", 2)
  end
  lr_sched = optim.CosineWarmup(opt, sched_opts)
end
print(("pruning %s towards %s: steps %d to %d, every %d steps (%d steps in all)%s")
  :format(opts.mode, opts.mode == "unstructured" and ("%g%%"):format(100 * opts.sparsity)
          or opts.target, t0, t_end, dt, total_steps,
          restart and ("; the lr restarts at %g after step %d"):format(opts.rewind * opts.lr,
                                                                      restart) or ""))

-- Checkpoints, as in tutorial 1, with the pruning schedule as one more
-- part: --save FILE writes the whole state after every epoch (weights,
-- AdamW's moments, the lr schedule, the GMP schedule's position with each
-- hidden layer's layout or mask, the RNG state); --resume FILE first turns
-- the layers into the saved layouts, then loads the weights and moments
-- into them, and carries on with the next epoch: on the CPU the losses are
-- those of a run never stopped, bit for bit. Both schedules depend on
-- --epochs, so resume with the same options (--stop-after stops early
-- without changing them).
-- The options that make a different run (the checkpoint records them, and
-- a resume that changes one is refused by name).
local RUN_OPTIONS = { "batch_size", "cosine", "decay", "every", "hidden", "limit", "lr", "mode",
  "progression", "prune_end", "prune_start", "rewind", "score", "shadow", "sparsity", "target",
  "weight_decay" }
local parts = { model = model, optim = opt, sched = lr_sched, gmp = gmp }
local first_epoch, step = 1, 0
if opts.resume ~= "" then
  local ok_load, meta = pcall(checkpoint.load, opts.resume, parts)
  if ok_load and tonumber(meta.epochs) ~= opts.epochs then
    ok_load, meta = false, ("%s was written by a run of %s epochs, not --epochs %d; resume "
      .. "with the same options"):format(opts.resume, tostring(meta.epochs), opts.epochs)
  elseif ok_load and tonumber(meta.epoch) >= opts.epochs then
    ok_load, meta = false, ("%s is from the end of the run (epoch %s of %d); nothing left to "
      .. "train"):format(opts.resume, tostring(meta.epoch), opts.epochs)
  end
  if not ok_load then util.die(meta) end
  local changed = checkpoint.check_options(meta, opts, opts.resume)
  if changed then util.die(changed) end
  first_epoch, step = tonumber(meta.epoch) + 1, tonumber(meta.step)
  print(("resumed from %s after epoch %d"):format(opts.resume, first_epoch - 1))
end

-- 5. Evaluation (as in tutorial 1) ---------------------------------------------------
local function accuracy() return util.accuracy(model, test_loader) end

-- 6. Training ------------------------------------------------------------------------
--
-- The loop of tutorial 1 with one more call after each optimizer step:
-- gmp:step() re-zeroes what was pruned and, at the schedule's events,
-- prunes further and returns the event, which we print.
--
-- Training curves, as in tutorial 1, with the schedule's target sparsity
-- (gmp:sparsity(), in %) in every step's record and a third panel for it.
local curves, records = log or opts.plot ~= "", log and log.records or {}
local function record(r) if log then log:write(r) else records[#records + 1] = r end end
local step_loss -- the criterion's output, kept for the record after the step
local function logged_criterion(...) step_loss = criterion(...) return step_loss end
local panels = {
  { x = "step", y = { "loss" }, ylabel = "training loss" },
  { x = "epoch", y = { "test_accuracy" }, ylabel = "test accuracy (%)", style = "+-" },
  { x = "step", y = { "sparsity" }, ylabel = "target sparsity (%)" },
}
local phase_times = { dense = {}, pruning = {}, sparse = {} }
local final_acc
local last = opts.epochs
if opts.stop_after > 0 and opts.stop_after < last then last = opts.stop_after end
for epoch = first_epoch, last do
  local first = step + 1
  local function after_step(bar)
    local lr = opt.lr -- the rate this step was trained with
    if lr_sched then lr_sched:step() end
    -- A pruning event refuses non-finite weights (a diverged run): an
    -- error line, not a traceback.
    local ok_step, ev = pcall(gmp.step, gmp)
    if not ok_step then util.die(ev) end
    step = step + 1
    if curves then
      record({ step = step, epoch = epoch, loss = step_loss:item(), lr = lr,
               sparsity = 100 * gmp:sparsity() })
    end
    if ev then
      local names = {}
      for _, l in ipairs(ev.layers) do names[#names + 1] = l.name .. " " .. l.pattern end
      if bar.tty then io.write("\r\27[K") end -- clear the bar's line first
      print(("step %5d  target sparsity %6.2f%%  %s"):format(ev.step, 100 * ev.sparsity,
        table.concat(names, ", ")))
    end
  end
  local loss, _, train_time = util.train_epoch(model, train_loader, logged_criterion, opt, {
    desc = ("epoch %d/%d"):format(epoch, opts.epochs), epoch = epoch, lr = opts.lr,
    after_step = after_step })
  -- The phase of the epoch: dense before any pruning, sparse once the final
  -- pattern is in place, pruning in between.
  local phase = step <= t0 and "dense" or first > t0 + gmp.n * dt and "sparse" or "pruning"
  local times = phase_times[phase]
  times[#times + 1] = train_time
  final_acc = accuracy()
  print(("epoch %d/%d  %-7s  train loss %.4f  test accuracy %.2f%%  %.2f s/epoch")
    :format(epoch, opts.epochs, phase, loss, 100 * final_acc, train_time))
  record({ step = step, epoch = epoch, train_loss = loss, test_accuracy = 100 * final_acc })
  if opts.plot ~= "" then
    local ok_plot, err = pcall(plot.curves, opts.plot, records, panels)
    if not ok_plot then util.die(err) end
  end
  if opts.save ~= "" then
    checkpoint.save(opts.save, parts, { epoch = epoch, step = step, epochs = opts.epochs,
      options = checkpoint.options_meta(opts, RUN_OPTIONS) })
  end
end
if log then log:close() end
if last < opts.epochs then
  print(("stopped after epoch %d of %d%s"):format(last, opts.epochs,
    opts.save ~= "" and "; continue with --resume " .. opts.save or ""))
  return
end

-- 7. What the pruned model holds ------------------------------------------------------
print("\nlayer  pattern    weights alive            sparsity")
for _, r in ipairs(gmp:report()) do
  print(("%-6s %-10s %8d of %-9d      %6.2f%%"):format(r.name, r.pattern, r.nnz, r.size,
    100 * r.sparsity))
end

local function mean(list)
  if #list == 0 then return nil end
  local s = 0
  for _, v in ipairs(list) do s = s + v end
  return s / #list
end
for _, phase in ipairs({ "dense", "pruning", "sparse" }) do
  local m = mean(phase_times[phase])
  if m then
    print(("%-8s epochs: %d, %.2f s/epoch on average"):format(phase, #phase_times[phase], m))
  end
end

-- Storage: a SparseLinear stores its compressed values, 2-bit indices and
-- column locations (stats().bytes); masked layers still store every weight.
local stored = 0
for _, m in ipairs(model:children()) do
  if m.stats then
    stored = stored + m:stats().bytes + (m.bias and 4 * m.bias:numel() or 0)
  else
    stored = stored + 4 * m:num_parameters()
  end
end
print(("parameter bytes: %s dense, %s as stored now%s"):format(util.format_bytes(dense_bytes),
  util.format_bytes(stored), opts.mode == "vnm" and " (V:N:M compressed hidden layers)"
  or " (masked dense: the zeros are still stored)"))
print(("%s %s: test accuracy %.2f%%"):format(opts.mode, opts.mode == "unstructured"
  and ("%g%%"):format(100 * opts.sparsity) or opts.target, 100 * final_acc))
