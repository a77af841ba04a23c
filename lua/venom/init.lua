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

--- x:type() → the Torch7 name of x's type: "venom.FloatTensor" (f32),
-- "venom.LongTensor" (i64), "venom.IntTensor" (i32), "venom.ByteTensor"
-- (u8), "venom.HalfTensor" (f16), "venom.BFloat16Tensor" (bf16), with
-- "venom.cuda." in place of "venom." on CUDA. x:type(name) converts: to
-- the dtype and device such a name says ("venom.cuda.FloatTensor"), or to
-- a dtype on x's device (x:type("i64")); x itself when it is that already.
venom.type = core.type

--- venom.cuda: the CUDA device.
--   is_available()  → true when a CUDA device and driver are present and
--                     venom was built with CUDA (VENOM_CUDA, see README)
--   device_count()  → number of devices (venom uses the first)
--   device_name()   → e.g. "NVIDIA H200 (sm_90, 139.8 GiB)"
--   synchronize()   → wait for queued GPU work (kernels run asynchronously;
--                     t:item() and copies to the CPU wait by themselves)
--   memory_stats()  → {in_use = bytes, cached = bytes} of the caching allocator
--   empty_cache()   → give cached GPU memory back to the driver
--   set_allow_tf32(bool) → let f32 matmuls use TF32 tensor cores (off by
--                     default); returns the previous setting
venom.cuda = {
  is_available = core.cuda_is_available,
  device_count = core.cuda_device_count,
  device_name = core.cuda_device_name,
  synchronize = core.cuda_synchronize,
  memory_stats = core.cuda_memory_stats,
  empty_cache = core.cuda_empty_cache,
  set_allow_tf32 = core.cuda_set_allow_tf32,
}

--- venom.autocast(dtype, fn, ...) → fn(...)'s results, with matmul, linear
-- and the V:N:M layers on CUDA tensors computed from `dtype` ("bf16" or
-- "f16"; V:N:M layers use bf16 unless it is "f16") operands
-- with f32 accumulation while fn runs (mixed precision, Micikevicius et al.
-- 2018): parameters, gradients and all other ops stay f32, and the backward
-- of those products runs at the same precision even outside fn. The
-- previous setting comes back when fn returns or fails. CPU ops are not
-- affected. venom.set_autocast(dtype | nil) sets it for the rest of the
-- thread instead and returns the previous dtype ("f32" = off).
function venom.autocast(dtype, fn, ...)
  if type(fn) ~= "function" then
    error(("autocast: expected (dtype, function), got a %s for the function"):format(type(fn)), 2)
  end
  local prev = core.set_autocast(dtype)
  local res = { pcall(fn, ...) }
  core.set_autocast(prev)
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, table.maxn(res))
end

local submodules = { nn = true, optim = true, data = true, util = true, prune = true,
                     checkpoint = true, sparse = true, plot = true, metrics = true, help = true }

return setmetatable(venom, {
  __index = function(t, k)
    if submodules[k] then
      local m = require("venom." .. k)
      rawset(t, k, m)
      return m
    end
  end,
})
