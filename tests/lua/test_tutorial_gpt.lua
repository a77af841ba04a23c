-- Tutorial 3 on a small text file with a tiny model: a dense run and a
-- --sparse run succeed, report the losses, prune every MLP projection to
-- the pattern and print a sample; a bad option exits with status 2 and a
-- missing text file with status 1 and its name.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"

local exe = os.getenv("VENOM_EXE") or arg[-1]

local tmp = os.tmpname()
local f = assert(io.open(tmp, "wb"))
for i = 1, 200 do f:write(("line %d: the quick brown fox jumps over the lazy dog.\n"):format(i)) end
f:close()

local function tutorial(args)
  local p = io.popen(("'%s' tutorials/03-tiny-gpt.lua --steps 12 --batch-size 4 --block-size 16 "
    .. "--n-layer 2 --n-head 2 --n-embd 16 --eval-every 6 --eval-batches 2 --sample 20 %s 2>&1; "
    .. "echo \"rc=$?\""):format(exe, args))
  local out = p:read("*a")
  p:close()
  return out, tonumber(out:match("rc=(%d+)\n$"))
end

local out, rc = tutorial("--text " .. tmp)
tap.is(rc, 0, "dense run" .. (rc ~= 0 and ": " .. out or ""))
tap.ok(out:find("step     6  train loss %d") ~= nil and out:find("step    12  train loss %d") ~= nil,
  "train and val losses at steps 6 and 12")
tap.ok(out:find("final val loss %d") ~= nil and out:find("tokens/s") ~= nil
  and out:find("--- sample ---\nThe ") ~= nil, "final loss, tokens/s and a sample after the prompt")

out, rc = tutorial("--text " .. tmp .. " --sparse 16:2:8")
tap.is(rc, 0, "--sparse run" .. (rc ~= 0 and ": " .. out or ""))
local pruned = 0
for _ in out:gmatch("blocks%.%d%.mlp%.%a+ +16:2:8 ") do pruned = pruned + 1 end
tap.is(pruned, 4, "--sparse 16:2:8: the report lists the 4 MLP projections at 16:2:8")

out, rc = tutorial("--text " .. tmp .. " --sparse 2:4")
tap.is(rc, 2, "--sparse 2:4 (not V:2:M) exits with status 2")
out, rc = tutorial("--text " .. tmp .. ".missing")
tap.ok(rc == 1 and out:find("cannot open .*missing") ~= nil,
  "a missing text file exits with status 1 and is named")
os.remove(tmp)
tap.done()
