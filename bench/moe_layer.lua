-- bench/moe_layer.lua — one training step (forward, then backward from a
-- fixed incoming gradient) of an nn.MoE layer against the dense MLP of the
-- same *active* size: Linear(d, 4d) → GELU → Linear(4d, d), which is what
-- each token passes through with k = 1. The MoE adds the router, the
-- routing (venom.moe_route), the gather of each expert's rows and the
-- weighted scatter-add back; "dispatch only" is the MoE with identity
-- experts (router, routing, gather, scatter: no GEMMs), to show what the
-- dispatch itself costs. Rounds alternate the entries (A B C … A B C …) so
-- that a machine shared with other jobs slows them alike.
--
--     venom bench/moe_layer.lua [--rounds 5] [--reps 5] [--tokens 2048] [--d 128]
--
-- Prints, per entry, the median over rounds of each round's median
-- milliseconds per step, the min–max over rounds, and the ratio to dense;
-- never fails on time.
local venom = require "venom"
local nn = require "venom.nn"
local util = require "venom.util"

-- A bad option prints "error: <message>" and exits with status 2 (util.parse_cli).
local opts = util.parse_cli(arg, { rounds = 5, reps = 5, tokens = 2048, d = 128, experts = 8 }, {
  rounds = "alternating rounds (each entry once per round)",
  reps = "timed steps per entry and round (after one warm-up; the median is kept)",
  tokens = "tokens per step (rows of the input)",
  d = "model width (the hidden width is 4·d)",
  experts = "experts of the MoE layer",
}, function(o)
  for _, k in ipairs({ "rounds", "reps", "tokens", "d" }) do util.check_arg_int(o, k, 1) end
  util.check_arg_int(o, "experts", 2)
end)
venom.manual_seed(0)
local T, D, E = opts.tokens, opts.d, opts.experts

local Identity = nn.Module:extend("Identity")
function Identity:forward(x) return x end

local entries = {
  { name = "dense MLP (d -> 4d -> d)",
    layer = nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D)) },
  { name = ("MoE E=%d k=1, no capacity limit"):format(E),
    layer = nn.MoE(D, 4 * D, { experts = E, k = 1, capacity_factor = math.huge }) },
  { name = ("MoE E=%d k=1, capacity factor 1.25"):format(E),
    layer = nn.MoE(D, 4 * D, { experts = E, k = 1, capacity_factor = 1.25 }) },
  { name = ("MoE E=%d k=2, no capacity limit"):format(E),
    layer = nn.MoE(D, 4 * D, { experts = E, k = 2, capacity_factor = math.huge }) },
  { name = ("dispatch only (E=%d k=1, identity experts)"):format(E),
    layer = nn.MoE(D, 4 * D, { experts = E, k = 1, capacity_factor = math.huge,
                               new_expert = function() return Identity() end }) },
}

local x, gy = venom.randn(T, D), venom.randn(T, D)

-- Median milliseconds of one training step of `layer` over opts.reps runs.
local function time_ms(layer)
  local function step()
    local y = layer(x)
    local loss = (y * gy):sum()
    if layer.aux_loss then loss = loss + layer.aux_loss end
    loss:backward()
    layer:zero_grad()
    collectgarbage()
  end
  step()
  local ms = {}
  for r = 1, opts.reps do
    local t0 = venom.clock()
    step()
    ms[r] = (venom.clock() - t0) * 1e3
  end
  table.sort(ms)
  return ms[math.floor(opts.reps / 2) + 1]
end

for _, e in ipairs(entries) do e.ms = {} end
for round = 1, opts.rounds do
  for _, e in ipairs(entries) do e.ms[round] = time_ms(e.layer) end
end

local function median(list)
  local s = {}
  for i, v in ipairs(list) do s[i] = v end
  table.sort(s)
  local n = #s
  return n % 2 == 1 and s[(n + 1) / 2] or (s[n / 2] + s[n / 2 + 1]) / 2
end

print(("tokens %d, d %d, hidden %d, %d rounds x %d reps"):format(T, D, 4 * D, opts.rounds, opts.reps))
print(("%-44s %10s %17s %9s"):format("layer", "ms/step", "min - max", "x dense"))
local dense = median(entries[1].ms)
for _, e in ipairs(entries) do
  local m = median(e.ms)
  local lo, hi = math.min(unpack(e.ms)), math.max(unpack(e.ms))
  local stats = e.layer.stats
  print(("%-44s %10.2f %8.2f - %6.2f %9.2f%s"):format(e.name, m, lo, hi, m / dense,
    stats and ("   (balance %.2f, dropped %.3f)"):format(stats.balance, stats.dropped_fraction) or ""))
end
