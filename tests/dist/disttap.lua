-- disttap — TAP for the tests that mpirun starts (tests/dist): every rank
-- runs the same checks; rank 0's lines are the TAP stream, the other ranks'
-- lines become comments ("# [rank 1] ok 3 - ..."), and a rank with a
-- failed check exits with status 1, which mpirun passes on, so prove sees
-- a failure on any rank.
package.path = "tests/lua/?.lua;tests/dist/?.lua;" .. package.path
local dist = require "venom.distributed"
dist.init()
if dist.rank() ~= 0 then
  local plain_print = print
  local prefix = ("# [rank %d]"):format(dist.rank())
  print = function(...) plain_print(prefix, ...) end -- luacheck: ignore (the TAP lines of this rank)
end
return require "tap"
