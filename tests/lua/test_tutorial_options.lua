-- Tutorial options that can only fail later are checked at the start: each
-- of these exits with status 2 and an `error:` line before any data loads.
package.path = (arg[0]:match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local tap = require "tap"

local exe = os.getenv("VENOM_EXE") or arg[-1]

local cases = {
  { "02-sparse-fashion-mnist.lua --mode nm --target 64:2:8", "pattern must be N:M" },
  { "02-sparse-fashion-mnist.lua --target 64:2:3", "pattern must be V:2:M" },
  { "02-sparse-fashion-mnist.lua --stop-after 9 --epochs 2", "%-%-stop%-after 9 is past %-%-epochs 2" },
  { "03-tiny-gpt.lua --stop-after 9 --steps 8", "%-%-stop%-after 9 is past %-%-steps 8" },
  { "02-sparse-fashion-mnist.lua --resume /nonexistent/run.st", "%-%-resume: cannot read" },
  { "01-fashion-mnist.lua --resume /nonexistent/run.st", "%-%-resume: cannot read" },
  { "01-fashion-mnist.lua --resume /", "is not a file" },
  { "03-tiny-gpt.lua --block-size 100000", "%-%-block%-size must be at most 4096" },
  { "03-tiny-gpt.lua --resume /nonexistent/run.st", "%-%-resume: cannot read" },
  { "03-tiny-gpt.lua --sparse 0:2:8", "%-%-sparse: .*V >= 1 and M >= 4" },
  { "03-tiny-gpt.lua --sparse 64:2:3", "%-%-sparse: .*V >= 1 and M >= 4" },
  { "03-tiny-gpt.lua --activation tanh", "%-%-activation must be gelu, relu or relu2, got tanh" },
  { "03-tiny-gpt.lua --activation --steps 2", "%-%-activation needs a value, got the option %-%-steps" },
  { "06-moe.lua --experts 2.5", "%-%-experts must be a whole number >= 2 %(top2 needs two%), got 2%.5" },
  { "06-moe.lua --experts 1", "%-%-experts must be a whole number >= 2 %(top2 needs two%), got 1" },
  { "08-cnn.lua --sparse 64:2:8 --epochs 2 --prune-end 0.4",
    "%-%-prune%-end must be after the first epoch %(> 1/2%) and at most 1, got 0%.4" },
  { "08-cnn.lua --sparse 64:2:8 --prune-end 1.5", "at most 1, got 1%.5" },
  { "08-cnn.lua --sparse 64:2:8 --prune-ramp linear", "%-%-prune%-ramp must be cubic or none, got linear" },
  { "08-cnn.lua --rewind 0.5", "%-%-rewind restarts the cosine schedule after the last pruning event; it needs %-%-sparse" },
  { "08-cnn.lua --sparse 64:2:8 --rewind 0 --no-cosine", "cannot be used with %-%-no%-cosine" },
  { "08-cnn.lua --sparse 64:2:8 --rewind -1", "%-%-rewind" },
  -- given on the command line, even at its default value, --rewind is
  -- refused where it does nothing
  { "08-cnn.lua --sparse 64:2:8 --rewind 1 --no-cosine", "cannot be used with %-%-no%-cosine" },
  { "08-cnn.lua --rewind 1", "it needs %-%-sparse" },
  { "02-sparse-fashion-mnist.lua --rewind 1 --no-cosine", "cannot be used with %-%-no%-cosine" },
  { "08-cnn.lua --sparse 64:2:8 --rewind 2", "%-%-rewind must be a number in %[0, 1%], got 2" },
  { "02-sparse-fashion-mnist.lua --rewind 1.5", "%-%-rewind must be a number in %[0, 1%], got 1%.5" },
  { "03-tiny-gpt.lua --rewind 3", "%-%-rewind must be a number in %[0, 1%], got 3" },
  -- a restart at or past the last step would quietly not happen
  { "03-tiny-gpt.lua --rewind 0.5 --prune-end 1 --steps 100", "%-%-rewind .*%(step 100%), which leaves nothing to restart" },
  { "03-tiny-gpt.lua --rewind 0.5 --steps 20 --warmup 20", "%-%-rewind restarts the cosine, which %-%-steps 20 inside the warm%-up %(20 steps%) never reaches" },
}
for _, c in ipairs(cases) do
  local p = io.popen(("'%s' tutorials/%s 2>&1; echo \"rc=$?\""):format(exe, c[1]))
  local out = p:read("*a")
  p:close()
  local rc = tonumber(out:match("rc=(%d+)\n$"))
  local first = out:match("^[^\n]*")
  tap.ok(rc == 2 and first:find("^error: ") and first:find(c[2]) and not out:find("traceback"),
         ("%s: exit 2 with a clear error at once (%s, rc %s)"):format(c[1], first, tostring(rc)))
end
tap.done()
