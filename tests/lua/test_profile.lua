-- venom.profile: per-op forward/backward counts of a small graph, fn's
-- results passed through, errors propagated with the profiler stopped, and
-- the report's table.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"

local x = venom.randn(8, 16)
local w = venom.randn(16, 4)
w:requires_grad_(true)

local report, a, b = venom.profile(function(k)
  for _ = 1, k do
    local loss = x:matmul(w):gelu():sum()
    loss:backward()
  end
  return "done", 42
end, 3)
tap.is(a, "done", "profile: fn's first result")
tap.is(b, 42, "profile: fn's second result")

local by = {}
for _, r in ipairs(report.rows) do by[r.op] = r end
tap.ok(by.matmul and by.gelu and by.sum_all, "profile: a row per op kind (matmul, gelu, sum_all)")
tap.is(by.matmul and by.matmul.forward_calls, 3, "profile: matmul ran forward 3 times")
tap.is(by.matmul and by.matmul.backward_calls, 3, "profile: matmul's backward ran 3 times")
tap.is(by.gelu and by.gelu.backward_calls, 3, "profile: gelu's backward ran 3 times")
local sum, sorted, nonneg = 0, true, true
for i, r in ipairs(report.rows) do
  sum = sum + r.total_s
  nonneg = nonneg and r.forward_s >= 0 and r.backward_s >= 0
  if i > 1 and r.total_s > report.rows[i - 1].total_s then sorted = false end
end
tap.ok(nonneg, "profile: times are >= 0")
tap.ok(sorted, "profile: rows sorted by total time, largest first")
tap.ok(sum <= report.wall_s + 1e-6, "profile: the rows add up to no more than the wall time")
tap.ok(tostring(report):match("matmul") and tostring(report):match("wall"),
  "profile: tostring draws the table")
tap.is(select(2, report:format(1):gsub("\n", "\n")), 3, "profile: format(1) keeps one op row")
tap.error_like(function() report:format("x") end, "format: n must be a non%-negative integer, got",
  "profile: format(n) refuses a non-number n by name")

tap.error_like(function() venom.profile(function() error("boom", 0) end) end, "^boom$",
  "profile: fn's error propagates")
-- the failed run stopped the profiler: an empty run counts nothing
local empty = venom.profile(function() end)
tap.is(#empty.rows, 0, "profile: nothing counted after an error and in an empty run")
-- the profiler is really off after the error: ops outside profile add nothing
local core = require "venom.core"
local function matmuls()
  for _, r in ipairs(core.profile_entries()) do if r.op == "matmul" then return r.forward_calls end end
  return 0
end
venom.profile(function() x:matmul(w) end)
local before = matmuls()
x:matmul(w)
tap.is(matmuls(), before, "profile: the profiler is off after the run")
pcall(venom.profile, function() x:matmul(w); error("boom", 0) end)
before = matmuls()
x:matmul(w)
tap.is(matmuls(), before, "profile: the profiler is off after fn's error")

-- nested calls are refused, and the outer profile keeps counting
local inner_ok, inner_err
local outer = venom.profile(function()
  x:matmul(w)
  inner_ok, inner_err = pcall(venom.profile, function() x:matmul(w) end)
  x:matmul(w)
end)
tap.ok(not inner_ok and tostring(inner_err):match("already profiling"),
  "profile: a nested call is refused with a clear error")
local outer_by = {}
for _, r in ipairs(outer.rows) do outer_by[r.op] = r end
tap.is(outer_by.matmul and outer_by.matmul.forward_calls, 2,
  "profile: the outer profile counts the ops before and after the refused nested call")
local again = venom.profile(function() x:matmul(w) end)
tap.is(#again.rows, 1, "profile: usable again after a refused nested call")
tap.error_like(function() venom.profile(42) end, "profile: expected a function, got number",
  "profile: a non-function is refused")
tap.done()
