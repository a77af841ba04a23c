-- safetensors interoperability: a file written by an independent writer (a
-- few lines of Python with struct and json) loads with the values it wrote,
-- and a file written by venom passes an independent reader's checks of
-- every offset and decodes to the same values. Skipped without python3.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"

local function succeeded(r) return r == 0 or r == true end

if not succeeded(os.execute("python3 -c 'import json, struct' >/dev/null 2>&1")) then
  tap.skip("python3 is not installed", 1)
  tap.done()
  return
end

local dir = testutil.tmpdir()

local function python(script, file)
  local p = io.popen(("python3 tests/python/%s '%s' 2>&1; echo \"rc=$?\""):format(script, file))
  local out = p:read("*a")
  p:close()
  return out:gsub("rc=%d+\n$", ""), tonumber(out:match("rc=(%d+)\n$"))
end

-- The line check_safetensors.py prints for a tensor.
local function describe(name, t)
  local flat = t:reshape(-1):totable()
  local fmt = t:dtype() == "f32" and "%.9g" or "%.0f"
  local out = { name, t:dtype():upper(), table.concat(t:shape(), "x") }
  for _, v in ipairs(flat) do out[#out + 1] = fmt:format(v) end
  return table.concat(out, " ")
end

-- Python writes, venom reads -------------------------------------------------------
do
  local file = dir .. "/python.safetensors"
  local out, rc = python("write_safetensors.py", file)
  tap.is(rc, 0, "the Python writer ran" .. (rc ~= 0 and ": " .. out or ""))
  local ts, meta = venom.load(file)
  local f32 = function(x) return venom.tensor({ x }):totable()[1] end -- rounded to f32
  local want = {
    weight = { "f32", "2x3", { { 1.5, -2.25, 0 }, { f32(3e-5), -1e10, 7 } } },
    counts = { "i32", "2x2", { { -7, 0 }, { 2 ^ 31 - 1, -2 ^ 31 } } },
    ids = { "i64", "4", { -2 ^ 53, -1, 0, 2 ^ 40 } },
    mask = { "u8", "5", { 0, 1, 128, 254, 255 } },
    scalar = { "f32", "", 0.5 },
    nothing = { "f32", "0x4", {} },
  }
  for name, w in pairs(want) do
    local t = ts[name]
    local got = t and { t:dtype(), table.concat(t:shape(), "x"),
                        t:dim() == 0 and t:item() or t:totable() }
    local ok = got and got[1] == w[1] and got[2] == w[2]
    if ok and type(w[3]) == "number" then
      ok = got[3] == w[3]
    elseif ok then
      for i, row in ipairs(w[3]) do
        if type(row) == "table" then
          for j, v in ipairs(row) do ok = ok and got[3][i][j] == v end
        else
          ok = ok and got[3][i] == row
        end
      end
    end
    tap.ok(ok, ("Python-written '%s' loads as %s %s with its values"):format(name, w[1], w[2]))
  end
  tap.is(meta.format, "pt", "Python-written metadata: format")
  tap.is(meta.writer, "python struct+json", "Python-written metadata: writer")
end

-- venom writes, Python reads ---------------------------------------------------------
do
  local file = dir .. "/venom.safetensors"
  local ts = {
    ["layers.1.weight"] = venom.tensor({ { 0.1, -2.5, 3 }, { 1e-30, 6e20, -0.0 } }),
    ["layers.1.bias"] = venom.tensor({ 1, 2 }),
    steps = venom.tensor({ -2 ^ 53, 0, 2 ^ 53 }, "i64"),
    labels = venom.tensor({ { -2 ^ 31, 7 } }, "i32"),
    pixels = venom.tensor({ 0, 17, 255 }, "u8"),
    scalar = venom.full({}, 2.5),
    empty = venom.zeros({ 3, 0 }),
    transposed = venom.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }):t(),
  }
  venom.save(file, ts, { epoch = 12, note = "x y" })
  local out, rc = python("check_safetensors.py", file)
  tap.is(rc, 0, "Python's json + struct accept every offset of a venom file"
    .. (rc ~= 0 and ": " .. out or ""))
  local lines = {}
  for name, t in pairs(ts) do lines[#lines + 1] = describe(name, t) end
  table.sort(lines)
  lines[#lines + 1] = "meta epoch 12"
  lines[#lines + 1] = "meta note x y"
  local want = table.concat(lines, "\n") .. "\n"
  tap.is(out, want, "Python decodes the same names, dtypes, shapes, values and metadata")
end

os.execute("rm -rf '" .. dir .. "'")
tap.done()
