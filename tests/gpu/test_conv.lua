-- conv2d, im2col, max/avg/adaptive pooling and batch_norm on CUDA against the
-- CPU (kernels/conv.cu, pool.cu, batchnorm.cu and cuBLAS): values and the
-- gradients of every input on odd sizes with stride, padding, dilation and
-- groups; running statistics and eval mode; each run twice on fresh random
-- inputs, and the second must repeat the first bit for bit (no float
-- atomics); outputs poisoned first (the caching allocator hands back blocks
-- just filled with NaN, so an element a kernel forgets to write shows);
-- models/cnn.lua for a few SGD steps; mixed devices refused.
local venom = require "venom"
if not venom.cuda.is_available() then print("1..0 # SKIP no CUDA device") os.exit(0) end
package.path = "tests/gpu/?.lua;tests/lua/?.lua;./?.lua;" .. package.path
local tap = require "tap"
local G = require "gpucheck"
local TOL, close, same = G.TOL, G.close, G.same

tap.diag("device: %s", venom.cuda.device_name())
venom.cuda.set_allow_tf32(false) -- true f32 GEMMs: cuBLAS against OpenBLAS
venom.manual_seed(2024)

-- Fills CUDA blocks of each shape's size with NaN and frees them, so the
-- next allocations of those sizes (the op's outputs) start as NaN.
local function poison(...)
  for _, shape in ipairs({ ... }) do venom.full(shape, 0 / 0, { device = "cuda" }):free() end
end

-- f(inputs) on the CPU and on CUDA copies of the inputs; the values and the
-- gradient of every input (through sum(out · R), R random, so each output
-- element has its own weight) must agree within tol. Twice, with fresh
-- inputs; the CUDA results of a repeat on the same inputs must be the same
-- bits. out_shape is the output's shape (for the poison).
local function check(name, tol, out_shape, f, shapes)
  for round = 1, 2 do
    local cpu, gpu = {}, {}
    for i, s in ipairs(shapes) do
      local v = venom.randn(s)
      cpu[i] = v:clone():requires_grad_(true)
      gpu[i] = v:cuda():requires_grad_(true)
    end
    local R = venom.randn(out_shape)
    local want = f(cpu)
    ;(want * R):sum():backward()
    poison(out_shape, unpack(shapes))
    local ok, got = pcall(f, gpu)
    if not ok then
      tap.ok(false, name)
      tap.diag("error on CUDA: %s", tostring(got))
      return
    end
    local tag = ("%s (round %d)"):format(name, round)
    close(got, want, tol, tag .. ": value")
    ;(got * R:cuda()):sum():backward()
    for i = 1, #shapes do
      close(gpu[i].grad, cpu[i].grad, tol, ("%s: gradient of input %d"):format(tag, i))
    end
    -- the same inputs again: bit-identical values and gradients
    local again = {}
    for i = 1, #shapes do again[i] = gpu[i]:detach():clone():requires_grad_(true) end
    poison(out_shape, unpack(shapes))
    local got2 = f(again)
    ;(got2 * R:cuda()):sum():backward()
    same(got2, got:detach():cpu(), tag .. ": a repeat gives the same bits")
    for i = 1, #shapes do
      same(again[i].grad, gpu[i].grad:cpu(), ("%s: a repeat gives the same gradient %d"):format(tag, i))
    end
  end
end

-- ---- conv2d and im2col --------------------------------------------------------

-- {B, C, H, W, Cout, kh, kw, stride, padding, dilation, groups, bias}
local convs = {
  { 2, 3, 7, 6, 4, 3, 3, { 1, 1 }, { 1, 1 }, { 1, 1 }, 1, true },
  { 1, 4, 9, 8, 6, 3, 2, { 2, 3 }, { 1, 0 }, { 2, 1 }, 2, true },   -- groups, stride, dilation
  { 3, 5, 5, 7, 5, 3, 3, { 1, 1 }, { 1, 1 }, { 1, 1 }, 5, false },  -- depthwise
  { 2, 2, 6, 5, 3, 1, 1, { 2, 2 }, { 0, 0 }, { 1, 1 }, 1, true },   -- 1×1, stride 2
  { 1, 1, 4, 4, 2, 4, 4, { 1, 1 }, { 0, 0 }, { 1, 1 }, 1, true },   -- kernel = image
  { 3, 6, 5, 5, 4, 2, 3, { 1, 2 }, { 1, 2 }, { 2, 1 }, 2, true },   -- padding over half
  { 5, 16, 13, 11, 24, 3, 3, { 1, 1 }, { 1, 1 }, { 1, 1 }, 1, false }, -- larger, odd
}

local function out_size(n, k, s, p, d) return math.floor((n + 2 * p - d * (k - 1) - 1) / s) + 1 end

for i, c in ipairs(convs) do
  local B, C, H, W, Co, kh, kw, st, pd, dl, g, bias = unpack(c)
  local Ho, Wo = out_size(H, kh, st[1], pd[1], dl[1]), out_size(W, kw, st[2], pd[2], dl[2])
  local shapes = { { B, C, H, W }, { Co, C / g, kh, kw } }
  if bias then shapes[3] = { Co } end
  check(("conv2d case %d"):format(i), TOL.chain, { B, Co, Ho, Wo }, function(t)
    return venom.conv2d(t[1], t[2], t[3], st, pd, dl, g)
  end, shapes)
  check(("im2col case %d"):format(i), TOL.f32, { B, C * kh * kw, Ho * Wo }, function(t)
    return venom.im2col(t[1], { kh, kw }, st, pd, dl)
  end, { { B, C, H, W } })
end

-- ---- pooling -------------------------------------------------------------------

-- {B, C, H, W, kernel, stride, padding}
local pools = {
  { 2, 3, 7, 6, { 2, 2 }, { 2, 2 }, { 0, 0 } },
  { 1, 2, 9, 8, { 3, 2 }, { 2, 3 }, { 1, 1 } },
  { 3, 1, 5, 7, { 3, 3 }, { 1, 1 }, { 1, 1 } },  -- overlapping windows
  { 2, 2, 11, 5, { 1, 2 }, { 3, 2 }, { 0, 1 } }, -- gaps between windows
  { 4, 8, 28, 28, { 2, 2 }, { 2, 2 }, { 0, 0 } }, -- models/cnn.lua's
}

for i, c in ipairs(pools) do
  local B, C, H, W, k, s, p = unpack(c)
  local oshape = { B, C, out_size(H, k[1], s[1], p[1], 1), out_size(W, k[2], s[2], p[2], 1) }
  check(("max_pool2d case %d"):format(i), TOL.f32, oshape, function(t)
    return venom.max_pool2d(t[1], k, s, p)
  end, { { B, C, H, W } })
  check(("avg_pool2d case %d"):format(i), TOL.reduce, oshape, function(t)
    return venom.avg_pool2d(t[1], k, s, p)
  end, { { B, C, H, W } })
end

-- ties and a NaN: the first maximum wins and NaN beats everything, on both
do
  local x = venom.randint(-3, 4, { 2, 3, 7, 9 }):float()
  x:set(1, 2, 3, 4, 0 / 0)
  local k, s, p = { 3, 3 }, { 2, 2 }, { 1, 1 }
  same(venom.max_pool2d(x:cuda(), k, s, p), venom.max_pool2d(x, k, s, p),
       "max_pool2d with ties and a NaN: the same values as the CPU")
  local xc, xg = x:clone():requires_grad_(true), x:cuda():requires_grad_(true)
  venom.max_pool2d(xc, k, s, p):sum():backward()
  venom.max_pool2d(xg, k, s, p):sum():backward()
  same(xg.grad, xc.grad, "max_pool2d with ties and a NaN: the gradient goes to the CPU's positions")
end

-- adaptive: {B, C, H, W, oh, ow}, smaller, equal and larger than the input
for i, c in ipairs({ { 2, 3, 7, 6, 3, 4 }, { 1, 2, 5, 5, 5, 5 }, { 2, 2, 4, 3, 7, 5 },
                     { 3, 4, 9, 11, 1, 1 } }) do
  local B, C, H, W, oh, ow = unpack(c)
  check(("adaptive_avg_pool2d case %d"):format(i), TOL.reduce, { B, C, oh, ow }, function(t)
    return venom.adaptive_avg_pool2d(t[1], { oh, ow })
  end, { { B, C, H, W } })
end

-- ---- batch norm ------------------------------------------------------------------

for i, shape in ipairs({ { 6, 5, 7, 3 }, { 9, 4 }, { 4, 3, 5 }, { 32, 16, 14, 14 } }) do
  local C = shape[2]
  for _, training in ipairs({ true, false }) do
    local rm_c, rv_c = venom.randn(C), venom.rand(C) + 0.5
    local rm_g, rv_g = rm_c:cuda(), rv_c:cuda()
    local name = ("batch_norm case %d (%s)"):format(i, training and "training" or "eval")
    check(name, TOL.chain, shape, function(t)
      local cuda = t[1]:device() == "cuda"
      -- each call updates the running statistics in training: fresh copies
      local rm, rv = (cuda and rm_g or rm_c):clone(), (cuda and rv_g or rv_c):clone()
      return venom.batch_norm(t[1], t[2], t[3], rm, rv, training, 0.1, 1e-5)
    end, { shape, { C }, { C } })
    local x = venom.randn(shape)
    local rmc, rvc, rmg, rvg = rm_c:clone(), rv_c:clone(), rm_g:clone(), rv_g:clone()
    venom.batch_norm(x, nil, nil, rmc, rvc, training, 0.3, 1e-5)
    venom.batch_norm(x:cuda(), nil, nil, rmg, rvg, training, 0.3, 1e-5)
    close(rmg, rmc, TOL.reduce, name .. ": running_mean updated as on the CPU")
    close(rvg, rvc, TOL.reduce, name .. ": running_var updated as on the CPU")
  end
end

-- strided running statistics (a column of a matrix) are read and written in place
do
  local x = venom.randn(8, 3, 5)
  local stats = venom.rand(3, 2) + 0.5
  local sg = stats:cuda()
  venom.batch_norm(x, nil, nil, stats:select(2, 1), stats:select(2, 2), true, 0.2, 1e-5)
  venom.batch_norm(x:cuda(), nil, nil, sg:select(2, 1), sg:select(2, 2), true, 0.2, 1e-5)
  close(sg, stats, TOL.reduce, "batch_norm: strided running statistics updated in place")
end

-- ---- devices ------------------------------------------------------------------------

tap.error_like(function() venom.conv2d(venom.randn(1, 2, 5, 5):cuda(), venom.randn(3, 2, 3, 3)) end,
  "conv2d: expected all tensors on one device, got weight on cpu and input on cuda",
  "conv2d refuses a CPU weight for a CUDA input, naming both")
tap.error_like(function()
  venom.batch_norm(venom.randn(4, 3):cuda(), nil, nil, venom.zeros(3), venom.ones(3):cuda(), true)
end, "batch_norm: expected all tensors on one device, got running_mean on cpu",
  "batch_norm refuses CPU running statistics for a CUDA input")

-- ---- models/cnn.lua: a few SGD steps on both devices ------------------------------

do
  local CNN = require "models.cnn"
  local optim = require "venom.optim"
  venom.manual_seed(5)
  local cpu_model = CNN({ width = 8, hidden = 32, dropout = 0 })
  local gpu_model = CNN({ width = 8, hidden = 32, dropout = 0 })
  gpu_model:load_state_dict(cpu_model:state_dict())
  gpu_model:cuda()
  local oc = optim.SGD(cpu_model:parameters(), { lr = 0.05, momentum = 0.9 })
  local og = optim.SGD(gpu_model:parameters(), { lr = 0.05, momentum = 0.9 })
  local losses = { cpu = {}, gpu = {} }
  for step = 1, 5 do
    local x, y = venom.randn(16, 1, 28, 28), venom.randint(1, 11, { 16 })
    for _, side in ipairs({ "cpu", "gpu" }) do
      local model, opt = side == "cpu" and cpu_model or gpu_model, side == "cpu" and oc or og
      local xs, ys = side == "cpu" and x or x:cuda(), side == "cpu" and y or y:cuda()
      opt:zero_grad()
      local loss = venom.cross_entropy(model(xs), ys)
      loss:backward()
      opt:step()
      losses[side][step] = loss:item()
    end
  end
  local worst = 0
  for s = 1, 5 do
    worst = math.max(worst, math.abs(losses.gpu[s] - losses.cpu[s]) / math.abs(losses.cpu[s]))
  end
  tap.ok(worst < 1e-4, "models/cnn.lua: 5 SGD steps on CUDA give the CPU's losses")
  tap.diag("losses cpu %s / cuda %s (worst relative difference %g)",
    table.concat(losses.cpu, " "), table.concat(losses.gpu, " "), worst)
  local sc, sg = cpu_model:state_dict(), gpu_model:state_dict()
  for _, k in ipairs({ "2.running_mean", "6.running_var", "5.weight" }) do
    close(sg[k], sc[k], TOL.chain * 10, "models/cnn.lua after 5 steps: " .. k)
  end
  gpu_model:eval()
  cpu_model:eval()
  local x = venom.randn(4, 1, 28, 28)
  close(gpu_model(x:cuda()), cpu_model(x), TOL.chain * 10, "models/cnn.lua in eval mode")
end

tap.done()
