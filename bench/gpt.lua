-- bench/gpt.lua — training speed of tutorial 3's GPT (models/gpt.lua:
-- pre-LayerNorm blocks, causal attention, GELU MLP, tied output layer,
-- AdamW) on the fortunes corpus: tokens/s, ms/step and where the time goes
-- by op kind (venom.profile), and the process's peak resident size.
--
--     venom bench/gpt.lua                                   # tutorial 3's defaults
--     venom bench/gpt.lua --n-embd 256 --block-size 128     # the issue-size model
--     venom bench/gpt.lua --sparse 64:2:8                   # V:2:M MLPs (nn.SparseLinear)
--     venom bench/gpt.lua --sparse 64:2:8 --sparse-attn     # and V:2:M attention projections
--     venom bench/gpt.lua --sparse 64:2:8 --precision bf16  # their forward, dX, dW in bf16
--                                                           # (venom.set_vnm_precision)
--
-- Its PyTorch 2 peer is bench/torch_gpt_cpu.py (same options; see
-- bench/RESULTS.md for the side-by-side commands). --warmup steps run
-- untimed (allocator caches, BLAS threads); then --steps timed steps give
-- the median and spread of ms/step; then --profile-steps more steps run
-- under the profiler (its table, the costliest op kinds first). Prints
-- tables; never fails on time. "CPU ms/step" is the process's CPU time
-- (all threads) per timed step: on a loaded machine it moves less than the
-- wall time, and threads spinning idle show up in it. "GEMMs alone" (dense
-- models) is the step's Linear GEMMs timed by themselves: the floor a step
-- cannot go under with this BLAS.
local venom = require "venom"
local optim = require "venom.optim"
local data = require "venom.data"
local util = require "venom.util"
local root = arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = root .. "/?.lua;" .. package.path
local GPT = require "models.gpt"

-- A bad option prints "error: <message>" and exits with status 2 (util.parse_cli).
local opts = util.parse_cli(arg, {
  steps = 20, warmup = 3, profile_steps = 5, batch_size = 32, block_size = 64, n_layer = 4,
  n_head = 4, n_embd = 128, sparse = "", sparse_attn = false, seed = 0, text = "", top = 16,
  precision = "f32",
}, nil, function(o)
  for _, k in ipairs({ "steps", "warmup", "profile_steps", "batch_size", "block_size", "n_layer",
                       "n_head", "n_embd", "top" }) do
    util.check_arg_int(o, k, k == "warmup" and 0 or 1)
  end
  util.check_arg_int(o, "seed", 0)
  if o.n_embd % o.n_head ~= 0 then
    util.fail(("--n-embd (%d) must be a multiple of --n-head (%d)"):format(o.n_embd, o.n_head))
  end
  if o.sparse ~= "" then
    local V, M = o.sparse:match("^(%d+):2:(%d+)$")
    if not V or tonumber(V) < 1 or tonumber(M) < 4 then
      util.fail("--sparse must be a V:2:M pattern (V >= 1, M >= 4) such as 64:2:8, got " .. o.sparse)
    end
  end
  if o.precision ~= "f32" and o.precision ~= "bf16" then
    util.fail("--precision must be f32 or bf16, got " .. o.precision)
  end
  if o.sparse_attn and o.sparse == "" then
    util.fail("--sparse-attn makes the attention projections V:2:M too; give --sparse")
  end
end)
local mlp
if opts.sparse ~= "" then
  local V, M = opts.sparse:match("^(%d+):2:(%d+)$")
  mlp = { V = tonumber(V), M = tonumber(M) }
end
local attn = opts.sparse_attn and mlp or nil
local ok_prec, prec_err = pcall(venom.set_vnm_precision, opts.precision)
if not ok_prec then util.die(prec_err) end
venom.manual_seed(opts.seed)
local ok, train = pcall(data.corpus, opts.text)
if not ok then util.die(train) end
local ok_model, model = pcall(GPT, { vocab_size = data.TEXT_VOCAB, block_size = opts.block_size,
  n_layer = opts.n_layer, n_head = opts.n_head, n_embd = opts.n_embd, dropout = 0, mlp = mlp,
  attn = attn })
if not ok_model then util.die(model) end
local opt = optim.AdamW(model:parameters(), { lr = 2e-3, weight_decay = 0.01 })

local function step()
  local x, y = data.random_windows(train, opts.batch_size, opts.block_size)
  local loss = model:loss(x, y)
  opt:zero_grad()
  loss:backward()
  opt:step()
  local l = loss:item()
  x:free(); y:free(); loss:free()
  collectgarbage()
  return l
end

for _ = 1, opts.warmup do step() end
local ms = {}
local cpu0 = os.clock() -- process CPU time, all threads: less sensitive to a loaded machine
for i = 1, opts.steps do
  local t0 = venom.clock()
  step()
  ms[i] = 1e3 * (venom.clock() - t0)
end
local cpu_ms = 1e3 * (os.clock() - cpu0) / opts.steps
table.sort(ms)
local med = ms[math.floor((#ms + 1) / 2)]
local report = venom.profile(function()
  for _ = 1, opts.profile_steps do step() end
end)

-- The GEMM floor (dense models): the step's Linear GEMMs alone, timed now
-- through the same path (venom.matmul on transposed views, vn__sgemm's split
-- over the same threads): per layer the qkv, attention-projection, fc and
-- MLP-projection layers and once the tied head, each Y = X·Wᵀ, dX = dY·W and
-- dW = dYᵀ·X at the step's batch × block tokens. The attention's per-head
-- products are not in it. No step can take less wall time than this at
-- this BLAS's rate; the step's excess over it is everything else.
local function gemm_floor()
  local N, C = opts.batch_size * opts.block_size, opts.n_embd
  local layers = { { C, 3 * C, opts.n_layer }, { C, C, opts.n_layer }, { C, 4 * C, opts.n_layer },
                   { 4 * C, C, opts.n_layer }, { C, data.TEXT_VOCAB, 1 } } -- in, out, how many
  local ops, work, held = {}, 0, {}
  for _, l in ipairs(layers) do
    local x, w, dy = venom.randn(N, l[1]), venom.randn(l[2], l[1]), venom.randn(N, l[2])
    local fwd = function() return venom.matmul(x, w:transpose(1, 2)) end
    local dx = function() return venom.matmul(dy, w) end
    local dw = function() return venom.matmul(dy:transpose(1, 2), x) end
    for _ = 1, l[3] do ops[#ops + 1] = fwd; ops[#ops + 1] = dx; ops[#ops + 1] = dw end
    work = work + l[3] * 3 * 2 * N * l[1] * l[2]
    held[#held + 1] = { x, w, dy }
  end
  local best, best_cpu = math.huge, math.huge
  for _ = 1, 5 do
    local t0, c0 = venom.clock(), os.clock()
    for _, op in ipairs(ops) do op():free() end
    best, best_cpu = math.min(best, venom.clock() - t0), math.min(best_cpu, os.clock() - c0)
  end
  for _, t in ipairs(held) do for _, x in ipairs(t) do x:free() end end
  return { ms = 1e3 * best, cpu_ms = 1e3 * best_cpu, gflops = work / best / 1e9 }
end

local function first_line(cmd, pattern)
  local f = io.open(cmd)
  if not f then return "?" end
  local s = f:read("*a")
  f:close()
  return s:match(pattern) or "?"
end
-- the peak resident size of the training steps, read before the floor's own tensors
local peak_rss = first_line("/proc/self/status", "VmHWM:%s*([^\n]+)")
local floor = not mlp and venom.no_grad(gemm_floor) or nil
local tokens = opts.batch_size * opts.block_size
print(("%-24s %s"):format("model", ("GPT %d layers, %d heads, %d wide, block %d%s%s"):format(
  opts.n_layer, opts.n_head, opts.n_embd, opts.block_size,
  mlp and (", MLPs " .. opts.sparse) or "", attn and (", attention " .. opts.sparse) or "")))
print(("%-24s %d"):format("batch size", opts.batch_size))
print(("%-24s %s"):format("V:N:M precision", venom.vnm_precision()))
print(("%-24s %.0f (median of %d steps)"):format("tokens/s", tokens / med * 1e3, opts.steps))
print(("%-24s %.1f median, %.1f–%.1f range"):format("ms/step", med, ms[1], ms[#ms]))
print(("%-24s %.1f (user + system, all threads)"):format("CPU ms/step", cpu_ms))
if floor then
  print(("%-24s %.1f ms/step (%.1f GFLOP/s), %.1f CPU ms (best of 5); the step is %.2f × it, "
    .. "%.2f × in CPU"):format("GEMMs alone", floor.ms, floor.gflops, floor.cpu_ms,
    med / floor.ms, cpu_ms / floor.cpu_ms))
end
print(("%-24s %s"):format("peak RSS", peak_rss))
print(("%-24s %s"):format("CPU", first_line("/proc/cpuinfo", "model name%s*:%s*([^\n]+)")))
print(("%-24s %s"):format("load average", first_line("/proc/loadavg", "^(%S+ %S+ %S+)")))
print(("\nper op kind, %d profiled steps (ms summed over them):"):format(opts.profile_steps))
print(report:format(opts.top))
