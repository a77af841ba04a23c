-- Tutorial 3: a tiny GPT, trained on fortune cookies, with sparse MLPs.
--
-- A character-level (here: byte-level) language model learns to continue
-- text one byte at a time. The model is a small GPT-2-style decoder
-- (models/gpt.lua): token and position embeddings, a stack of pre-LayerNorm
-- transformer blocks (causal self-attention, then a GELU MLP), and an output
-- layer that reuses the token embedding. Training minimises the
-- cross-entropy of every next byte in random windows of the corpus.
--
-- With `--sparse 64:2:8` the MLP projections (two thirds of each block's
-- weights) are pruned during training by gradual magnitude pruning, as in
-- tutorial 2: dense warm-up, cubic schedule 2:4 → 2:5 → … → 2:8 (75%
-- sparse), then fine-tuning at the final V:N:M pattern with the learning
-- rate restarted (`--rewind 1`, the default with --sparse). `--sparse-attn`
-- prunes the attention's projections too (the fused qkv projection as one
-- V:N:M matrix of 3·n_embd rows, and the output projection), by the same
-- schedule, as VENOM's papers sparsify every linear layer of a block; the
-- embeddings and the tied output layer stay dense.
--
-- Run it with
--
--     venom tutorials/03-tiny-gpt.lua                     # dense, default steps
--     venom tutorials/03-tiny-gpt.lua --sparse 64:2:8     # MLPs pruned to 75%
--     venom tutorials/03-tiny-gpt.lua --sparse 64:2:8 --sparse-attn  # every block linear
--     venom tutorials/03-tiny-gpt.lua --activation relu2  # squared-ReLU MLPs, run sparse
--     venom tutorials/03-tiny-gpt.lua --steps 2000 --n-embd 256 --block-size 128
--     venom tutorials/03-tiny-gpt.lua --text some-file.txt
--     venom tutorials/03-tiny-gpt.lua --save run.st       # later: --resume run.st
--     venom tutorials/03-tiny-gpt.lua --log run.csv --plot run.png  # training curves
--     mpirun -np 2 venom tutorials/03-tiny-gpt.lua --distributed  # 2 processes (section 6)
--     venom tutorials/03-tiny-gpt.lua --device cuda --amp bf16   # on the GPU, bf16 matmuls
--     venom tutorials/03-tiny-gpt.lua --device cuda --amp f16    # f16 with loss scaling
--     venom tutorials/03-tiny-gpt.lua --help
--
-- With `--activation relu2` (or relu) the MLPs use squared ReLU (Primer,
-- So et al. 2021) instead of GELU: most hidden activations are exactly 0,
-- and the MLP skips them (venom.act_sparse_mlp, SparDA / PIT's sparse–dense
-- transformation); each evaluation prints the measured activation density
-- per block (model:activation_stats()).
--
-- With `--device cuda` every op of a step runs on the GPU: attention as
-- FlashAttention-2 on bf16 tensor cores, the MLP's bias add fused into its
-- GELU, and with --sparse the V:N:M layers on Sparse Tensor Cores. `--amp
-- bf16` runs the forward under venom.autocast("bf16"): matmuls take bf16
-- operands with f32 accumulation, while weights, activations, gradients
-- and the optimizer stay f32 (no loss scaling is needed for bf16). `--amp
-- f16` does the same in f16, whose narrow range lets small gradients
-- underflow: the loss is scaled by venom.amp.GradScaler (steps with inf/NaN
-- gradients are skipped and the scale halves; the scale is not part of a
-- --save checkpoint and starts afresh on --resume). On the CPU matmuls stay
-- f32 whatever --amp says (the tutorial prints a note saying so).
--
-- The default corpus is the Debian package fortunes (apt-get install fortunes).
local venom = require "venom"
local optim = require "venom.optim"
local data = require "venom.data"
local util = require "venom.util"
local prune = require "venom.prune"
local dist = require "venom.distributed"
local checkpoint = require "venom.checkpoint"
local plot = require "venom.plot"
-- models/ sits next to tutorials/: find it from this script's path, so
-- that the tutorial runs from any directory.
local root = arg[0]:match("^(.*)/tutorials/[^/]*$") or "."
package.path = root .. "/?.lua;" .. package.path
local GPT = require "models.gpt"

-- The steps of the schedules, from the options: the first pruning event,
-- their count and spacing (20 events, or one per step, from --prune-start to
-- --prune-end; section 4) and the warm-up of the cosine (section 4 too).
-- The option check below uses them to refuse a --rewind with nothing to
-- restart.
local function schedule_steps(o)
  local t0 = math.floor(o.prune_start * o.steps)
  local span = math.floor(o.prune_end * o.steps) - t0
  local dt = math.max(1, math.floor(span / 20))
  local n = math.max(1, math.floor(span / dt))
  return t0, n, dt, o.warmup > 0 and o.warmup or math.floor(o.steps / 20)
end

-- 1. Options ------------------------------------------------------------------
--
-- The defaults are sized so that a run takes a few minutes on two CPU cores;
-- the issue's reference model is --n-layer 4 --n-head 4 --n-embd 256
-- --block-size 128. The files the run writes (--save, --log, --plot) are
-- checked with the options, as in tutorial 1.
local log
local rewind_given -- --rewind on the command line: a dense run restarts only then
local opts = util.parse_cli(arg, {
  steps = 600,
  batch_size = 32,
  block_size = 64,
  n_layer = 4,
  n_head = 4,
  n_embd = 128,
  dropout = 0,
  lr = 2e-3,
  weight_decay = 0.01,
  warmup = 0,
  seed = 0,
  text = "",
  eval_every = 200,
  eval_batches = 8,
  sparse = "",
  sparse_attn = false,
  activation = "gelu",
  prune_start = 0.2,
  prune_end = 0.6,
  rewind = 1,
  sample = 300,
  prompt = "The ",
  temperature = 0.8,
  top_k = 0,
  save = "",
  resume = "",
  stop_after = 0,
  log = "",
  plot = "",
  distributed = false,
  device = "cpu",
  amp = "",
}, {
  steps = "optimizer steps",
  batch_size = "windows per step",
  block_size = "context length in bytes",
  n_layer = "transformer blocks",
  n_head = "attention heads per block",
  n_embd = "width of the residual stream",
  dropout = "dropout probability",
  lr = "AdamW learning rate (the peak of the schedule)",
  weight_decay = "AdamW decoupled weight decay",
  warmup = "warm-up steps of the cosine schedule (0: 5% of --steps)",
  seed = "seed of the engine RNG (weights, batches, sampling)",
  text = "train on this text file instead of the fortunes corpus",
  eval_every = "steps between two train/val loss evaluations",
  eval_batches = "batches averaged per loss evaluation",
  sparse = "V:2:M pattern the MLP weights are pruned to during training (e.g. 64:2:8)",
  sparse_attn = "with --sparse: prune the attention's qkv and output projections to it too",
  activation = "the MLPs' activation: gelu, relu or relu2 (the last two run activation-sparse)",
  prune_start = "fraction of the steps after which pruning starts",
  prune_end = "fraction of the steps at which the final pattern is reached",
  rewind = "with --sparse: restart the cosine at this fraction of --lr after the last pruning event "
    .. "(learning-rate rewinding, as tutorial 2; 0: off); without --sparse 0 unless given, and "
    .. "given, at the step where that event would be: the dense control",
  sample = "bytes of text generated at the end",
  prompt = "start of the generated text",
  temperature = "sampling temperature",
  top_k = "sample among the k most likely bytes only (0: all)",
  save = "write a checkpoint (weights, optimizer, schedules, RNG) to FILE every --eval-every steps",
  resume = "continue from a checkpoint written by --save (same options), after its step",
  stop_after = "stop after this step, saving first with --save (0: run all --steps)",
  log = "write the training curves (loss, lr, evaluations) to FILE.csv or FILE.jsonl",
  distributed = "data parallel over the processes mpirun starts; --batch-size stays the global "
    .. "batch (see section 6 of this file)",
  plot = "draw the training curves to FILE.png or FILE.svg after every evaluation (gnuplot)",
  device = "cpu or cuda: where the model trains",
  amp = "bf16 or f16: run the forward under venom.autocast (matmul operands in 16 bits; f16 with loss scaling)",
}, function(o, given)
  rewind_given = given.rewind
  for _, k in ipairs({ "steps", "batch_size", "block_size", "n_layer", "n_head", "n_embd",
                       "eval_every", "eval_batches" }) do
    util.check_arg_int(o, k, 1)
  end
  for _, k in ipairs({ "warmup", "seed", "sample", "top_k", "stop_after" }) do util.check_arg_int(o, k, 0) end
  -- Attention keeps a block × block matrix per head and batch row: past a
  -- few thousand bytes of context that alone outgrows any memory here.
  if o.block_size > 4096 then
    util.fail(("--block-size must be at most 4096 (attention holds block² scores per head), got %d")
      :format(o.block_size))
  end
  if o.stop_after > o.steps then
    util.fail(("--stop-after %d is past --steps %d"):format(o.stop_after, o.steps))
  end
  util.check_arg_file(o, "resume")
  util.check_arg_number(o, "lr", 0)
  util.check_arg_number(o, "temperature", 0)
  util.check_arg_number(o, "weight_decay", 0, true)
  util.check_arg_fraction(o, "rewind")
  if o.sparse_attn and o.sparse == "" then
    util.fail("--sparse-attn prunes the attention projections to the --sparse pattern; give --sparse too")
  end
  if not (o.dropout >= 0 and o.dropout < 1) then
    util.fail("--dropout must be in [0, 1), got " .. tostring(o.dropout))
  end
  if o.n_embd % o.n_head ~= 0 then
    util.fail(("--n-embd (%d) must be a multiple of --n-head (%d)"):format(o.n_embd, o.n_head))
  end
  if o.sparse ~= "" and not o.sparse:match("^%d+:2:%d+$") then
    util.fail("--sparse must be a V:2:M pattern such as 64:2:8, got " .. o.sparse)
  end
  if o.sparse ~= "" then -- V >= 1 and M >= 4, checked now rather than when pruning starts
    local ok, err = pcall(prune.check_target, "vnm", o.sparse)
    if not ok then util.fail("--sparse: " .. util.error_text(err)) end
  end
  if not (o.prune_start >= 0 and o.prune_start < o.prune_end and o.prune_end <= 1) then
    util.fail(("--prune-start and --prune-end must satisfy 0 <= start < end <= 1, got %g and %g")
      :format(o.prune_start, o.prune_end))
  end
  if given.rewind and o.rewind > 0 then -- a restart past the last step would quietly not happen
    local t0, n, dt, warmup = schedule_steps(o)
    local why = o.steps <= warmup and ("restarts the cosine, which --steps %d inside the warm-up "
      .. "(%d steps) never reaches"):format(o.steps, warmup)
      or select(3, optim.rewind_options{ total_steps = o.steps, warmup_steps = warmup,
        last_event = t0 + n * dt, rewind = o.rewind, lr = o.lr })
    if why then util.fail("--rewind " .. why .. "; lower --prune-end or --warmup") end
  end
  if #o.prompt == 0 then util.fail("--prompt must not be empty") end
  if o.activation ~= "gelu" and o.activation ~= "relu" and o.activation ~= "relu2" then
    util.fail("--activation must be gelu, relu or relu2, got " .. o.activation)
  end
  util.check_arg_device(o, "device")
  if o.amp ~= "" and o.amp ~= "bf16" and o.amp ~= "f16" then
    util.fail("--amp must be bf16 or f16, got " .. o.amp)
  end
  if o.sparse ~= "" and o.device == "cuda" then
    local V, M = o.sparse:match("^(%d+):2:(%d+)$")
    local why = require("venom.sparse").cuda_layout_error(tonumber(V), tonumber(M))
    if why then util.fail(("--sparse %s with --device cuda: %s, e.g. 64:2:8"):format(o.sparse, why)) end
  end
  dist.check_arg(o)
  if o.distributed and o.device == "cuda" then
    util.fail("--distributed trains on the CPU (this build has no NCCL)")
  end
  -- Only rank 0 writes files (and prints) in a distributed run.
  if dist.is_main() then
    log = util.check_outputs(o, { "step", "loss", "lr", "sparsity", "train_loss", "val_loss" })
  end
end)
-- The default --rewind is for pruned runs: a dense one keeps its one cosine
-- unless --rewind is given (recorded so, a resume sees the rewind it ran).
if opts.sparse == "" and not rewind_given then opts.rewind = 0 end
if not dist.is_main() then print = function() end end
-- Say so rather than let --amp look like it did something on the CPU.
if opts.amp ~= "" and opts.device ~= "cuda" then
  print(("note: --amp %s changes only the GPU's matmuls; on the CPU they stay f32"):format(opts.amp))
end

venom.manual_seed(opts.seed)

-- A failure from here on prints "error: <message>" and exits with status 1.
local die = util.die

-- 2. Data ---------------------------------------------------------------------------
--
-- Every byte is a token (1..256: byte + 1); the first 90% of the text
-- trains, the rest validates. A batch is batch_size random windows of
-- block_size + 1 bytes: the inputs, and the same bytes shifted by one as
-- the targets.
local ok, train, val, corpus = pcall(data.corpus, opts.text)
if not ok then die(train) end
print(("corpus: %s, %d bytes for training, %d for validation"):format(corpus, train:size(1),
  val:size(1)))

-- 3. Model and optimizer --------------------------------------------------------------
local ok_model, model = pcall(GPT, {
  vocab_size = data.TEXT_VOCAB, block_size = opts.block_size, n_layer = opts.n_layer,
  n_head = opts.n_head, n_embd = opts.n_embd, dropout = opts.dropout,
  activation = opts.activation,
})
if not ok_model then die(model) end
model:to(opts.device) -- with cuda: every parameter (and the position ids) on the GPU
print(model)
print(("%d parameters"):format(model:num_parameters()))

local opt = optim.AdamW(model:parameters(), { lr = opts.lr, weight_decay = opts.weight_decay })

-- 4. Pruning the MLPs (with --sparse) ------------------------------------------------
--
-- prune.GMP replaces each MLP projection (model:mlp_layers(): blocks.i.mlp.fc
-- and blocks.i.mlp.proj) by an nn.SparseLinear when it first turns sparse,
-- and recompresses it as M grows; with --sparse-attn the attention
-- projections too (model:attn_layers(): blocks.i.attn.qkv and .proj). The
-- embeddings (and the output layer, which is the token embedding) stay dense.
-- The schedule: 20 events (or one per step) from --prune-start to --prune-end.
local prune_t0, prune_n, prune_dt, warmup = schedule_steps(opts)
local gmp
if opts.sparse ~= "" then
  local layers = model:mlp_layers()
  if opts.sparse_attn then
    for _, name in ipairs(model:attn_layers()) do layers[#layers + 1] = name end
  end
  local ok_gmp, g = pcall(prune.GMP, model, { optimizer = opt, pattern = opts.sparse,
    layers = layers, t0 = prune_t0, n = prune_n, dt = prune_dt })
  if not ok_gmp then die(g) end
  gmp = g
  print(("pruning the MLPs%s towards %s: steps %d to %d, every %d steps"):format(
    opts.sparse_attn and " and the attention projections" or "", opts.sparse,
    prune_t0, prune_t0 + prune_n * prune_dt, prune_dt))
end

-- The learning rate: warm-up, then a cosine decay to 0; with --sparse and
-- --rewind F (default 1) a second cosine from F·lr starts after the last
-- pruning event (tutorial 2 explains why). At 256 wide, block 128 and 2,000
-- steps it takes the 2:8 model from 2.42% above dense's validation loss to
-- 0.91%, and the 2:16 one from 5.18% to 3.08% (bench/RESULTS.md, issue 17).
-- A dense run restarts only when --rewind is given, at the step where the
-- last event would be: the run to compare a rewound sparse one with, since
-- the restart alone changes the loss (it takes 0.6% off dense's).
local sched
if opts.steps > warmup then
  local sched_opts, restart = optim.rewind_options{ total_steps = opts.steps, warmup_steps = warmup,
    last_event = prune_t0 + prune_n * prune_dt, rewind = opts.rewind, lr = opts.lr }
  if restart then
    print(("the lr restarts at %g after step %d"):format(opts.rewind * opts.lr, restart))
  end
  sched = optim.CosineWarmup(opt, sched_opts)
end

-- Checkpoints. --save FILE writes the whole training state every
-- --eval-every steps (after the evaluation, which draws batches from the
-- RNG too), at --stop-after and at the end: the weights, AdamW's moments,
-- the lr schedule, the pruning schedule with each MLP layer's current
-- V:N:M layout, and the RNG state, which the batch sampler draws from.
-- --resume FILE restores all of it (rebuilding the pruned layers first) and
-- continues with the next step; on the CPU the resumed run computes the
-- same losses, bit for bit, as one never stopped. The schedules depend on
-- --steps and the rest of the options, so a resumed run must be given the
-- same ones: the checkpoint records those below and a resume that changes
-- one is an error (the outputs, the sampling, the device and the seed may
-- change: the RNG state comes from the checkpoint).
local RUN_OPTIONS = { "steps", "batch_size", "block_size", "n_layer", "n_head", "n_embd", "dropout",
  "lr", "weight_decay", "warmup", "text", "eval_every", "eval_batches", "sparse", "sparse_attn", "activation",
  "prune_start", "prune_end", "rewind", "amp" }
local parts = { model = model, optim = opt, sched = sched, gmp = gmp }
local first_step = 1
if opts.resume ~= "" then
  local ok_load, meta = pcall(checkpoint.load, opts.resume, parts)
  if not ok_load then
    -- A checkpoint of other options (--sparse-attn, say) can fail on its layers before the
    -- options are compared: then say which options differ.
    local ok_meta, _, saved = pcall(venom.load, opts.resume)
    die(ok_meta and checkpoint.check_options(saved, opts, opts.resume) or meta)
  end
  local changed = checkpoint.check_options(meta, opts, opts.resume)
  if changed then die(changed) end
  first_step = tonumber(meta.step) + 1
  if first_step > opts.steps then
    die(("%s is from the end of the run (step %d of %d); nothing left to train")
      :format(opts.resume, first_step - 1, opts.steps))
  end
  print(("resumed from %s after step %d"):format(opts.resume, first_step - 1))
end

-- 5. Evaluation ----------------------------------------------------------------------
--
-- A batch of windows drawn on the CPU (the RNG draws are the same on either
-- device) and moved to --device; the loss under --amp's autocast.
local function batch(tokens)
  local x, y = data.random_windows(tokens, opts.batch_size, opts.block_size)
  if opts.device == "cpu" then return x, y end
  local xd, yd = x:to(opts.device), y:to(opts.device)
  x:free(); y:free()
  return xd, yd
end
local function batch_loss(m, x, y)
  if opts.amp == "" then return m:loss(x, y) end
  return venom.autocast(opts.amp, function() return m:loss(x, y) end)
end
--
-- The mean loss over eval_batches random batches of a split, in eval mode
-- (no dropout) and without recording a graph.
local function estimate(tokens)
  model:eval()
  local sum = 0
  venom.no_grad(function()
    for _ = 1, opts.eval_batches do
      local x, y = batch(tokens)
      local loss = batch_loss(model, dist.share(x), dist.share(y))
      sum = sum + loss:item()
      x:free(); y:free(); loss:free()
    end
  end)
  model:train()
  return dist.mean(sum / opts.eval_batches, 1)
end

-- 6. Training ------------------------------------------------------------------------
--
-- One step: a batch, the loss, backward, the AdamW update, the schedules.
-- The graph's tensors are released by the garbage collector; a full
-- collection after each step returns their memory at once.
--
-- Training curves (--log, --plot), as in tutorial 1: a record per step
-- (the batch's loss, the learning rate it was trained with and, with
-- --sparse, the pruning schedule's target sparsity in %) and one per
-- evaluation (the train and val loss estimates), drawn after every
-- evaluation and at the last step: the loss per step, the evaluations, the
-- sparsity.
--
-- With --distributed (started by `mpirun -np P`) every process runs this
-- script: all draw the same batch of --batch-size windows (the same seed,
-- the same draws), each trains on its share of the rows (dist.share), and
-- dist.DataParallel averages the gradients over the processes during the
-- backward, so every process takes the step the whole batch gives; dp:loss
-- also follows the layers GMP replaces. The losses printed are the means
-- over the processes (dist.mean), so a 2-process run prints what the
-- 1-process run prints, up to float rounding; rank 0 alone prints and
-- writes files.
local dp = opts.distributed and dist.DataParallel(model) or model
local scaler = opts.amp == "f16" and require("venom.amp").GradScaler() or nil
local skipped = 0 -- f16 steps skipped for inf/NaN gradients
local curves, records = opts.log ~= "" or opts.plot ~= "", log and log.records or {}
local function record(r)
  if not dist.is_main() then return end
  if log then log:write(r) else records[#records + 1] = r end
end
local panels = {
  { x = "step", y = { "loss" }, ylabel = "training loss" },
  { x = "step", y = { "train_loss", "val_loss" }, ylabel = "loss (evaluation)", style = "+-" },
}
if gmp then panels[3] = { x = "step", y = { "sparsity" }, ylabel = "target sparsity (%)" } end
local tokens_per_step = opts.batch_size * opts.block_size
local quiet = not dist.is_main() -- the other ranks draw no bar
local bar = util.ProgressBar(math.max(1, opts.steps - first_step + 1), { desc = "train",
  file = quiet and { write = function() end, flush = function() end } or nil,
  tty = not quiet and venom.isatty(1) })
local train_time, smooth = 0, nil
local final_val
local last = opts.steps
if opts.stop_after > 0 and opts.stop_after < last then last = opts.stop_after end
for step = first_step, last do
  local start = venom.clock()
  local x, y = batch(train)
  local loss = batch_loss(dp, dist.share(x), dist.share(y))
  opt:zero_grad()
  if scaler then
    scaler:scale(loss):backward()
    if not scaler:step(opt) then skipped = skipped + 1 end
    scaler:update()
  else
    loss:backward()
    opt:step()
  end
  local lr = opt.lr -- the rate this step was trained with
  if sched then sched:step() end
  local ev = gmp and gmp:step()
  local l = dist.mean(loss:item(), 1)
  loss = nil
  collectgarbage()
  train_time = train_time + venom.clock() - start
  if l ~= l or l == math.huge then
    bar:close()
    die(("the training loss is %s at step %d; the run diverged (try a lower --lr than %g)")
      :format(tostring(l), step, opts.lr))
  end
  smooth = smooth and 0.9 * smooth + 0.1 * l or l
  if curves then
    record({ step = step, loss = l, lr = lr, sparsity = gmp and 100 * gmp:sparsity() })
  end
  bar:update(1, { loss = smooth, ["tok/s"] = ("%.0f"):format((step - first_step + 1)
    * tokens_per_step / train_time) })
  local lines = {}
  if ev then
    lines[#lines + 1] = ("step %5d  pruned to %s (target sparsity %.1f%%)"):format(ev.step,
      ev.layers[1].pattern, 100 * ev.sparsity)
  end
  if step % opts.eval_every == 0 or step == opts.steps then
    local act_line -- the MLPs' measured sparsity over the training steps since the last evaluation
    if opts.activation ~= "gelu" then
      local dens, kept = {}, {}
      for i, st in ipairs(model:activation_stats({ reset = true })) do
        dens[i] = st.density and ("%.3f"):format(st.density) or "-"
        kept[i] = st.tile_density and ("%.3f"):format(st.tile_density) or "-"
      end
      act_line = ("step %5d  MLP activation density per block %s  (tile share computed %s)")
        :format(step, table.concat(dens, " "), table.concat(kept, " "))
    end
    final_val = estimate(val)
    local train_loss = estimate(train)
    if opts.activation ~= "gelu" then model:activation_stats({ reset = true }) end
    lines[#lines + 1] = ("step %5d  train loss %.4f  val loss %.4f"):format(step, train_loss,
      final_val)
    record({ step = step, train_loss = train_loss, val_loss = final_val })
    if act_line then lines[#lines + 1] = act_line end
  end
  if #lines > 0 then
    if bar.tty then io.write("\r\27[K") end -- clear the bar's line first
    print(table.concat(lines, "\n"))
  end
  if opts.plot ~= "" and dist.is_main() and (step % opts.eval_every == 0 or step == last) then
    local ok_plot, err = pcall(plot.curves, opts.plot, records, panels)
    if not ok_plot then
      bar:close()
      die(err)
    end
  end
  if opts.save ~= "" and (step % opts.eval_every == 0 or step == last) then
    local ok_save, err = pcall(checkpoint.save, opts.save, parts,
                               { step = step, options = checkpoint.options_meta(opts, RUN_OPTIONS) })
    if not ok_save then
      bar:close()
      die(err)
    end
  end
end
bar:close()
if log then log:close() end
local ran = last - first_step + 1
if ran > 0 then
  print(("%d steps, %.1f s training, %.0f tokens/s"):format(ran, train_time,
    ran * tokens_per_step / train_time))
end
if scaler then
  print(("f16 loss scale %g at the end, %d steps skipped for inf/NaN gradients")
    :format(scaler:get_scale(), skipped))
end
if last < opts.steps then
  print(("stopped after step %d of %d%s"):format(last, opts.steps,
    opts.save ~= "" and "; continue with --resume " .. opts.save or ""))
  return
end
if gmp then
  for _, r in ipairs(gmp:report()) do
    print(("%-17s %-8s %8d of %-8d weights alive (%.1f%% sparse)"):format(r.name, r.pattern,
      r.nnz, r.size, 100 * r.sparsity))
  end
end
print(("final val loss %.4f (%.3f bits per byte)"):format(final_val, final_val / math.log(2)))

-- 7. A sample ------------------------------------------------------------------------
--
-- The prompt's bytes as tokens, continued by the model one byte at a time
-- (by rank 0 alone in a distributed run).
if not dist.is_main() then return end
local prompt = {}
for i = 1, #opts.prompt do prompt[i] = opts.prompt:byte(i) + 1 end
local out = model:generate(prompt, opts.sample, { temperature = opts.temperature,
  top_k = opts.top_k > 0 and opts.top_k or nil })
local bytes = {}
for i, id in ipairs(out) do bytes[i] = string.char(id - 1) end
print("\n--- sample ---\n" .. table.concat(bytes) .. "\n---")
