-- tap.lua — a tiny TAP producer for the Lua tests (run by `prove`).
local tap = { count = 0, failed = 0 }

function tap.diag(fmt, ...) print("# " .. (fmt:format(...):gsub("\n", "\n# "))) end

function tap.plan(n) tap.planned = n; print("1.." .. n) end

function tap.ok(cond, name)
  tap.count = tap.count + 1
  print(("%s %d - %s"):format(cond and "ok" or "not ok", tap.count, name or ""))
  if not cond then
    tap.failed = tap.failed + 1
    local where = debug.traceback("", 2):match("\n%s*([^\n]*/test_[^\n]*)")
    tap.diag("failed at %s", where or "?")
  end
  return cond
end

function tap.is(got, want, name)
  local ok = tap.ok(got == want, name)
  if not ok then tap.diag("got:  %s\nwant: %s", tostring(got), tostring(want)) end
  return ok
end

function tap.near(got, want, tol, name)
  local ok = tap.ok(type(got) == "number" and math.abs(got - want) <= tol, name)
  if not ok then tap.diag("got %s, want %s within %g", tostring(got), tostring(want), tol) end
  return ok
end

-- fn() must raise an error whose message matches the Lua pattern.
function tap.error_like(fn, pattern, name)
  local ok, err = pcall(fn)
  local good = tap.ok(not ok and tostring(err):find(pattern) ~= nil, name)
  if not good then tap.diag("%s\nwant an error matching: %s", ok and "no error" or "error: " .. tostring(err), pattern) end
  return good
end

function tap.skip(reason, n)
  for _ = 1, n or 1 do tap.count = tap.count + 1; print(("ok %d # SKIP %s"):format(tap.count, reason)) end
end

-- Ends the run: prints the plan if none was given; exit status 1 on failure.
function tap.done()
  if not tap.planned then print("1.." .. tap.count) end
  if tap.failed > 0 then os.exit(1) end
end

return tap
