-- disttap — TAP for the tests that mpirun starts (tests/dist): every rank
-- runs the same checks; rank 0's lines are the TAP stream on stdout, the
-- other ranks' failures and diagnostics go to stderr as "[rank 1] not ok
-- 3 - ..." (shown by prove, never parsed; their passes are left out), and a rank with a failed check exits with status 1, which
-- mpirun passes on, so prove sees a failure on any rank. Why stderr: mpirun
-- merges the ranks' stdout pipes in whatever chunks it reads, so a line of
-- rank 1 could swallow the start of one of rank 0's ("Tests out of
-- sequence" in CI); each stderr line here is one unbuffered write.
package.path = "tests/lua/?.lua;tests/dist/?.lua;" .. package.path
local dist = require "venom.distributed"
dist.init()
if dist.rank() ~= 0 then
  local prefix = ("[rank %d] "):format(dist.rank())
  print = function(...) -- luacheck: ignore (the TAP lines of this rank)
    local parts = { ... }
    if tostring(parts[1]):match("^ok ") or tostring(parts[1]):match("^1%.%.") then return end
    for i = 1, select("#", ...) do parts[i] = tostring(parts[i]) end
    io.stderr:write(prefix .. table.concat(parts, "\t") .. "\n")
  end
end
return require "tap"
