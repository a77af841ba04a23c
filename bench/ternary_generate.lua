-- bench/ternary_generate.lua — generation speed of the tiny GPT
-- (models/gpt.lua, 2 layers, 4 heads, block 64, untrained: the speed does
-- not depend on the weights) in f32, as BitNet b1.58 running the training
-- path (nn.BitLinear quantising on every call, f32 GEMM), and with the
-- BitLinear weights packed at 2 bits (venom.export_ternary, then
-- venom.load_ternary: int8 × ternary kernels). Each model generates
-- --tokens bytes after a 2-byte prompt --reps times, the three in turn
-- (A B C A B C ...); the table gives the median tokens/s, the spread and
-- ×f32. GPT:generate decodes with its KV cache (one row per new token
-- through the blocks: batch-1 products) unless --no-cache (every token
-- reruns the whole context, up to 64 rows). The default 62 tokens fill the
-- 64-token window exactly: past it the window slides and every further
-- token recomputes the whole window (absolute positions), cache or not.
--
--     venom bench/ternary_generate.lua [--widths 128,512,1024] [--reps 5] [--tokens 62] [--no-cache]
local venom = require "venom"
local util = require "venom.util"
local root = arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = root .. "/?.lua;" .. package.path
local GPT = require "models.gpt"

-- A bad option prints "error: <message>" and exits with status 2 (util.parse_cli).
local opts = util.parse_cli(arg, { widths = "128,512,1024", reps = 5, tokens = 62, cache = true }, {
  widths = "comma-separated n_embd values",
  reps = "timed generations per model (the median is printed)",
  tokens = "bytes generated per run",
  cache = "decode with the KV cache (--no-cache: rerun the context for every token)",
}, function(o)
  util.check_arg_int(o, "reps", 1)
  util.check_arg_int(o, "tokens", 1)
  if not o.widths:match("^%d+[%d,]*$") then
    util.fail("--widths must be comma-separated whole numbers such as 128,512, got " .. o.widths)
  end
end)

local function rate(model)
  venom.manual_seed(1)
  local t0 = venom.clock()
  model:generate({ 85, 105 }, opts.tokens, { temperature = 0.8, cache = opts.cache })
  return opts.tokens / (venom.clock() - t0)
end

print(("| n_embd | model | median tokens/s | min–max | ×f32 |\n|---|---|---|---|---|"))
for w in tostring(opts.widths):gmatch("%d+") do
  local cfg = { vocab_size = 256, block_size = 64, n_layer = 2, n_head = 4, n_embd = tonumber(w) }
  local models = { { "f32", GPT(cfg) } }
  cfg.bitnet = true
  local bit = GPT(cfg)
  local path = os.tmpname()
  venom.export_ternary(bit, path)
  local packed = venom.load_ternary(GPT(cfg), path)
  os.remove(path)
  models[2], models[3] = { "BitNet (training path)", bit }, { "packed ternary", packed }
  local r = { {}, {}, {} }
  for k = 1, opts.reps do
    for i, m in ipairs(models) do r[i][k] = rate(m[2]) end
  end
  local med = {}
  for i = 1, 3 do
    table.sort(r[i])
    med[i] = r[i][math.floor(opts.reps / 2) + 1]
  end
  for i, m in ipairs(models) do
    print(("| %s | %s | %.1f | %.1f–%.1f | %.2f |"):format(w, m[1], med[i], r[i][1], r[i][opts.reps],
      med[i] / med[1]))
  end
end
