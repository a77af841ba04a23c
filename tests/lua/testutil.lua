-- testutil — small helpers shared by the Lua tests.
local M = {}

--- Largest |a − b| over two equally nested tables of numbers (math.huge if
-- their shapes differ).
function M.max_diff(a, b)
  if type(a) == "number" then return math.abs(a - b) end
  local m = 0
  for i = 1, math.max(#a, #b) do
    if a[i] == nil or b[i] == nil then return math.huge end
    m = math.max(m, M.max_diff(a[i], b[i]))
  end
  return m
end

--- The bytes of a file; a missing file is an error (so two missing files
-- never compare equal).
function M.slurp(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

--- A fresh temporary directory.
function M.tmpdir()
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p '" .. dir .. "'")
  return dir
end

--- Runs a shell command line with stderr joined to stdout; returns the
-- output and the exit status.
function M.run(cmd)
  local p = io.popen(cmd .. " 2>&1; echo \"rc=$?\"")
  local out = p:read("*a")
  p:close()
  return out, tonumber(out:match("rc=(%d+)\n$"))
end

--- Whether the Fashion-MNIST IDX files are installed; if not, prints the
-- TAP skip line (for tests that run a tutorial on them).
function M.have_fashion_mnist(tap)
  local data = require "venom.data"
  local f = io.open(data.FASHION_MNIST_ROOT .. "/train-labels-idx1-ubyte.gz", "rb")
  if f then f:close() return true end
  tap.skip("dataset-fashion-mnist is not installed", 1)
  tap.done()
  return false
end

--- Runs `venom <script> <args>` (the venom running this test, or
-- $VENOM_EXE) and returns its output (stdout and stderr) and exit status.
function M.run_script(script, args)
  local exe = os.getenv("VENOM_EXE") or arg[-1]
  return M.run(("'%s' %s %s"):format(exe, script, args))
end

--- A small text file for the tutorials' tests (200 numbered lines); its path.
function M.text_file()
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  for i = 1, 200 do f:write(("line %d: the quick brown fox jumps over the lazy dog.\n"):format(i)) end
  f:close()
  return path
end

return M
