-- bench/bitnet_recipe.lua — which parts of the BitNet b1.58 training recipe
-- close the validation-loss gap to f32 on tutorial 5's tiny GPT (fortunes,
-- byte tokens, 2 layers, 4 heads, block 64, batch 16). Every run trains
-- from the same initial weights on the same batches and is evaluated on
-- the same validation batches, so rows differ by the recipe only. A table,
-- never a pass/fail.
--
-- Variants (--variants, comma-separated):
--   f32       AdamW 2e-3, 5% warm-up, cosine to 0, weight decay 0.1 (tutorial 5's f32)
--   f32emb    f32 with the BitNet runs' embedding std (--emb-std)
--   tutorial  BitNet: peak --peak, 5% warm-up, stage 1 linear to 60% of the peak,
--             half way a drop to 30% and linear to 0, weight decay 0.1 then 0
--             (tutorial 5's BitNet run)
--   keepwd    tutorial, but weight decay 0.1 in stage 2 too
--   onestage  peak --peak, 5% warm-up, linear to 0, weight decay 0.1 throughout
--   split     tutorial for the BitLinear weights; embeddings, head and norms
--             with the f32 recipe (a second AdamW)
--   warm10    tutorial with a 10% warm-up
--   vnm28     tutorial 5's BitNet 2:8 run: tutorial, with the MLP BitLinears pruned
--             by GMP to ternary 64:2:8 from 20% to 60% of the steps
--   latent    tutorial's model and recipe with λ = 0 throughout (no quantisation:
--             BitNet's architecture, RMSNorms and no biases, in f32)
--
-- Modifiers of every BitNet variant: --qwarm F ramps the quantisation mix λ
-- (nn.BitLinear:set_quant_mix) linearly from 0 to 1 over the first F of the
-- steps (0: λ = 1 throughout); --clip C clips the global gradient norm to C
-- before every step (0: off). --curve N prints the mean training loss of
-- every N steps (where a run sits on a plateau, and when it leaves it).
-- --emb-std S is the BitNet models' initial embedding std (the GPT's
-- emb_std; tutorial 5's --bitnet-emb-std, 0.2; GPT-2's 0.02 before).
--
--     venom bench/bitnet_recipe.lua [--variants f32,tutorial,...] [--n-embd 128]
--         [--steps 400] [--peak 1.5e-2] [--seed 0] [--qwarm 0] [--clip 0] [--curve 0]
--         [--emb-std 0.2]
local venom = require "venom"
local optim = require "venom.optim"
local data = require "venom.data"
local nn = require "venom.nn"
local prune = require "venom.prune"
local util = require "venom.util"
local root = arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = root .. "/?.lua;" .. package.path
local GPT = require "models.gpt"

-- A bad option prints "error: <message>" and exits with status 2 (util.parse_cli).
local opts = util.parse_cli(arg, { variants = "f32,tutorial,keepwd,onestage,split,warm10",
  n_embd = 128, steps = 400, peak = 1.5e-2, seed = 0, eval_batches = 8, qwarm = 0, clip = 0,
  curve = 0, emb_std = 0.2 }, {
  variants = "comma-separated variant names (see the file's header)",
  n_embd = "width of the residual stream",
  steps = "optimizer steps of each run",
  peak = "peak learning rate of the BitNet variants",
  seed = "seed of the engine RNG",
  eval_batches = "validation batches averaged at the end",
  qwarm = "fraction of the steps over which λ ramps from 0 to 1 (0: no ramp)",
  clip = "global gradient norm clip (0: off)",
  curve = "print the mean training loss of every N steps (0: off)",
  emb_std = "std of the BitNet models' initial embeddings (f32: 0.02)",
}, function(o)
  for _, k in ipairs({ "n_embd", "steps", "eval_batches" }) do util.check_arg_int(o, k, 1) end
  util.check_arg_int(o, "seed", 0)
  util.check_arg_int(o, "curve", 0)
  util.check_arg_number(o, "peak", 0)
  util.check_arg_number(o, "clip", 0, true)
  util.check_arg_number(o, "emb_std", 0)
  util.check_arg_number(o, "qwarm", 0, true)
  if o.qwarm > 1 then util.fail("--qwarm must be a fraction in [0, 1], got " .. o.qwarm) end
end)
local B, T, WD, F32_LR = 16, 64, 0.1, 2e-3
local train, val = data.corpus("")

-- f32: warm-up, cosine to 0.
local function cosine(step, peak, warm)
  if step <= warm then return peak * step / warm end
  return peak * 0.5 * (1 + math.cos(math.pi * (step - warm) / math.max(1, opts.steps - warm)))
end

-- BitNet b1.58's two stages: (lr, weight decay) at step.
local function two_stage(step, warm, wd2)
  local S, peak = opts.steps, opts.peak
  local half = math.floor(S / 2)
  if step <= warm then return peak * step / warm, WD end
  if step <= half then return peak * (1 - 0.4 * (step - warm) / math.max(1, half - warm)), WD end
  return peak * 0.3 * (1 - (step - half) / math.max(1, S - half)), wd2
end

local warm5 = math.max(1, math.floor(opts.steps / 20))
local variants = {
  f32 = { bitnet = false, lr = function(s) return cosine(s, F32_LR, warm5), WD end },
  f32emb = { bitnet = false, emb = true, lr = function(s) return cosine(s, F32_LR, warm5), WD end },
  tutorial = { lr = function(s) return two_stage(s, warm5, 0) end },
  keepwd = { lr = function(s) return two_stage(s, warm5, WD) end },
  onestage = { lr = function(s)
    if s <= warm5 then return opts.peak * s / warm5, WD end
    return opts.peak * (1 - (s - warm5) / math.max(1, opts.steps - warm5)), WD
  end },
  split = { split = true, lr = function(s) return two_stage(s, warm5, 0) end },
  warm10 = { lr = function(s) return two_stage(s, math.max(1, math.floor(opts.steps / 10)), 0) end },
  vnm28 = { vnm = "64:2:8", lr = function(s) return two_stage(s, warm5, 0) end },
  latent = { mix = 0, lr = function(s) return two_stage(s, warm5, 0) end },
}

-- λ at step: 1, or the --qwarm ramp (λ = 1 from step qwarm·steps on).
local function quant_mix(step)
  local ramp = math.floor(opts.qwarm * opts.steps)
  if ramp < 1 then return 1 end
  return math.min(1, step / ramp)
end

-- Sets λ on every BitLinear of model (and the SparseBitLinears GMP makes of them).
local function set_mix(model, lam)
  local function walk(m)
    local mt = getmetatable(m)
    if mt == nn.BitLinear or mt == nn.SparseBitLinear then m:set_quant_mix(lam) end
    for _, c in ipairs(m:children()) do walk(c) end
  end
  walk(model)
end

-- The BitLinear weights of model, and its other parameters.
local function split_params(model)
  local bit, other, seen = {}, {}, {}
  local function walk(m)
    if getmetatable(m) == nn.BitLinear then
      bit[#bit + 1] = m.weight
      seen[m.weight] = true
    end
    for _, c in ipairs(m:children()) do walk(c) end
  end
  walk(model)
  for _, p in ipairs(model:parameters()) do
    if not seen[p] then other[#other + 1] = p end
  end
  return bit, other
end

local function run(v)
  venom.manual_seed(opts.seed)
  local model = GPT({ vocab_size = data.TEXT_VOCAB, block_size = T, n_layer = 2, n_head = 4,
                      n_embd = opts.n_embd, bitnet = v.bitnet ~= false,
                      emb_std = (v.bitnet ~= false or v.emb) and opts.emb_std or nil })
  venom.manual_seed(opts.seed + 1)
  local opts_list
  if v.split then
    local bit, other = split_params(model)
    opts_list = { { optim.AdamW(bit, { lr = 0 }), v.lr },
                  { optim.AdamW(other, { lr = 0 }), function(s) return cosine(s, F32_LR, warm5), WD end } }
  else
    opts_list = { { optim.AdamW(model:parameters(), { lr = 0 }), v.lr } }
  end
  local gmp
  if v.vnm then -- as tutorial 5's third run
    local t0 = math.floor(0.2 * opts.steps)
    local dt = math.max(1, math.floor((math.floor(0.6 * opts.steps) - t0) / 20))
    gmp = prune.GMP(model, { optimizer = opts_list[1][1], pattern = v.vnm, layers = model:mlp_layers(),
      t0 = t0, n = math.max(1, math.floor((0.6 * opts.steps - t0) / dt)), dt = dt })
  end
  local bitnet, params, curve = v.bitnet ~= false, model:parameters(), 0
  local t0 = venom.clock()
  for step = 1, opts.steps do
    for _, o in ipairs(opts_list) do o[1].lr, o[1].weight_decay = o[2](step) end
    if bitnet then set_mix(model, v.mix or quant_mix(step)) end
    local x, y = data.random_windows(train, B, T)
    local loss = model:loss(x, y)
    for _, o in ipairs(opts_list) do o[1]:zero_grad() end
    loss:backward()
    if opts.clip > 0 and bitnet then nn.utils.clip_grad_norm_(params, opts.clip) end
    for _, o in ipairs(opts_list) do o[1]:step() end
    if gmp then gmp:step() end
    if opts.curve > 0 then
      curve = curve + loss:item()
      if step % opts.curve == 0 then
        print(("curve %s step %d train loss %.4f"):format(v.name, step, curve / opts.curve))
        curve = 0
      end
    end
    loss = nil
    collectgarbage()
  end
  local secs = venom.clock() - t0
  venom.manual_seed(opts.seed + 2)
  model:eval()
  local sum = 0
  venom.no_grad(function()
    for _ = 1, opts.eval_batches do
      local x, y = data.random_windows(val, B, T)
      sum = sum + model:loss(x, y):item()
    end
  end)
  return sum / opts.eval_batches, secs
end

print(("tiny GPT n_embd %d, %d steps, BitNet peak lr %g, seed %d, qwarm %g, clip %g, emb-std %g")
  :format(opts.n_embd, opts.steps, opts.peak, opts.seed, opts.qwarm, opts.clip, opts.emb_std))
print("| n_embd | variant | val loss | train s |\n|---|---|---|---|")
for name in tostring(opts.variants):gmatch("[^,]+") do
  local v = variants[name]
  if not v then util.die(("unknown variant '%s'"):format(name)) end
  v.name = name
  local loss, secs = run(v)
  print(("| %d | %s | %.4f | %.0f |"):format(opts.n_embd, name, loss, secs))
  io.stdout:flush()
end
