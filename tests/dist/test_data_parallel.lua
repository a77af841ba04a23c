-- DataParallel under `mpirun -np 2`: the equivalence test (2 ranks with
-- batch B/2 each give the losses of 1 process with batch B, over 20
-- steps, within 1e-5 relative) for an MLP, the tiny GPT and a V:N:M model
-- under GMP, whose masks must stay identical on every rank; the reference
-- is the same training run without DataParallel in the same process, on
-- the whole batch. Then the buckets, a parameter without gradient, and
-- checkpoints written by rank 0.
local tap = require "tests.dist.disttap"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local prune = require "venom.prune"
local checkpoint = require "venom.checkpoint"
local dist = require "venom.distributed"
local GPT = require "models.gpt"

local r, P = dist.rank(), dist.world_size()
local STEPS, TOL = 20, 1e-5

-- Rows [r·B/P + 1, (r+1)·B/P] of a global batch: this rank's share.
local function share(t)
  local b = t:size(1) / P
  return t:narrow(1, r * b + 1, b)
end

-- Every tensor of the model's dense state on each rank equal, bit for bit.
local function same_on_every_rank(model)
  local same = true
  local sd = model:dense_state_dict()
  for _, k in ipairs(require("venom.util").sorted_keys(sd)) do
    local g = dist.all_gather(sd[k]:contiguous())
    local n = g:size(1) / P
    local d = (g:narrow(1, 1, n) - g:narrow(1, n + 1, n)):abs():max():item()
    same = same and d == 0
  end
  return same
end

-- Trains a reference model on whole batches and a DataParallel one on this
-- rank's share, 20 steps; returns the largest relative difference of the
-- global losses and the DataParallel wrapper.
local function equivalence(build, batches, loss_of, opts)
  opts = opts or {}
  venom.manual_seed(42)
  local ref = build()
  local ref_opt = optim.AdamW(ref:parameters(), { lr = 1e-2 })
  local ref_gmp = opts.gmp and prune.GMP(ref, opts.gmp(ref_opt))
  venom.manual_seed(42)
  local model = build()
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  local gmp = opts.gmp and prune.GMP(model, opts.gmp(opt))
  local dp = dist.DataParallel(model, { bucket_mb = opts.bucket_mb })
  local worst = 0
  for step = 1, STEPS do
    local x, y = batches(step)
    local l_ref = loss_of(ref, x, y)
    ref_opt:zero_grad(); l_ref:backward(); ref_opt:step()
    if ref_gmp then ref_gmp:step() end
    local l = loss_of(dp, share(x), share(y))
    opt:zero_grad(); l:backward(); opt:step()
    if gmp then gmp:step() end
    local global = dist.all_reduce_number(l:item(), "avg")
    worst = math.max(worst, math.abs(global - l_ref:item()) / math.abs(l_ref:item()))
  end
  return worst, dp, model, gmp
end

local criterion = nn.CrossEntropyLoss()
local function classify(m, x, y) return criterion(m(x), y) end

-- Fixed data: 20 batches of 16 samples with 20 features and 5 classes.
venom.manual_seed(3)
local X = venom.randn(STEPS * 16, 20)
local Y = (venom.rand(STEPS * 16) * 5):long() + 1
local function mlp_batches(step)
  return X:narrow(1, (step - 1) * 16 + 1, 16), Y:narrow(1, (step - 1) * 16 + 1, 16)
end

do
  local worst, dp = equivalence(function() return nn.mlp({ 20, 32, 32, 5 }) end, mlp_batches,
    classify, { bucket_mb = 0.002 })
  tap.ok(worst < TOL, ("MLP: 2 ranks × batch 8 give the losses of 1 process × batch 16 over 20 "
    .. "AdamW steps (max relative difference %.2g)"):format(worst))
  local st = dp:stats()
  local bytes = 0
  for _, p in ipairs(dp:parameters()) do bytes = bytes + 4 * p:numel() end
  -- 0.002 MB = 2097 bytes: buckets of 524 floats, W1's 640 gradients cut
  -- across two of them.
  tap.ok(st.buckets == math.ceil(bytes / 4 / 524) and st.steps == STEPS and st.bytes_per_step == bytes,
    ("MLP: %d buckets of <= 2 KB (a gradient cut where a bucket fills), %d steps reduced, %d "
      .. "bytes per step = the gradients' size"):format(st.buckets, st.steps, st.bytes_per_step))
  tap.ok(same_on_every_rank(dp.module), "MLP: the ranks' weights are identical after 20 steps")
end

-- A first layer whose weight-gradient GEMM is sliced (256 × 64 over 16
-- rows per rank: 262,144 multiply-adds) and handed over slice by slice:
-- W1's 16,384 gradients cut across buckets of 5,242 floats, so its first
-- pieces are all-reduced while the GEMM computes the rest. Every element
-- is copied into a bucket exactly once per step (bytes_reduced).
do
  venom.manual_seed(5)
  local X2 = venom.randn(STEPS * 32, 64)
  local Y2 = (venom.rand(STEPS * 32) * 5):long() + 1
  local function batches(step)
    return X2:narrow(1, (step - 1) * 32 + 1, 32), Y2:narrow(1, (step - 1) * 32 + 1, 32)
  end
  local worst, dp = equivalence(function() return nn.mlp({ 64, 256, 5 }) end, batches, classify,
    { bucket_mb = 0.02 })
  local st = dp:stats()
  tap.ok(worst < TOL, ("MLP 64-256-5, W1's gradient handed over row slice by row slice: 2 ranks "
    .. "give the 1-process losses (max relative difference %.2g)"):format(worst))
  -- per step: b2 (whole, before W2's rows), W2, b1 and W1's 4 pieces at least;
  -- all buckets but the last (W1's last 2,199 floats) start before dW1's
  -- last slice (with W1 handed over whole, none would: each holds some of W1)
  local early = st.bytes_started_early / (st.steps * st.bytes_per_step)
  tap.ok(st.bytes_reduced == st.steps * st.bytes_per_step and st.pieces_early >= 7 * st.steps
    and early > 0.8 and early < 1,
    ("every gradient element copied into a bucket once per step (%d bytes over %d steps = %d per "
      .. "step), %.1f pieces per step handed over by the GEMMs, %.1f%% of the bytes started during "
      .. "the backward"):format(st.bytes_reduced, st.steps, st.bytes_per_step,
      st.pieces_early / st.steps, 100 * early))
  tap.ok(same_on_every_rank(dp.module), "MLP 64-256-5: the ranks' weights are identical after 20 steps")
end

-- The same for a V:N:M layer (nn.SparseLinear, 32:2:8): its values'
-- gradient (512 × 32) comes over by row blocks as the SDDMM computes them
-- (16 rows per rank × 512 × 32 multiply-adds: 8 slices of 2 row blocks), the bias before them,
-- cut across buckets of 5,242 floats, so all buckets but the last start
-- before the SDDMM ends (none would with the values handed over whole).
do
  venom.manual_seed(6)
  local X3 = venom.randn(STEPS * 32, 128)
  local Y3 = (venom.rand(STEPS * 32) * 5):long() + 1
  local function batches(step)
    return X3:narrow(1, (step - 1) * 32 + 1, 32), Y3:narrow(1, (step - 1) * 32 + 1, 32)
  end
  local worst, dp, model = equivalence(function()
    local m = nn.mlp({ 128, 512, 5 })
    require("venom.sparse").sparsify(m, { V = 32, N = 2, M = 8, skip = { "3" } })
    return m
  end, batches, classify, { bucket_mb = 0.02 })
  local st = dp:stats()
  tap.ok(worst < TOL and getmetatable(model[1]) == nn.SparseLinear,
    ("V:N:M MLP 128-512-5, the values' gradient handed over by row blocks: 2 ranks give the "
      .. "1-process losses (max relative difference %.2g)"):format(worst))
  -- per step: b2, W2, b1 and the values' 4 pieces, each handed over by a rule
  local early = st.bytes_started_early / (st.steps * st.bytes_per_step)
  tap.ok(st.bytes_reduced == st.steps * st.bytes_per_step and st.pieces_early >= 7 * st.steps
    and early > 0.75 and early < 1,
    ("V:N:M: every element copied once per step, %.1f pieces per step handed over during the "
      .. "backward, %.1f%% of the bytes started during it"):format(st.pieces_early / st.steps, 100 * early))
  tap.ok(same_on_every_rank(dp.module), "V:N:M MLP 128-512-5: the ranks' values are identical after 20 steps")
end

do
  local V, T = 32, 8
  venom.manual_seed(9)
  local tokens = (venom.rand(STEPS * 8, T + 1) * V):long() + 1
  local function gpt_batches(step)
    local w = tokens:narrow(1, (step - 1) * 8 + 1, 8)
    return w:narrow(2, 1, T):contiguous(), w:narrow(2, 2, T):contiguous()
  end
  local worst, dp = equivalence(function()
    return GPT({ vocab_size = V, block_size = T, n_layer = 1, n_head = 2, n_embd = 32 })
  end, gpt_batches, function(m, x, y) return m:loss(x, y) end)
  tap.ok(worst < TOL, ("GPT (tiny): 2 ranks × batch 4 give the losses of 1 process × batch 8 "
    .. "over 20 steps (max relative difference %.2g)"):format(worst))
  tap.ok(same_on_every_rank(dp.module), "GPT: the ranks' weights are identical after 20 steps")
end

do
  local worst, dp, model, gmp = equivalence(function() return nn.mlp({ 20, 64, 64, 5 }) end,
    mlp_batches, classify, { gmp = function(opt)
      return { optimizer = opt, pattern = "8:2:8", t0 = 2, n = 3, dt = 4 }
    end })
  local report = gmp:report()
  tap.ok(worst < TOL and report[1].pattern == "8:2:8", ("V:N:M under GMP (dense → 8:2:8 during the run): "
    .. "2 ranks give the 1-process losses (max relative difference %.2g)"):format(worst))
  tap.ok(getmetatable(model[1]) == nn.SparseLinear and same_on_every_rank(dp.module),
    "V:N:M: the masks and values are identical on every rank")
end

-- A parameter that gets no gradient: dp:sync() counts it as zeros.
do
  venom.manual_seed(1)
  local model = nn.mlp({ 4, 3, 2 })
  local dp = dist.DataParallel(model)
  local x = venom.randn(2, 4) * (r + 1)
  local w = model[1].weight
  local h = model[1](x)
  local loss = h:sum()
  loss:backward()
  dp:sync()
  -- The reference: the mean over ranks of rank q's gradient (x_q summed over rows).
  local want = nil
  for q = 0, P - 1 do
    venom.manual_seed(1); nn.mlp({ 4, 3, 2 })
    local xq = venom.randn(2, 4) * (q + 1)
    local g = xq:sum(1):reshape(1, 4):expand(3, 4) / P
    want = want and want + g or g
  end
  local d = (w.grad - want):abs():max():item()
  local last = model[3].weight.grad
  tap.ok(d < 1e-5 and last ~= nil and last:abs():max():item() == 0,
    ("a step where the last layer gets no gradient: after dp:sync() the first layer's gradient is the ranks' mean (error %.2g), the last layer's zeros"):format(d))
  dp:free()
end

-- Checkpoints: rank 0 writes; resuming needs the same world size.
do
  local path = os.getenv("TMPDIR") or "/tmp"
  path = ("%s/venom-dist-%d.safetensors"):format(path, dist.all_reduce_number(r == 0 and os.time() or 0, "max"))
  venom.manual_seed(2)
  local model = nn.mlp({ 4, 3 })
  local dp = dist.DataParallel(model)
  checkpoint.save(path, { model = dp }, { epoch = 1 })
  local f = io.open(path, "rb")
  tap.ok(f ~= nil, "checkpoint.save in a distributed run: the file is there when save returns, on every rank")
  if f then f:close() end
  local meta = checkpoint.load(path, { model = dp })
  tap.is(meta.epoch, "1", "checkpoint.load on the same world size resumes")
  dist.barrier()
  if r == 0 then
    local t = model:state_dict()
    t.rng_state = venom.get_rng_state()
    local sd = {}
    for k, v in pairs(t) do sd[(k == "rng_state" and "" or "model.") .. k] = v end
    venom.save(path, sd, { world_size = "3" })
  end
  dist.barrier()
  tap.error_like(function() checkpoint.load(path, { model = dp }) end,
    "written by a run of 3 ranks and this run has 2; resume on the same world size",
    "checkpoint.load of a checkpoint from 3 ranks is refused on 2")
  dist.barrier()
  if r == 0 then os.remove(path) end
end

-- The wrapper need not be kept: `dist.DataParallel(model)` alone (as tutorial
-- 1 calls it) averages every backward until free(), through any number of
-- garbage collections. (Before, the collector took the dropped wrapper and
-- its reducer's __gc removed the hooks: from then on each rank trained on
-- its own gradients, at a step that depended on the memory in use.)
do
  venom.manual_seed(5)
  local model = nn.mlp({ 6, 8, 3 })
  dist.DataParallel(model) -- the result dropped on purpose
  collectgarbage(); collectgarbage()
  local params, worst = model:parameters(), 0
  for step = 1, 3 do
    venom.manual_seed(100 + step + 10 * r) -- a different batch on each rank
    local x = venom.randn(4, 6)
    for _, p in ipairs(params) do p:zero_grad() end
    model(x):pow(2):mean():backward()
    for _, p in ipairs(params) do
      -- Averaged: the same gradient on every rank.
      local g = dist.all_gather(p.grad:contiguous():reshape(p:numel()))
      local n = p:numel()
      worst = math.max(worst, (g:narrow(1, 1, n) - g:narrow(1, n + 1, n)):abs():max():item())
    end
    collectgarbage()
  end
  tap.ok(worst == 0, ("DataParallel(model) with the wrapper dropped and collected: the ranks' "
    .. "gradients are averaged on every step (largest difference between ranks %g)"):format(worst))
end

-- DataParallel's bad input.
tap.error_like(function() dist.DataParallel({}) end, "expected a venom.nn module",
  "DataParallel of a table that is not a module")
tap.error_like(function() dist.DataParallel(nn.Linear(2, 2), { bucket_mb = 0 }) end,
  "bucket_mb must be a number of megabytes > 0", "DataParallel: bucket_mb 0 is refused")
tap.error_like(function() dist.DataParallel(nn.Linear(2, 2 + r)) end,
  "the ranks' models differ", "DataParallel of different models on the two ranks: an error on every rank")

tap.done()
