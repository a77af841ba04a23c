--- venom — a sparse training engine driven from Lua.
--
--     local venom = require "venom"
--     local x = venom.randn(64, 784)
--
-- The module holds the tensor functions of the C binding (venom.core) and
-- loads its Lua submodules on first use (venom.nn, venom.optim, venom.data,
-- venom.util, venom.prune, venom.checkpoint, venom.sparse), so a submodule
-- that fails to load only breaks code that uses it.
local core = require "venom.core"

local venom = {}
for k, v in pairs(core) do
  venom[k] = v
end
venom.core = core

local submodules = { nn = true, optim = true, data = true, util = true, prune = true,
                     checkpoint = true, sparse = true }

return setmetatable(venom, {
  __index = function(t, k)
    if submodules[k] then
      local m = require("venom." .. k)
      rawset(t, k, m)
      return m
    end
  end,
})
