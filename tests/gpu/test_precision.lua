-- Reduced precision on CUDA: autocast bf16/f16 matmul and linear (forward
-- and backward) against f32 on the CPU, TF32, 16-bit tensors on the device,
-- and checkpoints of CUDA tensors (the same bytes as of their CPU copies).
local venom = require "venom"
if not venom.cuda.is_available() then print("1..0 # SKIP no CUDA device") os.exit(0) end
package.path = "tests/gpu/?.lua;tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local G = require "gpucheck"
local TOL, close, same = G.TOL, G.close, G.same

tap.is(venom.cuda.set_allow_tf32(false), false, "TF32 is off by default")
venom.manual_seed(31)

local shapes = {
  { "(33, 1000)·(1000, 7)", { 33, 1000 }, { 1000, 7 } },
  { "(128, 256)·(256, 96)", { 128, 256 }, { 256, 96 } },
  { "batched (3, 5, 64)·(3, 64, 9)", { 3, 5, 64 }, { 3, 64, 9 } },
  { "(1, 17)·(17, 33)", { 1, 17 }, { 17, 33 } }, -- one row; 33 outputs so max|cpu| is not one small dot product
}

-- autocast: within the dtype's tolerance of f32, and exactly the f32 product
-- of the rounded inputs (so the rounding really happened, and only there)
for _, dt in ipairs({ "bf16", "f16" }) do
  for _, s in ipairs(shapes) do
    local a, b = venom.randn(s[2]), venom.randn(s[3])
    local ag, bg = a:cuda(), b:cuda()
    local ok, got = pcall(venom.autocast, dt, function() return ag:matmul(bg) end)
    if not ok then
      tap.ok(false, dt .. " autocast matmul " .. s[1])
      tap.diag("%s", tostring(got))
    else
      tap.is(got:dtype(), "f32", dt .. " autocast matmul gives f32")
      close(got, a:matmul(b), TOL[dt], dt .. " autocast matmul " .. s[1] .. " vs f32 on the CPU")
      -- the CPU product of inputs rounded to dt: f32 accumulation of exact
      -- products, so only the summation order differs
      local ra, rb = a:to(dt):float(), b:to(dt):float()
      close(got, ra:matmul(rb), 1e-4, dt .. " autocast matmul " .. s[1] .. " = f32 product of " .. dt .. "-rounded inputs")
    end
  end
  -- Operands the vectorised conversion (vnk_f32_to_half: contiguous, 16-byte
  -- aligned) does not take go through the generic one, with the same
  -- rounding: a column slice (rows 96 floats apart for 64 columns) and a
  -- contiguous view that starts one float (4 bytes) into its storage.
  do
    local a = venom.randn(40, 96)
    local b = venom.randn(577)
    local av = a:cuda():narrow(2, 1, 64)
    local bv = b:cuda():narrow(1, 2, 576):reshape(64, 9)
    local ok, got = pcall(venom.autocast, dt, function() return av:matmul(bv) end)
    if not ok then
      tap.ok(false, dt .. " autocast matmul of a strided and an offset view")
      tap.diag("%s", tostring(got))
    else
      local ra = a:narrow(2, 1, 64):to(dt):float()
      local rb = b:narrow(1, 2, 576):reshape(64, 9):to(dt):float()
      close(got, ra:matmul(rb), 1e-4, dt .. " autocast matmul of a strided and an offset view = f32 product of rounded inputs")
    end
  end
  -- linear, with and without bias, forward and backward
  local x, w, bias = venom.randn(64, 200), venom.randn(48, 200) * 0.1, venom.randn(48)
  local xc, wc, bc = x:clone():requires_grad_(true), w:clone():requires_grad_(true), bias:clone():requires_grad_(true)
  local xg, wg, bg = x:cuda():requires_grad_(true), w:cuda():requires_grad_(true), bias:cuda():requires_grad_(true)
  local yc = venom.linear(xc, wc, bc)
  local ok, yg = pcall(venom.autocast, dt, function() return venom.linear(xg, wg, bg) end)
  if not ok then
    tap.ok(false, dt .. " autocast linear")
    tap.diag("%s", tostring(yg))
  else
    close(yg, yc, TOL[dt], dt .. " autocast linear with bias vs f32 on the CPU")
    -- the backward runs outside autocast: the recorded precision applies
    tap.is(venom.get_autocast(), "f32", "autocast is off again after venom.autocast")
    local c = venom.randn(64, 48)
    ;(yc * c):sum():backward()
    local ok2, err = pcall(function() (yg * c:cuda()):sum():backward() end)
    tap.ok(ok2, dt .. " backward of an autocast linear" .. (ok2 and "" or ": " .. tostring(err)))
    if ok2 then
      close(xg.grad, xc.grad, TOL[dt], dt .. " autocast linear: gradient of the input")
      close(wg.grad, wc.grad, TOL[dt], dt .. " autocast linear: gradient of the weight")
      close(bg.grad, bc.grad, TOL.f32, dt .. " autocast linear: gradient of the bias (a sum, in f32)")
      tap.is(wg.grad:dtype(), "f32", dt .. " autocast: gradients stay f32")
    end
  end
  local nb = venom.autocast(dt, function() return venom.linear(x:cuda(), w:cuda()) end)
  close(nb, venom.linear(x, w), TOL[dt], dt .. " autocast linear without bias")
  -- other ops are not affected: elementwise stays exact f32
  local e = venom.autocast(dt, function() return (x:cuda() * 3 + 1):exp() end)
  close(e, (x * 3 + 1):exp(), TOL.f32, dt .. " autocast leaves elementwise ops in f32")
end

-- autocast is per-dtype different: bf16 and f16 give different bits
do
  local a, b = venom.randn(64, 256):cuda(), venom.randn(256, 64):cuda()
  local r1 = venom.autocast("bf16", function() return a:matmul(b) end)
  local r2 = venom.autocast("f16", function() return a:matmul(b) end)
  local r3 = a:matmul(b)
  tap.ok(r1:ne(r2):sum():item() > 0 and r1:ne(r3):sum():item() > 0,
    "bf16, f16 and f32 GEMMs give different results (autocast is not ignored)")
end

-- TF32 ------------------------------------------------------------------------------------
do
  local prev = venom.cuda.set_allow_tf32(true)
  tap.is(prev, false, "set_allow_tf32 returns the previous setting")
  for _, s in ipairs(shapes) do
    local a, b = venom.randn(s[2]), venom.randn(s[3])
    close(a:cuda():matmul(b:cuda()), a:matmul(b), TOL.tf32, "TF32 matmul " .. s[1] .. " vs f32 on the CPU")
  end
  local x, w = venom.randn(64, 200), venom.randn(48, 200)
  close(venom.linear(x:cuda(), w:cuda()), venom.linear(x, w), TOL.tf32, "TF32 linear")
  tap.is(venom.cuda.set_allow_tf32(false), true, "TF32 back off")
  local a, b = venom.randn(33, 1000), venom.randn(1000, 7)
  close(a:cuda():matmul(b:cuda()), a:matmul(b), TOL.gemm, "with TF32 off again, f32 GEMM is f32-accurate")
end

-- 16-bit tensors on the device ---------------------------------------------------------------
do
  local f = venom.cat({ venom.randn(1000) * 100, venom.tensor({ 1 / 3, 65504, 65520, 2 ^ -24, 0 / 0, 1e30 }) })
  for _, dt in ipairs({ "bf16", "f16" }) do
    local h = f:to(dt)
    local hg = h:cuda()
    tap.is(hg:dtype() .. " " .. hg:device(), dt .. " cuda", dt .. " tensor moved to CUDA")
    same(hg, h, dt .. " values survive the trip to CUDA and back")
    same(f:cuda():to(dt), h, "f32 → " .. dt .. " on CUDA rounds like the CPU")
    same(hg:float(), h:float(), dt .. " → f32 on CUDA like the CPU")
    same(hg:reshape(2, 503):t():contiguous(), h:reshape(2, 503):t():contiguous(), dt .. " views and copies on CUDA")
    tap.is(hg:get(1001), h:get(1001), dt .. " get on CUDA")
    tap.is(venom.zeros(3, { dtype = dt, device = "cuda" }):cpu():float():sum():item(), 0, dt .. " zeros on CUDA")
    tap.error_like(function() return hg + hg end, "convert it to f32", dt .. " arithmetic on CUDA is refused too")
  end
end

-- checkpoints of CUDA tensors: the same bytes as of their CPU copies --------------------------------
do
  local dir = testutil.tmpdir()
  local w = venom.randn(33, 7)
  local cpu = { w = w, wt = w:t(), b = w:to("bf16"), h = w:to("f16"), i = (w * 100):long(), m = w:gt(0) }
  local gpu = {}
  for k, v in pairs(cpu) do gpu[k] = v:contiguous():cuda() end
  gpu.wt = w:cuda():t() -- a non-contiguous CUDA view
  local p1, p2 = dir .. "/cpu.safetensors", dir .. "/gpu.safetensors"
  venom.save(p1, cpu, { note = "x" })
  local ok, err = pcall(venom.save, p2, gpu, { note = "x" })
  tap.ok(ok, "venom.save of CUDA tensors" .. (ok and "" or ": " .. tostring(err)))
  if ok then
    tap.ok(testutil.slurp(p1) == testutil.slurp(p2), "the file equals the one saved from the CPU copies, byte for byte")
  end
  os.remove(p1)
  os.remove(p2)
  os.remove(dir)
end

tap.done()
