-- Tutorial 6: Mixture of Experts in a tiny GPT, and the dense-to-sparse gate.
--
-- A Mixture-of-Experts (MoE) layer replaces a transformer block's MLP by E
-- copies of it ("experts") and a router that sends each token to k of them:
-- E times the parameters, but each token pays for only k experts. That is
-- conditional (dynamic) sparsity. This tutorial trains, at equal steps and
-- on the same batches, four byte-level GPTs (models/gpt.lua):
--
--   dense   the plain GPT;
--   switch  every second block's MLP an MoE with a top-1 gate (Switch
--           Transformer, Fedus et al. 2021);
--   top2    the same with a top-2 gate (GShard, Lepikhin et al. 2020);
--   dts     the same with the Dense-To-Sparse gate (Nie et al., arXiv
--           2112.14397): Gumbel-softmax routing whose temperature falls
--           from 2 to 0.3, every token sent to each expert whose
--           probability exceeds γ = 0.001 — all experts at first, about
--           top-1 at the end.
--
-- Every evaluation prints the validation loss, the experts each token used
-- in the last training step and the balance ratio (the busiest expert's
-- load over the mean load: 1 is perfectly balanced); the end prints a table
-- of final losses, tokens/s and the step at which each model reached the
-- dense model's final validation loss.
--
-- Run it with
--
--     venom tutorials/06-moe.lua                                 # fortunes (Debian package)
--     venom tutorials/06-moe.lua --text ../shared/data/tinyshakespeare/input.txt
--     venom tutorials/06-moe.lua --models dense,dts --steps 1000 --experts 8
--     venom tutorials/06-moe.lua --plot moe.png                  # validation curves (gnuplot)
--     venom tutorials/06-moe.lua --help
local venom = require "venom"
local optim = require "venom.optim"
local data = require "venom.data"
local util = require "venom.util"
local plot = require "venom.plot"
local root = arg[0]:match("^(.*)/tutorials/[^/]*$") or "."
package.path = root .. "/?.lua;" .. package.path
local GPT = require "models.gpt"

-- 1. Options ------------------------------------------------------------------
local GATES = {
  dense = nil,
  switch = { gate = "topk", k = 1 },
  top2 = { gate = "topk", k = 2 },
  dts = { gate = "dts", k = 1 },
}
local opts = util.parse_cli(arg, {
  models = "dense,switch,top2,dts",
  steps = 400,
  batch_size = 16,
  block_size = 64,
  n_layer = 2,
  n_head = 4,
  n_embd = 64,
  experts = 8,
  every = 2,
  capacity_factor = 1.25,
  anneal = 0.5,
  lr = 2e-3,
  seed = 0,
  text = "",
  eval_every = 50,
  eval_batches = 8,
  plot = "",
}, {
  models = "comma-separated list of dense, switch, top2, dts",
  steps = "optimizer steps per model",
  batch_size = "windows per step",
  block_size = "context length in bytes",
  n_layer = "transformer blocks",
  n_head = "attention heads per block",
  n_embd = "width of the residual stream",
  experts = "experts per MoE layer",
  every = "every N-th block's MLP is an MoE layer (blocks N, 2N, ...)",
  capacity_factor = "an expert keeps at most capacity_factor x its fair share of tokens",
  anneal = "fraction of the steps over which DTS's temperature falls from 2 to 0.3",
  lr = "AdamW learning rate (constant)",
  seed = "seed of the engine RNG (weights, batches)",
  text = "train on this text file instead of the fortunes corpus",
  eval_every = "steps between two validation evaluations",
  eval_batches = "validation batches per evaluation (the same batches every time)",
  plot = "draw the validation curves to FILE.png or FILE.svg (gnuplot)",
}, function(o)
  for _, k in ipairs({ "steps", "batch_size", "block_size", "n_layer", "n_head", "n_embd",
                       "every", "eval_every", "eval_batches" }) do
    util.check_arg_int(o, k, 1)
  end
  util.check_arg_int(o, "seed", 0)
  util.check_arg_number(o, "lr", 0)
  util.check_arg_number(o, "capacity_factor", 0)
  if not (o.anneal > 0 and o.anneal <= 1) then util.fail("--anneal must be in (0, 1], got " .. o.anneal) end
  if o.every > o.n_layer then
    util.fail(("--every %d is more than --n-layer %d: no block would be an MoE"):format(o.every, o.n_layer))
  end
  util.check_int(o.experts, "--experts", { min = 2, what = "a whole number >= 2 (top2 needs two)" })
  if o.n_embd % o.n_head ~= 0 then
    util.fail(("--n-embd (%d) must be a multiple of --n-head (%d)"):format(o.n_embd, o.n_head))
  end
  o.list = {}
  for name in o.models:gmatch("[^,]+") do
    if name ~= "dense" and not GATES[name] then
      util.fail("--models: unknown model " .. name .. " (known: dense, switch, top2, dts)")
    end
    o.list[#o.list + 1] = name
  end
  if #o.list == 0 then util.fail("--models is empty") end
  if o.plot ~= "" then plot.check_output(o.plot) end
end)

-- 2. Data ---------------------------------------------------------------------------
--
-- Bytes as tokens, 90% to train and 10% to validate (tutorial 3). Every
-- model sees the same batches in the same order: they are drawn once, up
-- front, so that the routing's own random draws (DTS's Gumbel noise) do
-- not change the data a model trains on.
local ok, train, val, corpus = pcall(data.corpus, opts.text)
if not ok then util.die(train) end
print(("corpus: %s, %d bytes for training, %d for validation"):format(corpus, train:size(1),
  val:size(1)))
venom.manual_seed(opts.seed)
local function draw(tokens, n)
  local batches = {}
  for i = 1, n do
    local x, y = data.random_windows(tokens, opts.batch_size, opts.block_size)
    batches[i] = { x, y }
  end
  return batches
end
local ok_draw, train_batches = pcall(draw, train, opts.steps)
if not ok_draw then util.die(train_batches) end
local val_batches = draw(val, opts.eval_batches)

-- 3. Training one model ---------------------------------------------------------------
--
-- The mean validation loss over the fixed batches, in eval mode (for the
-- gates: plain top-k, no noise, no balance loss).
local function validate(model)
  model:eval()
  local sum = 0
  venom.no_grad(function()
    for _, b in ipairs(val_batches) do
      local loss = model:loss(b[1], b[2])
      sum = sum + loss:item()
      loss:free()
    end
  end)
  model:train()
  return sum / #val_batches
end

-- The mean over MoE layers of a stats field.
local function mean_stat(stats, key)
  local s = 0
  for _, row in ipairs(stats) do s = s + row[key] end
  return #stats > 0 and s / #stats or 0
end

local records = {}
local function train_model(name)
  venom.manual_seed(opts.seed)
  local moe
  if name ~= "dense" then
    local g = GATES[name]
    moe = { experts = opts.experts, k = g.k, gate = g.gate, every = opts.every,
            capacity_factor = opts.capacity_factor,
            anneal_steps = g.gate == "dts" and math.max(1, math.floor(opts.anneal * opts.steps)) or nil }
  end
  local ok_model, model = pcall(GPT, {
    vocab_size = data.TEXT_VOCAB, block_size = opts.block_size, n_layer = opts.n_layer,
    n_head = opts.n_head, n_embd = opts.n_embd, moe = moe,
  })
  if not ok_model then util.die(model) end
  local opt = optim.AdamW(model:parameters(), { lr = opts.lr, weight_decay = 0.01 })
  print(("\n== %s: %d parameters"):format(name, model:num_parameters()))
  local result = { name = name, evals = {}, time = 0 }
  for step = 1, opts.steps do
    local start = venom.clock()
    local b = train_batches[step]
    local loss = model:loss(b[1], b[2])
    opt:zero_grad()
    loss:backward()
    opt:step()
    local l = loss:item()
    loss = nil
    collectgarbage()
    result.time = result.time + venom.clock() - start
    if l ~= l then util.die(("%s: the training loss is NaN at step %d"):format(name, step)) end
    local stats = model:moe_stats() -- of this training step, before validate's eval pass
    if step % opts.eval_every == 0 or step == opts.steps then
      local v = validate(model)
      result.evals[#result.evals + 1] = { step = step, val = v }
      records[#records + 1] = { step = step, ["val_" .. name] = v }
      local line = ("%-6s step %5d  val loss %.4f"):format(name, step, v)
      if moe then
        result.per_token, result.balance = mean_stat(stats, "experts_per_token"), mean_stat(stats, "balance")
        result.dropped = mean_stat(stats, "dropped_fraction")
        line = line .. ("  experts/token %.2f  balance %.2f  dropped %.3f"):format(result.per_token,
          result.balance, result.dropped)
        if stats[1] and stats[1].tau then line = line .. ("  tau %.2f"):format(stats[1].tau) end
      end
      print(line)
    end
  end
  result.final = result.evals[#result.evals].val
  result.tokens_per_s = opts.steps * opts.batch_size * opts.block_size / result.time
  return result
end

local results = {}
for _, name in ipairs(opts.list) do results[#results + 1] = train_model(name) end

-- 4. Summary --------------------------------------------------------------------------
--
-- "reaches dense" is the first evaluation at which a model's validation loss
-- is at or below the dense model's final one (the DTS-Gate paper's measure:
-- steps to a target perplexity); "-" if it never does in this run.
local dense_final
for _, r in ipairs(results) do if r.name == "dense" then dense_final = r.final end end
print(("\n%-7s %10s %14s %10s %14s %9s %9s"):format("model", "final val", "reaches dense",
  "tokens/s", "experts/token", "balance", "dropped"))
for _, r in ipairs(results) do
  local reach = "-"
  for _, e in ipairs(r.evals) do
    if dense_final and e.val <= dense_final then
      reach = tostring(e.step)
      break
    end
  end
  print(("%-7s %10.4f %14s %10.0f %14s %9s %9s"):format(r.name, r.final, reach, r.tokens_per_s,
    r.per_token and ("%.2f"):format(r.per_token) or "-", r.balance and ("%.2f"):format(r.balance) or "-",
    r.dropped and ("%.3f"):format(r.dropped) or "-"))
end
if opts.plot ~= "" then
  local ys = {}
  for _, name in ipairs(opts.list) do ys[#ys + 1] = "val_" .. name end
  local ok_plot, err = pcall(plot.curves, opts.plot, records,
    { { x = "step", y = ys, ylabel = "validation loss", style = "+-" } })
  if not ok_plot then util.die(err) end
  print("validation curves: " .. opts.plot)
end
