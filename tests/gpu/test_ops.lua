-- Every op that runs on CUDA against the CPU: elementwise (f32 and integer
-- dtypes, broadcasting, non-contiguous views, CPU scalars), dtype
-- conversions, reductions, softmax, losses, matmul/linear, copies and
-- element access; the ops that are CPU-only and mixed devices must fail with
-- messages that say so.
local venom = require "venom"
if not venom.cuda.is_available() then print("1..0 # SKIP no CUDA device") os.exit(0) end
package.path = "tests/gpu/?.lua;tests/lua/?.lua;" .. package.path
local tap = require "tap"
local G = require "gpucheck"
local TOL, close, same = G.TOL, G.close, G.same

tap.diag("device: %s", venom.cuda.device_name())
venom.cuda.set_allow_tf32(false) -- f32 GEMMs must be true f32 here (test_precision covers TF32)
venom.manual_seed(1234)

-- Runs f on CPU inputs and on their CUDA copies (numbers pass through) and
-- compares the results.
local function both(name, tol, f, ...)
  local cpu_args, gpu_args = { ... }, {}
  local n = select("#", ...)
  for i = 1, n do
    local a = cpu_args[i]
    gpu_args[i] = venom.is_tensor(a) and a:cuda() or a
  end
  local want = f(unpack(cpu_args, 1, n))
  local ok, got = pcall(f, unpack(gpu_args, 1, n))
  if not ok then
    tap.ok(false, name)
    tap.diag("error on CUDA: %s", tostring(got))
    return
  end
  return close(got, want, tol, name)
end

-- Like both, but the CUDA inputs are made non-contiguous: each tensor input
-- t is passed as a transposed copy transposed back (same values, strides
-- of a transpose), so the kernels' strided loops are exercised.
local function strided(t)
  if t:dim() < 2 then return t:cuda() end
  local d = t:dim()
  return t:transpose(d - 1, d):contiguous():cuda():transpose(d - 1, d)
end

local function both_strided(name, tol, f, ...)
  local cpu_args, gpu_args = { ... }, {}
  local n = select("#", ...)
  for i = 1, n do
    local a = cpu_args[i]
    gpu_args[i] = venom.is_tensor(a) and strided(a) or a
  end
  local want = f(unpack(cpu_args, 1, n))
  local ok, got = pcall(f, unpack(gpu_args, 1, n))
  if not ok then
    tap.ok(false, name)
    tap.diag("error on CUDA: %s", tostring(got))
    return
  end
  return close(got, want, tol, name)
end

-- elementwise f32 ----------------------------------------------------------------
do
  -- shape pairs: same shape, odd sizes, broadcasting both ways, 1-element
  local pairs_ = {
    { { 1000 }, { 1000 } },
    { { 5, 1, 7 }, { 3, 1 } },
    { { 3, 1 }, { 5, 1, 7 } },
    { { 1 }, { 7 } },
    { { 33, 7 }, { 7 } },
    { { 2, 3, 4, 5 }, { 1, 3, 1, 5 } },
  }
  local binops = {
    add = function(a, b) return a + b end,
    sub = function(a, b) return a - b end,
    mul = function(a, b) return a * b end,
    div = function(a, b) return a / b end,
    pow = function(a, b) return a:pow(b) end,
    eq = function(a, b) return a:eq(b) end,
    ne = function(a, b) return a:ne(b) end,
    lt = function(a, b) return a:lt(b) end,
    le = function(a, b) return a:le(b) end,
    gt = function(a, b) return a:gt(b) end,
    ge = function(a, b) return a:ge(b) end,
  }
  local order = { "add", "sub", "mul", "div", "pow", "eq", "ne", "lt", "le", "gt", "ge" }
  for _, sp in ipairs(pairs_) do
    local label = ("(%s)·(%s)"):format(table.concat(sp[1], ","), table.concat(sp[2], ","))
    for _, op in ipairs(order) do
      local a, b
      if op == "div" then
        a, b = venom.randn(sp[1]), G.randn_nz(sp[2]) -- |b| >= 0.1
      elseif op == "pow" then
        a, b = G.uniform(0.5, 2, sp[1]), venom.randn(sp[2])
      elseif op == "add" or op == "sub" or op == "mul" then
        a, b = venom.randn(sp[1]), venom.randn(sp[2])
      else
        -- small integers as f32, so that equal pairs occur and eq/le/ge are tested on ties
        a, b = (venom.randn(sp[1]) * 2):int():float(), (venom.randn(sp[2]) * 2):int():float()
      end
      both(op .. " f32 " .. label, TOL.f32, binops[op], a, b)
    end
  end
  -- non-contiguous operands (transposed storage) and a number operand; a > 0
  -- for pow, |b| >= 0.1 for div
  local a, b = G.uniform(0.5, 2, 33, 7), G.randn_nz(33, 7)
  for _, op in ipairs(order) do
    both_strided(op .. " f32 on transposed views", TOL.f32, binops[op], a, b)
  end
  both("add a number", TOL.f32, function(x) return x + 2.5 end, a)
  both("number first: 3 - x", TOL.f32, function(x) return 3 - x end, a)
  both("mul by a number", TOL.f32, function(x) return x * -0.75 end, a)
  both("div by a number", TOL.f32, function(x) return x / 3 end, a)
  both("number / x", TOL.f32, function(x) return 1 / x end, b)
  both("x ^ 2 (number exponent)", TOL.f32, function(x) return x ^ 2 end, a)
  both("a CPU 0-d tensor with a CUDA tensor", TOL.f32,
    function(x) return x * venom.tensor(1.5) + venom.tensor(-0.25) end, a)
  both("a CPU 0-d tensor first", TOL.f32, function(x) return venom.tensor(2) - x end, a)
  both("a 0-d operand on both sides", TOL.f32, function(x) return x:sum() * 2 + x end, a)
  both("in-place add_ / mul_", TOL.f32, function(x) local y = x:clone(); y:add_(1); y:mul_(y); return y end, a)
end

-- unary f32, on contiguous and transposed inputs
do
  local x = G.randn_nz(33, 7) * 2
  local pos = G.uniform(0.1, 4, 33, 7)
  local cases = {
    { "neg", function(t) return -t end, x },
    { "abs", function(t) return t:abs() end, x },
    { "exp", function(t) return t:exp() end, x },
    { "log", function(t) return t:log() end, pos },
    { "sqrt", function(t) return t:sqrt() end, pos },
    { "pow_scalar 3", function(t) return t ^ 3 end, x },
    { "pow_scalar 0.5", function(t) return t ^ 0.5 end, pos },
    { "pow_scalar -1.5", function(t) return t ^ -1.5 end, pos },
    { "relu", function(t) return t:relu() end, x },
    { "gelu", function(t) return t:gelu() end, x },
    { "tanh", function(t) return t:tanh() end, x },
    { "sigmoid", function(t) return t:sigmoid() end, x },
    { "clamp(-1, 0.5)", function(t) return t:clamp(-1, 0.5) end, x },
    { "clamp(nil, 0.5)", function(t) return t:clamp(nil, 0.5) end, x },
    { "clamp(-1, nil)", function(t) return t:clamp(-1) end, x },
  }
  for _, c in ipairs(cases) do
    both(c[1] .. " f32 (33, 7)", TOL.f32, c[2], c[3])
    both_strided(c[1] .. " f32 on a transposed view", TOL.f32, c[2], c[3])
  end
  local big = venom.randn(1000)
  both("gelu on 1000 elements", TOL.f32, function(t) return t:gelu() end, big)
  both("exp on 1 element", TOL.f32, function(t) return t:exp() end, venom.randn(1))
end

-- where and masked_fill (broadcasting; numbers as a and b)
do
  local cond = venom.randn(5, 1, 7):gt(0)
  local a, b = venom.randn(3, 1), venom.randn(1, 3, 7)
  both("where broadcasting (5,1,7) ? (3,1) : (1,3,7)", TOL.f32, venom.where, cond, a, b)
  both("where with a number", TOL.f32, function(c, x) return venom.where(c, x, -1) end, cond, venom.randn(5, 3, 7))
  local t = venom.randn(5, 3, 7)
  local mask = venom.randn(3, 1):gt(0)
  both("masked_fill with a broadcast mask", TOL.f32, function(x, m) return x:masked_fill(m, 9.5) end, t, mask)
  local ti = (venom.randn(5, 3, 7) * 100):int()
  both("masked_fill on i32", 0, function(x, m) return x:masked_fill(m, -7) end, ti, mask)
  both("where on i64", 0, function(c, x, y) return venom.where(c, x, y) end, cond,
    (venom.randn(3, 1) * 1e6):long(), (venom.randn(1, 3, 7) * 1e6):long())
end

-- integer dtypes: add/sub/mul/neg/abs and comparisons, exact, wrapping included
do
  local function ints(dtype, scale, ...)
    local x = (venom.randn(...) * scale)
    if dtype == "u8" then x = (venom.rand(...) * 256) end
    return x:to(dtype)
  end
  for _, dt in ipairs({ "i32", "i64", "u8" }) do
    local a, b = ints(dt, 1000, 7, 33), ints(dt, 1000, 33)
    local c = ints(dt, 3, 5, 1, 7)
    local d = ints(dt, 3, 3, 1)
    both("add " .. dt, 0, function(x, y) return x + y end, a, b)
    both("sub " .. dt, 0, function(x, y) return x - y end, a, b)
    both("mul " .. dt, 0, function(x, y) return x * y end, a, b)
    both("add " .. dt .. " broadcasting (5,1,7)+(3,1)", 0, function(x, y) return x + y end, c, d)
    both("add a number to " .. dt, 0, function(x) return x + 3 end, a)
    both("neg " .. dt, 0, function(x) return -x end, a)
    both("abs " .. dt, 0, function(x) return x:abs() end, a)
    for _, op in ipairs({ "eq", "ne", "lt", "le", "gt", "ge" }) do
      both(op .. " " .. dt .. " (ties from a small range)", 0, function(x, y) return x[op](x, y) end, c, d)
    end
    both_strided("add " .. dt .. " on transposed views", 0, function(x, y) return x + y end, a, ints(dt, 1000, 7, 33))
  end
  -- two's complement wrap-around: the same on both devices
  both("i32 wraps: INT32_MAX + 1, -INT32_MIN", 0, function(x) return venom.cat({ x + 1, -x, x:abs() }) end,
    venom.tensor({ 2147483647, -2147483648, 5 }, "i32"))
  both("i64 mul wraps past 2^63", 0, function(x, y) return x * y end,
    venom.tensor({ 2 ^ 40 + 3, -(2 ^ 40) - 7, 12345 }, "i64"), venom.tensor({ 2 ^ 30 + 1, 2 ^ 33, -3 }, "i64"))
  both("u8 wraps: 200 + 100, 3 - 5", 0, function(x, y) return venom.cat({ x + y, y - x }) end,
    venom.tensor({ 200, 5 }, "u8"), venom.tensor({ 100, 3 }, "u8"))
end

-- dtype conversions: bit-identical to the CPU's ----------------------------------
do
  local nan, inf = 0 / 0, math.huge
  local special = {
    0.5, -0.5, 2.7, -2.7, 1e10, -1e10, 255.9, 256, 300, -1, -0.0, 3e38, -3e38, nan, inf, -inf,
    1 + 2 ^ -8, 1 + 3 * 2 ^ -8,     -- bf16 ties: round to even
    1 + 2 ^ -11, 1 + 3 * 2 ^ -11,   -- f16 ties
    65504, 65519, 65520, 70000,     -- f16 max, the last value that rounds to it, overflow to inf
    2 ^ -24, 2 ^ -25, 3 * 2 ^ -26,  -- f16 subnormals and a tie at the bottom
    1e-40, -1e-42,                  -- f32 subnormals
    2147483647, 2147483648, -2147483649, 2 ^ 62, 2 ^ 63, -(2 ^ 63), 2 ^ 64,
  }
  local f = venom.cat({ venom.tensor(special), venom.randn(1000) * 100, venom.randn(1000) * 1e-5 })
  for _, dt in ipairs({ "i32", "i64", "u8", "bf16", "f16" }) do
    same(f:cuda():to(dt), f:to(dt), "f32 → " .. dt .. " on CUDA is bit-identical to the CPU")
    local back = f:to(dt) -- from the CPU's conversion, so both sides start equal
    same(back:cuda():float(), back:float(), dt .. " → f32 on CUDA is bit-identical to the CPU")
  end
  local i32 = venom.tensor({ 16777217, -16777219, 2147483647, -2147483648, 0, 255, 256, -1 }, "i32")
  local i64 = venom.tensor({ 2 ^ 53 + 2, -(2 ^ 40) - 1, 4294967296 + 5, -5, 2147483648, 255 }, "i64")
  local u8 = venom.tensor({ 0, 1, 127, 128, 255 }, "u8")
  for _, src in ipairs({ i32, i64, u8 }) do
    for _, dt in ipairs({ "f32", "i32", "i64", "u8", "bf16", "f16" }) do
      if dt ~= src:dtype() then
        same(src:cuda():to(dt), src:to(dt), src:dtype() .. " → " .. dt .. " as on the CPU")
      end
    end
  end
  local h = f:to("bf16")
  same(h:cuda():to("f16"), h:to("f16"), "bf16 → f16 as on the CPU")
  local k = f:to("f16")
  same(k:cuda():to("bf16"), k:to("bf16"), "f16 → bf16 as on the CPU")
  same(f:narrow(1, 3, 500):reshape(20, 25):t():cuda():to("bf16"), f:narrow(1, 3, 500):reshape(20, 25):t():to("bf16"),
    "f32 → bf16 of a transposed view")
  local gt = f:cuda():t()
  tap.is(gt:device(), "cuda", "views of CUDA tensors stay on CUDA")
end

-- reductions ------------------------------------------------------------------------
do
  -- shifted off zero so that no sum is a cancellation to ~0 (which a relative
  -- error against max|cpu| could not judge)
  local x = venom.randn(5, 7, 33) + 0.3
  local inputs = {
    { "(5, 7, 33)", x },
    { "(1000,)", venom.randn(1000) + 0.3 },
    { "(1,)", venom.randn(1) },
    { "a transposed (33, 7, 5) view", x:permute(3, 2, 1) },
    { "(3, 100000)", venom.rand(3, 100000) },
  }
  for _, inp in ipairs(inputs) do
    local label, t = inp[1], inp[2]
    local g = t:cuda()
    if label:find("transposed") then g = x:cuda():permute(3, 2, 1) end
    local function cmp(name, f, tol)
      local ok, got = pcall(f, g)
      if not ok then
        tap.ok(false, name .. " " .. label)
        tap.diag("error on CUDA: %s", tostring(got))
      else
        close(got, f(t), tol, name .. " " .. label)
      end
    end
    for _, op in ipairs({ "sum", "mean", "max", "min" }) do
      cmp(op .. " over all", function(y) return y[op](y) end, TOL.reduce)
      cmp(op .. " over all, keepdim", function(y) return y[op](y, nil, true) end, TOL.reduce)
      for d = 1, t:dim() do
        cmp(op .. " over dim " .. d, function(y) return y[op](y, d) end, TOL.reduce)
        cmp(op .. " over dim " .. d .. ", keepdim", function(y) return y[op](y, d, true) end, TOL.reduce)
      end
      cmp(op .. " over dim -1", function(y) return y[op](y, -1) end, TOL.reduce)
    end
    for _, op in ipairs({ "argmax", "argmin" }) do
      cmp(op .. " over all", function(y) return y[op](y) end, 0)
      for d = 1, t:dim() do
        cmp(op .. " over dim " .. d, function(y) return y[op](y, d) end, 0)
        cmp(op .. " over dim " .. d .. ", keepdim", function(y) return y[op](y, d, true) end, 0)
      end
    end
  end
  -- integers: sum → i64 (exact), mean → f32, max/min keep the dtype,
  -- argmax/argmin take the first of ties (a small range makes many ties)
  for _, dt in ipairs({ "i32", "i64", "u8" }) do
    local t = (venom.rand(5, 7, 33) * 5):to(dt)
    local g = t:cuda()
    for _, op in ipairs({ "sum", "mean", "max", "min", "argmax", "argmin" }) do
      close(g[op](g), t[op](t), TOL.reduce, op .. " over all, " .. dt)
      for d = 1, 3 do
        close(g[op](g, d), t[op](t, d), TOL.reduce, op .. " over dim " .. d .. ", " .. dt)
      end
    end
  end
  local big = (venom.randn(1000) * 1e6):int()
  close(big:cuda():sum(), big:sum(), 0, "i32 sum is exact (i64 accumulation)")
end

-- softmax, log_softmax, losses ----------------------------------------------------
do
  local x = venom.randn(5, 7, 33) * 3
  for d = 1, 3 do
    both("softmax over dim " .. d, TOL.reduce, function(t) return t:softmax(d) end, x)
    both("log_softmax over dim " .. d, TOL.reduce, function(t) return t:log_softmax(d) end, x)
  end
  both_strided("softmax of a transposed view", TOL.reduce, function(t) return t:softmax() end, venom.randn(33, 7))
  both("softmax of a 1-element row", TOL.reduce, function(t) return t:softmax() end, venom.randn(4, 1))
  both("softmax with large logits (stability)", TOL.reduce, function(t) return t:softmax() end, venom.randn(7, 1000) * 50)

  local N, C = 33, 10
  local logits = venom.randn(N, C) * 3
  local target = (venom.rand(N) * C):long() + 1 -- 1-based classes 1..C
  for _, red in ipairs({ "mean", "sum", "none" }) do
    both("cross_entropy " .. red, TOL.reduce, function(l, t) return venom.cross_entropy(l, t, red) end, logits, target)
    both("nll_loss " .. red, TOL.reduce, function(l, t) return venom.nll_loss(l:log_softmax(), t, red) end, logits, target)
    both("mse_loss " .. red, TOL.reduce, function(a, b) return venom.mse_loss(a, b, red) end,
      venom.randn(7, 33), venom.randn(7, 33))
  end
  both("cross_entropy with i32 targets", TOL.reduce, function(l, t) return venom.cross_entropy(l, t) end,
    logits, target:int())
  both("cross_entropy with 1 class", TOL.reduce, function(l, t) return venom.cross_entropy(l, t, "none") end,
    venom.randn(3, 1), venom.tensor({ 1, 1, 1 }, "i64"))
  tap.error_like(function() return venom.cross_entropy(logits:cuda(), venom.tensor({ 11 }, "i64"):expand(N):cuda()) end,
    "out of range", "cross_entropy on CUDA: a target out of range is an error")
end

-- matmul and linear (f32, no TF32) ----------------------------------------------------
do
  local function mm(name, sa, sb)
    both("matmul " .. name, TOL.gemm, function(a, b) return a:matmul(b) end, venom.randn(sa), venom.randn(sb))
  end
  mm("(33, 1000)·(1000, 7)", { 33, 1000 }, { 1000, 7 })
  mm("(1, 1000)·(1000, 1)", { 1, 1000 }, { 1000, 1 })
  mm("(128, 256)·(256, 96)", { 128, 256 }, { 256, 96 })
  mm("batched (3, 5, 7)·(3, 7, 4)", { 3, 5, 7 }, { 3, 7, 4 })
  mm("broadcast batch (2, 1, 5, 7)·(3, 7, 4)", { 2, 1, 5, 7 }, { 3, 7, 4 })
  mm("broadcast batch (5, 7)·(3, 7, 4)", { 5, 7 }, { 3, 7, 4 })
  mm("vector·matrix (7)·(7, 5)", { 7 }, { 7, 5 })
  mm("matrix·vector (5, 7)·(7)", { 5, 7 }, { 7 })
  mm("vector·vector (1000)·(1000)", { 1000 }, { 1000 })
  mm("batched·vector (3, 5, 7)·(7)", { 3, 5, 7 }, { 7 })
  -- transposed views (passed to cuBLAS as transposes or copied: either way the values)
  local a, b = venom.randn(7, 33), venom.randn(4, 7)
  both("matmul aᵀ·bᵀ of transposed views", TOL.gemm, function(x, y) return x:t():matmul(y:t()) end, a, b)
  both("matmul a·aᵀ", TOL.gemm, function(x) return x:matmul(x:t()) end, a)
  both("matmul of a narrowed (non-contiguous) operand", TOL.gemm,
    function(x, y) return x:narrow(2, 3, 20):matmul(y) end, venom.randn(9, 40), venom.randn(20, 6))
  local bt = venom.randn(3, 7, 5)
  both("batched matmul with a transposed batch operand", TOL.gemm,
    function(x, y) return x:matmul(y:transpose(2, 3)) end, venom.randn(3, 4, 7), venom.randn(3, 6, 7))
  both("batched (3,5,7)ᵀ-view·(3,5,4)", TOL.gemm,
    function(x, y) return x:transpose(2, 3):matmul(y) end, bt, venom.randn(3, 7, 4))

  local x, w, bias = venom.randn(5, 3, 20), venom.randn(16, 20), venom.randn(16)
  both("linear with bias (5, 3, 20)→(5, 3, 16)", TOL.gemm, venom.linear, x, w, bias)
  both("linear without bias", TOL.gemm, function(a, b) return venom.linear(a, b) end, x, w)
  both("linear of a vector (20)", TOL.gemm, venom.linear, venom.randn(20), w, bias)
  both("linear (1000, 784)·(256, 784)ᵀ", TOL.gemm, venom.linear, venom.randn(1000, 784), venom.randn(256, 784) * 0.05,
    venom.randn(256))
end

-- copies, fills, element access, views ----------------------------------------------------
do
  local src = venom.randn(33)
  local dst_cpu = venom.zeros(7, 33)
  local dst = venom.zeros(7, 33, { device = "cuda" })
  tap.is(dst:device(), "cuda", "zeros(..., {device = 'cuda'}) is on CUDA")
  dst:copy_(src) -- a CPU source, broadcast over the rows
  dst_cpu:copy_(src)
  close(dst, dst_cpu, 0, "copy_ from a CPU tensor into a CUDA one, broadcast")
  local back = venom.zeros(7, 33)
  back:copy_(dst)
  tap.ok(back:eq(dst_cpu):sum():item() == 7 * 33, "copy_ from a CUDA tensor into a CPU one")
  local ints = (venom.randn(7, 33) * 100):int()
  dst:copy_(ints:cuda())
  dst_cpu:copy_(ints)
  close(dst, dst_cpu, 0, "copy_ converts i32 → f32 on CUDA")
  -- writes into contiguous views of a CUDA tensor work (rows 2..4 of a
  -- (6, 8) tensor are one block); a non-contiguous destination is refused
  -- (venom.h: copy_/fill_ need a contiguous CUDA destination)
  local base = venom.randn(6, 8)
  local base_cpu = base:clone()
  local g = base:cuda()
  local v = venom.randn(3, 8)
  g:narrow(1, 2, 3):copy_(v:cuda():t():contiguous():t()) -- a strided CUDA source
  base_cpu:narrow(1, 2, 3):copy_(v)
  close(g, base_cpu, 0, "copy_ into a contiguous narrowed view of a CUDA tensor, from a strided source")
  g:narrow(1, 5, 2):fill_(-2.5)
  base_cpu:narrow(1, 5, 2):fill_(-2.5)
  close(g, base_cpu, 0, "fill_ of a contiguous narrowed view of a CUDA tensor")
  tap.error_like(function() g:narrow(2, 4, 3):fill_(1) end, "fill_.*non%-contiguous cuda",
    "fill_ of a non-contiguous CUDA view: a clear error")
  tap.error_like(function() g:t():copy_(venom.randn(8, 6)) end, "copy_.*non%-contiguous cuda",
    "copy_ into a non-contiguous CUDA view: a clear error")
  close(g, base_cpu, 0, "the refused writes left the tensor alone")
  g[2] = 7
  base_cpu[2] = 7
  close(g, base_cpu, 0, "t[i] = number on a CUDA tensor")
  local ti = venom.zeros(4, 5, { dtype = "i64", device = "cuda" })
  ti:fill_(2 ^ 40 + 1)
  tap.is(ti:cpu():get(3, 4), 2 ^ 40 + 1, "fill_ of an i64 CUDA tensor with a value beyond 2^32")

  local x = venom.randn(7, 33)
  local gx = x:cuda()
  local c = gx:t():clone()
  tap.ok(c:is_contiguous() and c:device() == "cuda", "clone of a CUDA view: contiguous, on CUDA")
  close(c, x:t():contiguous(), 0, "clone of a transposed CUDA view has the right values")
  close(gx:t():contiguous(), x:t():contiguous(), 0, "contiguous of a transposed CUDA view")
  close(gx:permute(2, 1):reshape(33 * 7), x:permute(2, 1):reshape(33 * 7), 0, "reshape of a permuted CUDA view")
  close(gx:select(2, 5):unsqueeze(1):expand(3, 7):contiguous(), x:select(2, 5):unsqueeze(1):expand(3, 7):contiguous(), 0,
    "select / unsqueeze / expand on CUDA")
  close(venom.cat({ gx, gx:narrow(1, 2, 3) }, 1), venom.cat({ x, x:narrow(1, 2, 3) }, 1), 0, "cat on CUDA along dim 1")
  close(venom.cat({ gx, gx }, 2), venom.cat({ x, x }, 2), 0, "cat on CUDA along dim 2")

  -- index_select (1-based indices, repeats allowed), the index on the device
  local idx = venom.tensor({ 3, 1, 3, 7, 2 }, "i64")
  close(gx:index_select(1, idx:cuda()), x:index_select(1, idx), 0, "index_select along dim 1 on CUDA")
  local idx2 = (venom.rand(50) * 33):long() + 1
  close(gx:index_select(2, idx2:int():cuda()), x:index_select(2, idx2:int()), 0,
    "index_select along dim 2 with i32 indices on CUDA")
  close(gx:t():index_select(1, idx2:cuda()), x:t():index_select(1, idx2), 0, "index_select of a transposed CUDA view")
  local xi = (venom.randn(7, 33) * 100):long()
  close(xi:cuda():index_select(1, idx:cuda()), xi:index_select(1, idx), 0, "index_select of an i64 CUDA tensor")
  tap.error_like(function() return gx:index_select(1, idx) end, "index_select: .*on cpu and another on cuda",
    "index_select of a CUDA tensor with a CPU index: an error naming both devices")
  tap.error_like(function() return gx:index_select(1, venom.tensor({ 8 }, "i64"):cuda()) end, "out of range",
    "index_select on CUDA: an index out of range is an error")

  -- item, totable, get: values exactly as stored
  local want = x:totable()
  local got = gx:totable()
  local exact = #got == 7
  for i = 1, 7 do for j = 1, 33 do exact = exact and got[i][j] == want[i][j] end end
  tap.ok(exact, "totable of a CUDA tensor gives the stored values exactly")
  tap.is(gx:get(3, 17), x:get(3, 17), "get(i, j) on a CUDA tensor")
  tap.is(gx[4][2], x[4][2], "t[i][j] on a CUDA tensor")
  tap.is(gx:narrow(2, 5, 1):sum():item() ~= nil, true, "item of a CUDA reduction")
  tap.near(gx:sum():item(), x:sum():item(), 1e-5 * math.abs(x:abs():sum():item()), "item of a CUDA sum")
  tap.is(venom.tensor(3.25):cuda():item(), 3.25, "item of a 0-d CUDA tensor")
  tap.ok(tostring(gx):find("device=cuda", 1, true) ~= nil, "printing a CUDA tensor says device=cuda")
  tap.is(venom.tensor({ { 1, 2 }, { 3, 4 } }, { device = "cuda", dtype = "i32" }):cpu():sum():item(), 10,
    "tensor(table, {device = 'cuda', dtype = 'i32'})")
  close(venom.full({ 3, 5 }, 1.5, { device = "cuda" }), venom.full({ 3, 5 }, 1.5), 0, "full on CUDA")
  close(venom.ones(3, 5, { device = "cuda", dtype = "u8" }), venom.ones(3, 5, { dtype = "u8" }), 0, "ones u8 on CUDA")
  tap.is(gx:to("cuda"):device(), "cuda", "to('cuda') of a CUDA tensor stays")
  tap.is(gx:cpu():device(), "cpu", "cpu() comes back to the CPU")
  tap.ok(venom.cuda.memory_stats().in_use > 0, "cuda.memory_stats counts live CUDA tensors")
  venom.cuda.synchronize()
  tap.ok(true, "cuda.synchronize() returns after queued work")
end

-- CPU-only ops, unsupported sizes and mixed devices fail clearly ---------------------------------------------
do
  local w = venom.randn(10, 8):cuda()
  local ids = venom.tensor({ 1, 3 }, "i64")
  -- embedding, layer_norm and causal_attention run on CUDA (test_transformer.lua)
  tap.error_like(function() return venom.embedding(w, ids) end, "embedding: expected all tensors on one device",
    "embedding with a CUDA weight and CPU ids: an error naming both devices")
  local q = venom.randn(1, 2, 4, 8):cuda()
  tap.error_like(function() return venom.causal_attention(q, q, q) end,
    "causal_attention: on CUDA the head dim must be 32, 64 or 128.*found 8",
    "causal_attention on CUDA with head dim 8: an error naming the tile sizes")
  tap.error_like(function() return venom.vnm_from_dense(venom.randn(8, 16):cuda(), 4, 2, 8) end,
    "vnm_from_dense.*cuda", "vnm_from_dense of a CUDA weight: a 'cpu only' error naming the op")

  local a, b = venom.randn(3):cuda(), venom.randn(3)
  tap.error_like(function() return a + b end, "add: .*argument 2 on cpu and another on cuda", "cuda + cpu: an error naming both devices")
  tap.error_like(function() return b + a end, "add: .*argument 2 on cuda and another on cpu", "cpu + cuda: an error naming both devices")
  tap.error_like(function() return venom.randn(2, 3):cuda():matmul(venom.randn(3, 2)) end, "matmul: .*on cpu and another on cuda",
    "matmul across devices is an error")
  tap.error_like(function() return venom.linear(venom.randn(2, 3), venom.randn(4, 3):cuda()) end, "linear: .*on cuda and another on cpu",
    "linear with the weight on another device is an error")
  tap.error_like(function() return venom.cross_entropy(venom.randn(2, 3):cuda(), venom.tensor({ 1, 2 }, "i64")) end,
    "cross_entropy: .*on cpu and another on cuda", "cross_entropy with CPU targets for CUDA logits names both devices")
  tap.error_like(function() return a + venom.randn(1) end, "on cpu and another on cuda", "a 1-element (not 0-d) CPU tensor does not join CUDA")
  close(a + venom.tensor(2), a:cpu() + 2, TOL.f32, "a CPU 0-d tensor joins a CUDA tensor")
end

tap.done()
