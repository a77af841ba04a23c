-- gpucheck — helpers shared by the GPU tests (tests/gpu/test_*.lua): compare a
-- result computed on the CUDA device with the CPU reference.
--
-- Error measure: max|gpu − cpu| / max(max|cpu|, tiny), over the whole tensor,
-- so one tolerance fits every op whatever the scale of its output. The
-- tolerances are per kind of computation (see M.TOL); integer results and
-- conversions must be bit-identical.
local tap = require "tap"
local venom = require "venom"

local M = {}

M.TOL = {
  f32 = 1e-5,    -- elementwise f32 (GPU libm may differ from glibc's by a few ulp)
  reduce = 1e-5, -- sums/means in another order; softmax; losses
  gemm = 1e-5,   -- f32 GEMM without TF32 (cuBLAS vs OpenBLAS: another summation order)
  tf32 = 2e-3,   -- TF32 tensor cores: 10-bit mantissa inputs
  bf16 = 2e-2,   -- autocast bf16: 7-bit mantissa inputs, f32 accumulation
  f16 = 2e-3,    -- autocast f16: 10-bit mantissa inputs, f32 accumulation
  chain = 1e-4,  -- gradients or parameters after a chain of f32 ops / several steps
}

local INT = { i32 = true, i64 = true, u8 = true }

function M.shape_str(t) return "(" .. table.concat(t:shape(), ", ") .. ")" end

--- Relative error of two f32 CPU tensors of one shape (NaN when either
-- holds a NaN: max propagates it, so the comparison with a tolerance fails).
function M.rel_err(g, c)
  if c:numel() == 0 then return 0 end
  local d = (g - c):abs():max():item()
  local m = c:abs():max():item()
  return d / math.max(m, 1e-30)
end

-- Shape, dtype and device of gpu against cpu; false and a diagnostic if off.
local function same_kind(gpu, cpu, name)
  if not venom.is_tensor(gpu) then
    tap.ok(false, name)
    tap.diag("got a %s, not a tensor", type(gpu))
    return false
  end
  local why
  if gpu:device() ~= "cuda" then
    why = "the result is on " .. gpu:device() .. ", expected cuda"
  elseif M.shape_str(gpu) ~= M.shape_str(cpu) then
    why = ("shape %s, the CPU gives %s"):format(M.shape_str(gpu), M.shape_str(cpu))
  elseif gpu:dtype() ~= cpu:dtype() then
    why = ("dtype %s, the CPU gives %s"):format(gpu:dtype(), cpu:dtype())
  end
  if why then
    tap.ok(false, name)
    tap.diag("%s", why)
    return false
  end
  return true
end

--- gpu (a CUDA tensor) against cpu (the CPU reference) within the relative
-- tolerance tol; integer dtypes must match exactly.
function M.close(gpu, cpu, tol, name)
  if not same_kind(gpu, cpu, name) then return false end
  local g = gpu:cpu()
  if INT[cpu:dtype()] then
    local same = cpu:numel() == 0 or g:eq(cpu):sum():item() == cpu:numel()
    if not tap.ok(same, name) then tap.diag("gpu %s\ncpu %s", tostring(g), tostring(cpu)) end
    return same
  end
  local err = M.rel_err(g:float(), cpu:float())
  local ok = tap.ok(err <= tol, name)
  if not ok then
    tap.diag("relative error %g > %g\ngpu %s\ncpu %s", err, tol, tostring(g), tostring(cpu))
  end
  return ok
end

local function flat(t)
  if t:dim() == 0 then return { t:item() } end
  return t:reshape(-1):totable()
end

--- Bit-identical values (NaN equal to NaN; −0 equal to 0), for conversions.
-- Floats are compared as f32 (every bf16/f16 value is one), integers as
-- numbers (exact up to 2^53, which the tests stay below unless they compare
-- with M.close, which uses eq).
function M.same(gpu, cpu, name)
  if not same_kind(gpu, cpu, name) then return false end
  local g = gpu:cpu()
  local float = not INT[cpu:dtype()]
  local a = flat(float and g:float() or g)
  local b = flat(float and cpu:float() or cpu)
  for i = 1, #b do
    local x, y = a[i], b[i]
    if not (x == y or (x ~= x and y ~= y)) then
      tap.ok(false, name)
      tap.diag("element %d: gpu %.17g, cpu %.17g", i, x, y)
      return false
    end
  end
  return tap.ok(#a == #b, name)
end

--- A CPU tensor of shape ... with no values near 0 (|x| ≥ 0.1), for the
-- elementwise tests: random N(0, 1) shifted away from zero by sign.
function M.randn_nz(...)
  local x = venom.randn(...)
  return x + x:ge(0):float() * 0.1 - x:lt(0):float() * 0.1
end

--- Uniform on [lo, hi) on the CPU.
function M.uniform(lo, hi, ...)
  return venom.rand(...) * (hi - lo) + lo
end

return M
