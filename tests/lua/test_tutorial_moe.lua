-- Tutorial 06 (MoE gates on a tiny GPT), a short run on tinyshakespeare:
-- the four models train on the same batches and print their evaluations;
-- the DTS gate starts dense and routes fewer experts per token as its
-- temperature falls; the summary table has a row per model. Usage errors
-- exit with status 2. The run is skipped when ../shared/data/tinyshakespeare
-- is not there.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"

local exe = os.getenv("VENOM_EXE") or arg[-1]
local TEXT = "../shared/data/tinyshakespeare/input.txt"

local function tutorial(args)
  return testutil.run(("'%s' tutorials/06-moe.lua %s"):format(exe, args))
end

local out, rc = tutorial("--models dense,hash")
tap.ok(rc == 2 and out:find("^error: %-%-models: unknown model hash") ~= nil, "--models hash: usage error, status 2")
out, rc = tutorial("--every 3 --n-layer 2")
tap.ok(rc == 2 and out:find("no block would be an MoE") ~= nil, "--every > --n-layer: usage error, status 2")

local f = io.open(TEXT, "rb")
if not f then
  tap.skip(TEXT .. " is not there", 5)
  tap.done()
  return
end
f:close()

out, rc = tutorial("--text " .. TEXT .. " --steps 16 --eval-every 8 --n-embd 32 --block-size 32 --batch-size 8 --experts 4")
tap.is(rc, 0, "16 steps of each model: exit status 0")
if rc ~= 0 then tap.diag("%s", out) end
local vals = {}
for name, v in out:gmatch("\n(%a+%d?) +step +%d+  val loss ([%d.]+)") do
  vals[name] = vals[name] or {}
  vals[name][#vals[name] + 1] = tonumber(v)
end
local ok = true
for _, name in ipairs({ "dense", "switch", "top2", "dts" }) do
  ok = ok and vals[name] and #vals[name] == 2 and vals[name][2] < vals[name][1] and vals[name][2] < math.log(256)
end
tap.ok(ok, "each model prints two evaluations and its validation loss falls below chance (ln 256)")
local per_token = {}
for v in out:gmatch("dts +step +%d+  val loss [%d.]+  experts/token ([%d.]+)") do per_token[#per_token + 1] = tonumber(v) end
tap.ok(#per_token == 2 and per_token[1] > per_token[2] and per_token[2] >= 1,
  ("DTS: fewer experts per token as the temperature falls (%s)"):format(table.concat(per_token, " → ")))
tap.ok(out:find("top2 +step +16  val loss [%d.]+  experts/token 2%.00") ~= nil, "top2: two experts per token")
local rows = 0
for _ in out:gmatch("\n%a+%d? +[%d.]+ +[%d-]+ +%d+ ") do rows = rows + 1 end
tap.is(rows, 4, "the summary has a row per model")
tap.done()
