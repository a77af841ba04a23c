-- Devices and 16-bit floats on any machine: without a CUDA device every way
-- to reach one fails with a message naming CUDA; bad device names list the
-- valid ones; CPU tensors report their device; bf16/f16 tensors store,
-- convert, print and save exactly and refuse arithmetic; the autocast
-- setting is restored after venom.autocast, also on error.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"
local nn = require "venom.nn"
local data = require "venom.data"

local has_cuda = venom.cuda.is_available()

-- without a CUDA device -------------------------------------------------------------
if has_cuda then
  tap.skip("a CUDA device is present: the no-device errors cannot be seen", 8)
else
  tap.is(venom.cuda.device_count(), 0, "cuda.device_count() is 0")
  local x = venom.randn(3)
  tap.error_like(function() return x:cuda() end, "CUDA", "x:cuda() fails naming CUDA")
  tap.error_like(function() return x:to("cuda") end, "CUDA", "x:to('cuda') fails naming CUDA")
  tap.error_like(function() return venom.zeros(2, { device = "cuda" }) end, "CUDA",
    "zeros(2, {device = 'cuda'}) fails naming CUDA")
  tap.error_like(function() return venom.randn(2, { device = "cuda" }) end, "CUDA",
    "randn(2, {device = 'cuda'}) fails naming CUDA")
  tap.error_like(function() return nn.Linear(2, 3):cuda() end, "CUDA", "Module:cuda() fails naming CUDA")
  tap.error_like(function() return data.DataLoader({ venom.randn(4, 2) }, { batch_size = 2, device = "cuda" }) end,
    "CUDA", "DataLoader{device = 'cuda'} fails naming CUDA")
  tap.error_like(function() return venom.cuda.device_name() end, "no CUDA device", "cuda.device_name() says there is none")
end

-- bad device names list cpu and cuda ---------------------------------------------------
do
  local x = venom.randn(3)
  for _, bad in ipairs({ "gpu", 3 }) do
    local shown = tostring(bad)
    tap.error_like(function() return x:to(bad) end, "'cpu' or 'cuda'", "x:to(" .. shown .. ") lists cpu and cuda")
    tap.error_like(function() return venom.zeros(2, { device = bad }) end, "'cpu' or 'cuda'",
      "zeros(2, {device = " .. shown .. "}) lists cpu and cuda")
    tap.error_like(function() return nn.Linear(2, 3):to(bad) end, "'cpu' or 'cuda'",
      "Module:to(" .. shown .. ") lists cpu and cuda")
    tap.error_like(function() return data.DataLoader({ venom.randn(4, 2) }, { batch_size = 2, device = bad }) end,
      "'cpu' or 'cuda'", "DataLoader{device = " .. shown .. "} lists cpu and cuda")
  end
  tap.error_like(function() return x:to("f64") end, "'f32'.*'cpu' or 'cuda'", "x:to('f64') lists dtypes and devices")
end

-- CPU tensors ------------------------------------------------------------------------------
do
  local x = venom.randn(4, 5)
  tap.is(x:device(), "cpu", "x:device() is 'cpu'")
  tap.is(x:is_cuda(), false, "x:is_cuda() is false")
  local y = x:to("cpu")
  tap.is(y:device(), "cpu", "x:to('cpu') stays on the CPU")
  tap.is(y:eq(x):sum():item(), 20, "x:to('cpu') has the same values")
  tap.is(x:cpu():eq(x):sum():item(), 20, "x:cpu() has the same values")
  tap.is(venom.zeros(2, { device = "cpu" }):device(), "cpu", "zeros(2, {device = 'cpu'})")
  tap.is(venom.tensor({ 1, 2 }, { device = "cpu", dtype = "i64" }):dtype(), "i64", "tensor(t, {device = 'cpu', dtype})")
  local m = venom.cuda.memory_stats()
  tap.ok(type(m.in_use) == "number" and type(m.cached) == "number", "cuda.memory_stats() gives in_use and cached")
  venom.cuda.synchronize() -- a no-op without work queued
  venom.cuda.empty_cache()
  tap.ok(true, "cuda.synchronize() and cuda.empty_cache() return")
  local prev = venom.cuda.set_allow_tf32(true)
  tap.is(venom.cuda.set_allow_tf32(prev), true, "cuda.set_allow_tf32 returns the previous setting")
end

-- rand is in [0, 1) on the CPU: under seed 1 the millionth-scale sample
-- used to hold a 1.0 (a double just below 1 rounded to 1.0f)
do
  venom.manual_seed(1)
  local u = venom.rand(1000000)
  tap.ok(u:max():item() < 1 and u:min():item() >= 0, "rand stays in [0, 1) over 10^6 draws (seed 1)")
end

-- bf16 and f16 on the CPU ----------------------------------------------------------------------
do
  local b = venom.tensor({ 1 / 3, -2, 1e30 }, "bf16")
  local h = venom.tensor({ 1 / 3, -2, 65504 }, "f16")
  tap.is(b:dtype() .. " " .. h:dtype(), "bf16 f16", "tensor(t, 'bf16' / 'f16')")
  -- 1/3 rounded to 8 (bf16) and 11 (f16) significant bits, to nearest
  tap.is(b:totable()[1], 0.333984375, "1/3 in bf16 is 0.333984375")
  tap.is(h:totable()[1], 0.333251953125, "1/3 in f16 is 0.333251953125")
  tap.is(b[2], -2, "bf16 element access")
  tap.is(h:get(3), 65504, "f16 holds its largest value 65504")
  tap.is(venom.zeros(2, 3, { dtype = "bf16" }):dtype(), "bf16", "zeros with dtype bf16")
  tap.is(venom.full({ 2 }, 0.1, { dtype = "f16" }):totable()[1], 0.0999755859375, "full with dtype f16 rounds 0.1")
  tap.ok(tostring(b):find("dtype=bf16", 1, true) ~= nil and tostring(b):find("3.3398e-01", 1, true) ~= nil,
    "printing a bf16 tensor shows its values and dtype")
  tap.ok(tostring(h):find("dtype=f16", 1, true) ~= nil, "printing an f16 tensor shows its dtype")
  -- round to nearest even on ties, overflow, subnormals (exact values)
  local f = venom.tensor({ 1 + 2 ^ -8, 1 + 3 * 2 ^ -8, 1 + 2 ^ -11, 1 + 3 * 2 ^ -11, 65520, 2 ^ -24, 2 ^ -25 })
  local fb, fh = f:to("bf16"):float():totable(), f:to("f16"):float():totable()
  tap.is(fb[1], 1, "bf16: 1 + 2^-8 (a tie) rounds to even, 1")
  tap.is(fb[2], 1 + 2 ^ -6, "bf16: 1 + 3·2^-8 (a tie) rounds to even, 1 + 2^-6")
  tap.is(fh[3], 1, "f16: 1 + 2^-11 (a tie) rounds to even, 1")
  tap.is(fh[4], 1 + 2 ^ -9, "f16: 1 + 3·2^-11 (a tie) rounds to even, 1 + 2^-9")
  tap.is(fh[5], math.huge, "f16: 65520 overflows to inf")
  tap.is(fh[6], 2 ^ -24, "f16: 2^-24, the smallest subnormal, is kept")
  tap.is(fh[7], 0, "f16: 2^-25 (a tie with 0) rounds to even, 0")
  tap.is(b:to("f16"):totable()[1], 0.333984375, "bf16 → f16 keeps a value both can hold")
  tap.is(b:float():dtype(), "f32", "bf16:float() is f32")
  tap.is(venom.tensor({ 2.7, -2.7 }, "bf16"):to("i32"):totable()[2], -2, "bf16 → i32 truncates toward zero")
  -- arithmetic is refused with a message saying to convert to f32
  for _, t in ipairs({ b, h }) do
    local dt = t:dtype()
    tap.error_like(function() return t + t end, "convert it to f32", dt .. " + " .. dt .. " is refused")
    tap.error_like(function() return t * 2 end, "convert it to f32", dt .. " * number is refused")
    tap.error_like(function() return t:exp() end, "convert it to f32", dt .. ":exp() is refused")
    tap.error_like(function() return t:sum() end, "convert it to f32", dt .. ":sum() is refused")
    tap.error_like(function() return t:reshape(3, 1):matmul(t:reshape(1, 3)) end, "convert it to f32",
      dt .. " matmul is refused")
    tap.error_like(function() return t:requires_grad_(true) end, dt, dt .. " cannot require grad")
  end
  tap.is((b:float() + 1):totable()[2], -1, "after :float() arithmetic works")
end

-- save/load of bf16/f16: byte for byte --------------------------------------------------------
do
  local dir = testutil.tmpdir()
  local x = venom.randn(7, 33) * 100
  local tensors = { b = x:to("bf16"), h = x:to("f16"), t = x:t():to("bf16") } -- a transposed view too
  local p1, p2 = dir .. "/a.safetensors", dir .. "/b.safetensors"
  venom.save(p1, tensors)
  local loaded = venom.load(p1)
  tap.is(loaded.b:dtype() .. " " .. loaded.h:dtype(), "bf16 f16", "bf16/f16 load with their dtypes")
  local same = true
  for k, t in pairs(tensors) do
    same = same and loaded[k]:float():eq(t:float()):sum():item() == t:numel()
  end
  tap.ok(same, "bf16/f16 values come back exactly")
  venom.save(p2, loaded)
  tap.ok(testutil.slurp(p1) == testutil.slurp(p2), "saving the loaded tensors gives the same bytes")
  local header = testutil.slurp(p1):sub(9, 200)
  tap.ok(header:find('"BF16"', 1, true) and header:find('"F16"', 1, true),
    "the safetensors header names the dtypes BF16 and F16")
  os.remove(p1)
  os.remove(p2)
  os.remove(dir)
end

-- autocast setting --------------------------------------------------------------------------
do
  tap.is(venom.get_autocast(), "f32", "autocast is off (f32) by default")
  tap.is(venom.set_autocast("bf16"), "f32", "set_autocast returns the previous setting")
  tap.is(venom.get_autocast(), "bf16", "set_autocast('bf16') sets it")
  local inside
  local r1, r2 = venom.autocast("f16", function(a, b)
    inside = venom.get_autocast()
    return a + b, "two"
  end, 1, 2)
  tap.is(inside, "f16", "venom.autocast sets the dtype while fn runs")
  tap.ok(r1 == 3 and r2 == "two", "venom.autocast returns fn's results and passes its arguments")
  tap.is(venom.get_autocast(), "bf16", "venom.autocast restores the previous setting")
  local ok, err = pcall(venom.autocast, "f16", function() error("boom") end)
  tap.ok(not ok and tostring(err):find("boom", 1, true), "an error inside venom.autocast propagates")
  tap.is(venom.get_autocast(), "bf16", "venom.autocast restores the previous setting after an error")
  tap.error_like(function() venom.set_autocast("i32") end, "'bf16', 'f16' or 'f32' %(off%), got 'i32'", "set_autocast('i32') is refused")
  tap.is(venom.get_autocast(), "bf16", "a refused set_autocast changes nothing")
  local called = false
  tap.error_like(function() venom.autocast("i32", function() called = true end) end, "'bf16', 'f16' or 'f32'",
    "venom.autocast('i32', fn) is refused")
  tap.ok(not called and venom.get_autocast() == "bf16", "... without running fn or changing the setting")
  tap.error_like(function() venom.autocast("bf16") end, "function", "venom.autocast without a function")
  -- CPU matmuls are not affected by autocast: the same bits as without it
  local a, b = venom.randn(9, 40), venom.randn(40, 5)
  local plain = a:matmul(b)
  local cast = venom.autocast("bf16", function() return a:matmul(b) end)
  tap.is(cast:eq(plain):sum():item(), 45, "autocast leaves CPU matmuls in f32")
  tap.is(venom.set_autocast(nil), "bf16", "set_autocast(nil) turns it off and returns the previous setting")
  tap.is(venom.get_autocast(), "f32", "autocast is off again")
  venom.set_autocast("f16")
  venom.set_autocast(false)
  tap.is(venom.get_autocast(), "f32", "set_autocast(false) turns it off")
end

-- Module:to("cpu") on a CPU model changes nothing ---------------------------------------------
do
  local model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
  local before, values = model:parameters(), {}
  for i, p in ipairs(before) do values[i] = p:clone() end
  tap.ok(model:to("cpu") == model, "Module:to returns the module")
  local after, same = model:parameters(), #before == 4
  for i, p in ipairs(after) do
    same = same and rawequal(p, before[i]) and p:eq(values[i]):sum():item() == p:numel() and p:requires_grad()
  end
  tap.ok(same, "Module:to('cpu') keeps the same parameter tensors and values")
  tap.ok(model:cpu() == model and rawequal(model:parameters()[1], before[1]), "Module:cpu() too")
end

tap.done()
