-- bench/moe_placement.lua — FlexMoE placement on 2 ranks: an expert-parallel
-- nn.MoE layer (E experts, k = 1, no capacity limit, no balance loss)
-- whose router is skewed towards experts 1..3 (all on rank 0 in the
-- initial placement, experts in contiguous blocks) trains for --steps
-- AdamW steps, once with the placement fixed, once with
-- moe:rebalance(opt, {expand = false}) every --every steps (Migrate moves
-- only) and once with moe:rebalance(opt) (FlexMoE's Expand, Shrink and
-- Migrate: hot experts get replicas). Rounds alternate the entries (A B C
-- A B C ...) so that a machine shared with other jobs slows all alike.
--
--     OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 mpirun -np 2 venom bench/moe_placement.lua \
--       [--rounds 3] [--steps 40] [--every 10] [--tokens 1024] [--d 128] [--experts 8]
--
-- Prints, per entry: the balance ratio (rows processed by the busiest
-- rank / the mean; 1 is perfect) averaged over the steps, over the last
-- half of the steps, the moves made (last round: Expand, Shrink, Migrate),
-- the replicas at the end, and tokens/s (global
-- tokens per step / the slowest rank's seconds per step) as the median
-- and min–max over rounds; then the balance ratio per window of --every
-- steps. Never fails on time.
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local util = require "venom.util"
local dist = require "venom.distributed"

-- A bad option prints "error: <message>" and exits with status 2 (util.parse_cli).
local opts = util.parse_cli(arg, { rounds = 3, steps = 40, every = 10, tokens = 1024, d = 128,
  experts = 8 }, {
  rounds = "alternating rounds (each entry once per round)",
  steps = "training steps per run",
  every = "steps between rebalances (the FlexMoE entry)",
  tokens = "tokens per step in all (each rank takes its share)",
  d = "model width (the experts' hidden width is 4·d)",
  experts = "experts of the MoE layer",
}, function(o)
  for _, k in ipairs({ "rounds", "steps", "every", "tokens", "d" }) do util.check_arg_int(o, k, 1) end
  util.check_arg_int(o, "experts", 2)
end)
dist.init()
local P, r = dist.world_size(), dist.rank()
if r ~= 0 then print = function() end end -- luacheck: ignore (rank 0 prints)
local D, E, T = opts.d, opts.experts, opts.tokens / P

-- One run: returns the per-step balance ratios, the moves ("E/S/M"
-- counts), the experts' replica count at the end and seconds/step.
local function run(rebalance)
  venom.manual_seed(1)
  local moe = nn.MoE(D, 4 * D, { experts = E, k = 1, capacity_factor = math.huge, alpha = 0,
                                 expert_parallel = true })
  local head = nn.Linear(D, D)
  local model = nn.Sequential(moe, head)
  local u = venom.randn(1, D) -- the data's mean direction; experts 1..3 prefer it
  venom.no_grad(function()
    for e = 1, 3 do moe.router.weight:narrow(1, e, 1):add_(u * 0.5) end
  end)
  local dp = dist.DataParallel(model)
  local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
  venom.manual_seed(100 + r)
  local ratios, kinds = {}, { expand = 0, shrink = 0, migrate = 0 }
  dist.barrier()
  local t0 = venom.clock()
  for step = 1, opts.steps do
    local x = venom.randn(T, D) + u
    local y = venom.randn(T, D)
    opt:zero_grad()
    local loss = (dp(x) - y):pow(2):mean()
    loss:backward()
    opt:step()
    ratios[step] = moe.stats.rank_balance
    if rebalance and step % opts.every == 0 then
      for _, mv in ipairs(moe:rebalance(opt, rebalance).moves) do
        kinds[mv.kind] = kinds[mv.kind] + 1
      end
    end
  end
  local seconds = dist.all_reduce_number(venom.clock() - t0, "max") / opts.steps
  dp:free()
  local replicas = 0
  for e = 1, E do replicas = replicas + #moe.replicas[e] end
  return ratios, ("%d/%d/%d"):format(kinds.expand, kinds.shrink, kinds.migrate), replicas, seconds
end

local entries = { { name = "fixed placement", rebalance = false },
                  { name = ("Migrate only, every %d steps"):format(opts.every),
                    rebalance = { expand = false } },
                  { name = ("Expand/Shrink/Migrate, every %d"):format(opts.every),
                    rebalance = {} } }
for _ = 1, opts.rounds do
  for _, en in ipairs(entries) do
    local ratios, moves, replicas, seconds = run(en.rebalance)
    en.ratios, en.moves, en.replicas = ratios, moves, replicas
    en.rates = en.rates or {}
    en.rates[#en.rates + 1] = opts.tokens / seconds
  end
end

local function mean(list, from)
  local s, n = 0, 0
  for i = from or 1, #list do s, n = s + list[i], n + 1 end
  return s / n
end

print(("%d ranks, %d experts, d = %d, %d tokens per step, %d steps, %d rounds")
  :format(P, E, D, opts.tokens, opts.steps, opts.rounds))
print(("%-34s %12s %14s %8s %9s %22s"):format("entry", "balance", "balance (2nd", "moves",
  "experts", "tokens/s median"))
print(("%-34s %12s %14s %8s %9s %22s"):format("", "(all steps)", "half)", "E/S/M", "held", "(min-max)"))
for _, en in ipairs(entries) do
  table.sort(en.rates)
  print(("%-34s %12.3f %14.3f %8s %9d %9.0f (%.0f-%.0f)"):format(en.name, mean(en.ratios),
    mean(en.ratios, math.floor(opts.steps / 2) + 1), en.moves, en.replicas,
    en.rates[math.floor((#en.rates + 1) / 2)], en.rates[1], en.rates[#en.rates]))
end
print()
print(("balance ratio per window of %d steps (the last round):"):format(opts.every))
for _, en in ipairs(entries) do
  local cells = {}
  for from = 1, opts.steps, opts.every do
    local s, n = 0, 0
    for i = from, math.min(from + opts.every - 1, opts.steps) do s, n = s + en.ratios[i], n + 1 end
    cells[#cells + 1] = ("%.3f"):format(s / n)
  end
  print(("%-34s %s"):format(en.name, table.concat(cells, " ")))
end
