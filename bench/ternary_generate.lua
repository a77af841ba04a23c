-- bench/ternary_generate.lua — generation speed of the tiny GPT
-- (models/gpt.lua, 2 layers, 4 heads, block 64, untrained: the speed does
-- not depend on the weights) in f32, as BitNet b1.58 running the training
-- path (nn.BitLinear quantising on every call, f32 GEMM), and with the
-- BitLinear weights packed at 2 bits (venom.export_ternary, then
-- venom.load_ternary: int8 × ternary kernels). Each model generates
-- --tokens bytes after a 2-byte prompt --reps times, the three in turn
-- (A B C A B C ...); the table gives the median tokens/s and CPU time
-- (user + sys, os.clock) per token, their spread and ×f32 (tokens/s, and
-- f32's CPU time over the model's: less sensitive to other jobs on a loaded
-- machine). GPT:generate decodes with its KV cache (one row per new token
-- through the blocks: batch-1 products) unless --no-cache (every token
-- reruns the whole context, up to 64 rows); with the cache, the f32 and
-- packed models run the tokens in one C call (venom.gpt_decoder) unless
-- --no-fused, and --compare-fused times them both ways in the same rounds.
-- The default 62 tokens fill the
-- 64-token window exactly: past it the window slides and every further
-- token recomputes the whole window (absolute positions), cache or not.
--
--     venom bench/ternary_generate.lua [--widths 128,512,1024] [--reps 5] [--tokens 62]
--                                      [--no-cache] [--no-fused] [--compare-fused]
local venom = require "venom"
local util = require "venom.util"
local root = arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = root .. "/?.lua;" .. package.path
local GPT = require "models.gpt"

-- A bad option prints "error: <message>" and exits with status 2 (util.parse_cli).
local opts = util.parse_cli(arg, { widths = "128,512,1024", reps = 5, tokens = 62, cache = true,
                                   fused = true, compare_fused = false }, {
  widths = "comma-separated n_embd values",
  reps = "timed generations per model (the median is printed)",
  tokens = "bytes generated per run",
  cache = "decode with the KV cache (--no-cache: rerun the context for every token)",
  fused = "the decoding in one C call where it applies (--no-fused: through the ops)",
  compare_fused = "time the f32 and packed models both with and without the fused decoder",
}, function(o)
  util.check_arg_int(o, "reps", 1)
  util.check_arg_int(o, "tokens", 1)
  if not o.widths:match("^%d+[%d,]*$") then
    util.fail("--widths must be comma-separated whole numbers such as 128,512, got " .. o.widths)
  end
end)

-- tokens/s and CPU µs per token of one generation.
local function rate(model, fused)
  venom.manual_seed(1)
  local t0, c0 = venom.clock(), os.clock()
  model:generate({ 85, 105 }, opts.tokens, { temperature = 0.8, cache = opts.cache, fused = fused })
  local t1, c1 = venom.clock(), os.clock()
  return opts.tokens / (t1 - t0), (c1 - c0) / opts.tokens * 1e6
end

local function median(t)
  table.sort(t)
  return t[math.floor(#t / 2) + 1]
end

print("| n_embd | model | median tokens/s | min–max | ×f32 | CPU µs/token (min–max) | ×f32 (CPU) |")
print("|---|---|---|---|---|---|---|")
for w in tostring(opts.widths):gmatch("%d+") do
  local cfg = { vocab_size = 256, block_size = 64, n_layer = 2, n_head = 4, n_embd = tonumber(w) }
  local f32 = GPT(cfg)
  cfg.bitnet = true
  local bit = GPT(cfg)
  local path = os.tmpname()
  venom.export_ternary(bit, path)
  local packed = venom.load_ternary(GPT(cfg), path)
  os.remove(path)
  local tag = opts.cache and opts.fused and " (fused)" or ""
  local models = { { "f32" .. tag, f32, opts.fused }, { "BitNet (training path)", bit, opts.fused },
                   { "packed ternary" .. tag, packed, opts.fused } }
  if opts.compare_fused then
    models[#models + 1] = { "f32 (ops)", f32, false }
    models[#models + 1] = { "packed ternary (ops)", packed, false }
  end
  local r, c = {}, {}
  for i = 1, #models do r[i], c[i] = {}, {} end
  for k = 1, opts.reps do
    for i, m in ipairs(models) do r[i][k], c[i][k] = rate(m[2], m[3]) end
  end
  local med, cmed = {}, {}
  for i = 1, #models do med[i], cmed[i] = median(r[i]), median(c[i]) end
  for i, m in ipairs(models) do
    -- the ratios against the f32 model run the same way (fused or through the ops)
    local base = (not m[3] and opts.compare_fused) and #models - 1 or 1
    print(("| %s | %s | %.1f | %.1f–%.1f | %.2f | %.1f (%.1f–%.1f) | %.2f |"):format(w, m[1], med[i],
      r[i][1], r[i][opts.reps], med[i] / med[base], cmed[i], c[i][1], c[i][opts.reps],
      cmed[base] / cmed[i]))
  end
end
