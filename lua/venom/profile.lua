--- venom.profile(fn, ...) → report, fn's results...: runs fn(...) with the
-- engine's per-op profiler on (engine/include/venom/profile.h) and returns
-- where the time went, per op kind (the name of its autograd node:
-- "matmul", "layer_norm", "causal_attention", "adam_step", ...).
--
--     local report = venom.profile(function()
--       for _ = 1, 10 do train_step() end
--     end)
--     print(report)            -- a table, the costliest op kinds first
--     report.rows[1].op, report.rows[1].backward_s, report.wall_s
--
-- report.rows: {op, forward_calls, forward_s, backward_calls, backward_s,
-- total_s}, sorted by total_s (seconds, wall clock). report.wall_s is fn's
-- whole time; report.other_s what no row holds (the autograd walk itself,
-- and Lua work after the last op). Backward times are those of each op's
-- backward rule; a forward time runs from the end of the previous op on
-- this thread to the end of this one, so it includes the Lua code between
-- them (and ops that record nothing). Ops on other threads are not seen.
-- If fn fails, the profiler stops and the error propagates. Calls do not
-- nest: venom.profile inside fn is an error (the engine keeps one set of
-- counts per thread, which the inner call would clear and stop).
local core = require "venom.core"

local Report = {}
Report.__index = Report

local function pack(ok, ...) return ok, { n = select("#", ...), ... } end

local active = false -- a venom.profile call is running (on this Lua state)

local function profile(fn, ...)
  if type(fn) ~= "function" then
    error(("profile: expected a function, got %s"):format(type(fn)), 2)
  end
  if active then
    error("profile: already profiling (venom.profile calls do not nest; profile the outer "
      .. "function only)", 2)
  end
  local start = core.clock()
  active = true
  core.profile_start()
  local ok, res = pack(pcall(fn, ...))
  core.profile_stop()
  active = false
  local wall = core.clock() - start
  if not ok then error(res[1], 0) end
  local rows, sum = core.profile_entries(), 0
  for _, r in ipairs(rows) do
    r.total_s = r.forward_s + r.backward_s
    sum = sum + r.total_s
  end
  table.sort(rows, function(a, b) return a.total_s > b.total_s end)
  local report = setmetatable({ rows = rows, wall_s = wall, other_s = wall - sum }, Report)
  return report, unpack(res, 1, res.n)
end

--- report:format([n]) → the report as a text table (the n costliest op
-- kinds, all by default): calls and milliseconds forward and backward, and
-- each kind's share of the wall time.
function Report:format(n)
  if n ~= nil then
    require("venom.util").check_int(n, "n", { min = 0, who = "profile report:format" })
  end
  local lines = { ("%-24s %8s %10s %8s %10s %10s %6s"):format("op", "fwd n", "fwd ms",
    "bwd n", "bwd ms", "total ms", "%") }
  local function pct(s) return 100 * s / math.max(self.wall_s, 1e-12) end
  for i, r in ipairs(self.rows) do
    if n and i > n then break end
    lines[#lines + 1] = ("%-24s %8d %10.1f %8d %10.1f %10.1f %6.1f"):format(r.op,
      r.forward_calls, r.forward_s * 1e3, r.backward_calls, r.backward_s * 1e3, r.total_s * 1e3,
      pct(r.total_s))
  end
  for _, r in ipairs({ { "(outside ops)", self.other_s }, { "wall", self.wall_s } }) do
    lines[#lines + 1] = ("%-24s %50.1f %6.1f"):format(r[1], r[2] * 1e3, pct(r[2]))
  end
  return table.concat(lines, "\n")
end

Report.__tostring = Report.format

return profile
