-- bench/step_ops.lua — the MLP step's work besides its GEMMs, one piece at a
-- time: relu over n floats, the loader's normalisation of a 128 × 784 u8
-- batch (float(), mul_, sub_), and one AdamW step over n parameters (28
-- bytes each: read p, g, m, v; write p, m, v), with the bandwidth that implies.
--
--     venom bench/step_ops.lua               # run it again with OMP_NUM_THREADS=1 to compare
--
-- Times are the minimum and median of many calls, in µs (relu, normalise)
-- or ns per parameter (AdamW). Prints a table; never fails on time.
local venom = require "venom"
local optim = require "venom.optim"
local clock = venom.clock

local function stats(t)
  table.sort(t)
  return t[1], t[math.floor((#t + 1) / 2)]
end

print(("threads %s, load average %s"):format(os.getenv("OMP_NUM_THREADS") or "default",
  (io.open("/proc/loadavg"):read("*l"):match("^(%S+ %S+ %S+)"))))
print(("%-34s %10s %10s"):format("op", "min", "median"))
for _, n in ipairs({ 65536, 131072, 262144, 524288, 1048576 }) do
  local x, t = venom.randn(n), {}
  for r = 1, 300 do
    local t0 = clock()
    local y = x:relu()
    t[r] = clock() - t0
    y:free()
  end
  local lo, med = stats(t)
  print(("%-34s %8.1f µs %8.1f µs"):format(("relu, %d floats"):format(n), lo * 1e6, med * 1e6))
end

local u8, t = venom.randint(0, 256, 128, 784):type("u8"), {}
for r = 1, 400 do
  local t0 = clock()
  local x = u8:float()
  x:mul_(1 / (255 * 0.353))
  x:sub_(0.286 / 0.353)
  t[r] = clock() - t0
  x:free()
end
local lo, med = stats(t)
print(("%-34s %8.1f µs %8.1f µs"):format("normalise a 128 x 784 u8 batch", lo * 1e6, med * 1e6))

for _, n in ipairs({ 262144, 1863690, 16777216 }) do -- in L2; the MLP's; from DRAM
  local p = venom.randn(n):requires_grad_(true)
  p.grad = venom.randn(n)
  local opt = optim.AdamW({ p }, { lr = 1e-3 })
  opt:step()
  local reps, ts = math.max(3, math.floor(1e8 / n)), {}
  for r = 1, 5 do
    local t0 = clock()
    for _ = 1, reps do opt:step() end
    ts[r] = (clock() - t0) / reps
  end
  local best, mid = stats(ts)
  print(("%-34s %8.3f ns %8.3f ns   %.1f GB/s at the min"):format(
    ("AdamW, %d parameters (per one)"):format(n), best / n * 1e9, mid / n * 1e9, 28 * n / best / 1e9))
  p:free(); opt = nil
end
