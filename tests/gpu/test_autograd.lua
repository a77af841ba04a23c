-- Gradients on the GPU against the CPU: every differentiable op on its own,
-- then a small MLP (linear, relu, gelu, softmax, cross_entropy, broadcasting,
-- sum/mean, max), each gradient on the device of its leaf; to_device carries
-- gradients back across devices; dropout draws the same mask on both devices
-- for the same seed.
local venom = require "venom"
if not venom.cuda.is_available() then print("1..0 # SKIP no CUDA device") os.exit(0) end
package.path = "tests/gpu/?.lua;tests/lua/?.lua;" .. package.path
local tap = require "tap"
local G = require "gpucheck"
local TOL, close = G.TOL, G.close

venom.cuda.set_allow_tf32(false)
venom.manual_seed(99)

-- Leaves with the same values on both devices: the CUDA one is a copy made
-- before requires_grad, so it is a leaf of its own (not a to_device output).
local function leaves(values)
  local cpu, gpu = {}, {}
  for k, v in pairs(values) do
    cpu[k] = v:clone():requires_grad_(true)
    gpu[k] = v:cuda():requires_grad_(true)
  end
  return cpu, gpu
end

-- f(leaves, consts) → a scalar loss; runs it on both devices, backward, and
-- compares every leaf's gradient.
local function grads(name, tol, f, values, consts)
  local cpu, gpu = leaves(values)
  local cc, gc = {}, {}
  for k, v in pairs(consts or {}) do
    cc[k] = v
    gc[k] = venom.is_tensor(v) and v:cuda() or v
  end
  f(cpu, cc):backward()
  local ok, err = pcall(function() f(gpu, gc):backward() end)
  if not ok then
    tap.ok(false, name)
    tap.diag("error on CUDA: %s", tostring(err))
    return
  end
  local names = {}
  for k in pairs(values) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    local g = gpu[k].grad
    if not g then
      tap.ok(false, name .. ": gradient of " .. k)
      tap.diag("no gradient on the CUDA leaf")
    else
      -- the rule by name (close() also refuses a CPU result): a gradient lands on its leaf's device
      tap.is(g:device(), "cuda", name .. ": the gradient of " .. k .. " is on CUDA")
      close(g, cpu[k].grad, tol, name .. ": gradient of " .. k)
    end
  end
end

-- each op on its own: loss = Σ op(x)·c with a random c, so that every
-- element's gradient differs
do
  local shape = { 7, 33 }
  local c = venom.randn(shape)
  local x = G.randn_nz(shape) * 2
  local pos = G.uniform(0.2, 3, shape)
  local unary = {
    { "neg", function(t) return -t end, x },
    { "abs", function(t) return t:abs() end, x },
    { "exp", function(t) return t:exp() end, x },
    { "log", function(t) return t:log() end, pos },
    { "sqrt", function(t) return t:sqrt() end, pos },
    { "pow_scalar 3", function(t) return t ^ 3 end, x },
    { "pow_scalar -0.5", function(t) return t ^ -0.5 end, pos },
    { "relu", function(t) return t:relu() end, x },
    { "gelu", function(t) return t:gelu() end, x },
    { "tanh", function(t) return t:tanh() end, x },
    { "sigmoid", function(t) return t:sigmoid() end, x },
    { "clamp(-1, 1)", function(t) return t:clamp(-1, 1) end, x },
    { "softmax dim 1", function(t) return t:softmax(1) end, x },
    { "softmax dim 2", function(t) return t:softmax(2) end, x },
    { "log_softmax dim 1", function(t) return t:log_softmax(1) end, x },
    { "log_softmax dim 2", function(t) return t:log_softmax(2) end, x },
    { "max dim 2", function(t) return t:max(2, true) end, x },
    { "min dim 1", function(t) return t:min(1, true) end, x },
    { "mean dim 1", function(t) return t:mean(1, true) end, x },
    { "sum dim 2", function(t) return t:sum(2, true) end, x },
    { "transpose + contiguous", function(t) return t:t():contiguous():t() end, x },
    { "narrow", function(t) return t:narrow(2, 4, 20):sum(2, true) end, x },
    { "select", function(t) return t:select(2, 5):unsqueeze(2) end, x },
    { "index_select with repeats", function(t)
      return t:index_select(2, venom.tensor({ 5, 1, 5, 33, 2 }, "i64"):to(t:device())):sum(2, true)
    end, x },
    { "masked_fill", function(t) return t:masked_fill(t:gt(0.5), 0) end, x },
    { "where", function(t) return venom.where(t:gt(0), t * 2, t:exp()) end, x },
    { "to_dtype f32 → f32 (identity)", function(t) return t:float() * 1 end, x },
  }
  for _, u in ipairs(unary) do
    grads(u[1], TOL.f32, function(L, K) return (u[2](L.x) * K.c):sum() end, { x = u[3] }, { c = c })
  end
  grads("max over all", TOL.f32, function(L) return L.x:max() * 3 end, { x = x })
  grads("mean over all", TOL.f32, function(L) return L.x:mean() end, { x = x })

  local binary = {
    { "add broadcasting (7,33)+(33)", function(a, b) return a + b end, x, venom.randn(33) },
    { "sub broadcasting (7,1)", function(a, b) return a - b end, x, venom.randn(7, 1) },
    { "mul broadcasting", function(a, b) return a * b end, x, venom.randn(1, 33) },
    { "div", function(a, b) return a / b end, x, G.randn_nz(shape) },
    { "pow tensor^tensor", function(a, b) return a:pow(b) end, pos, venom.randn(shape) },
    { "matmul (7,33)·(33,5)", function(a, b) return a:matmul(b) end, x, venom.randn(33, 5) },
    { "matmul aᵀ-view·b", function(a, b) return a:t():matmul(b) end, x, venom.randn(7, 5) },
    { "mse_loss", function(a, b) return venom.mse_loss(a, b, "none") end, x, venom.randn(shape) },
  }
  for _, bcase in ipairs(binary) do
    local f = bcase[2]
    grads(bcase[1], TOL.f32, function(L, K)
      local y = f(L.a, L.b)
      if y:dim() == 2 and y:size(1) == 7 and y:size(2) == 33 then y = y * K.c end
      return y:sum()
    end, { a = bcase[3], b = bcase[4] }, { c = c })
  end
  grads("batched matmul with broadcast batch", TOL.f32, function(L) return (L.a:matmul(L.b) ^ 2):sum() end,
    { a = venom.randn(2, 1, 5, 7), b = venom.randn(3, 7, 4) })
  grads("linear with bias", TOL.f32, function(L) return (venom.linear(L.x, L.w, L.b) ^ 2):mean() end,
    { x = venom.randn(5, 3, 20), w = venom.randn(16, 20), b = venom.randn(16) })
  local target = (venom.rand(33) * 10):long() + 1
  for _, red in ipairs({ "mean", "sum" }) do
    grads("cross_entropy " .. red, TOL.f32, function(L, K) return venom.cross_entropy(L.z, K.t, red) end,
      { z = venom.randn(33, 10) * 3 }, { t = target })
    grads("nll_loss " .. red, TOL.f32, function(L, K) return venom.nll_loss(L.z:log_softmax(), K.t, red) end,
      { z = venom.randn(33, 10) * 3 }, { t = target })
  end
  grads("cross_entropy none", TOL.f32, function(L, K) return (venom.cross_entropy(L.z, K.t, "none") * K.w):sum() end,
    { z = venom.randn(33, 10) * 3 }, { t = target, w = venom.randn(33) })
  grads("cat along dim 2", TOL.f32, function(L, K) return (venom.cat({ L.a, L.b }, 2) * K.c):sum() end,
    { a = venom.randn(7, 13), b = venom.randn(7, 20) }, { c = c })
end

-- a small MLP -------------------------------------------------------------------------------
do
  local values = {
    W1 = venom.randn(16, 20) * 0.3, b1 = venom.randn(16) * 0.1,
    W2 = venom.randn(10, 16) * 0.3, b2 = venom.randn(10) * 0.1,
    s = venom.randn(1, 10) * 0.5,
  }
  local consts = { x = venom.randn(33, 20), t = (venom.rand(33) * 10):long() + 1 }
  local function mlp(L, K)
    local h = venom.linear(K.x, L.W1, L.b1):relu()
    local h2 = K.x:matmul(L.W1:t()):gelu() -- the same weight through matmul of a transposed view
    local z = venom.linear(h + h2 * 0.5, L.W2, L.b2) + L.s -- broadcasting add (33,10)+(1,10)
    local loss = venom.cross_entropy(z, K.t)
    loss = loss + (z:softmax(2) ^ 2):sum(2):mean() + z:max(2):mean() * 0.1 + z:tanh():sum() * 0.01
    return loss
  end
  grads("MLP", TOL.chain, mlp, values, consts)
  -- the same model through nn modules moved with Module:cuda()
  local nn = require "venom.nn"
  venom.manual_seed(5)
  local a = nn.Sequential(nn.Linear(20, 16), nn.GELU(), nn.Linear(16, 10))
  venom.manual_seed(5)
  local b = nn.Sequential(nn.Linear(20, 16), nn.GELU(), nn.Linear(16, 10)):cuda()
  venom.cross_entropy(a(consts.x), consts.t):backward()
  venom.cross_entropy(b(consts.x:cuda()), consts.t:cuda()):backward()
  local pa, pb = a:parameters(), b:parameters()
  for i = 1, #pa do
    tap.is(pb[i]:device(), "cuda", "Module:cuda() moved parameter " .. i)
    tap.is(pb[i].grad and pb[i].grad:device(), "cuda", "nn model on CUDA: gradient of parameter " .. i .. " is on CUDA")
    close(pb[i].grad, pa[i].grad, TOL.chain, "nn model on CUDA: gradient of parameter " .. i)
  end
end

-- to_device is differentiable ------------------------------------------------------------
do
  local v = venom.randn(7, 33)
  local leaf = v:clone():requires_grad_(true)
  local loss = (leaf:cuda() ^ 2):sum()
  tap.is(loss:device(), "cuda", "the loss is on CUDA")
  loss:backward()
  tap.is(leaf.grad and leaf.grad:device(), "cpu", "the gradient arrives on the CPU leaf")
  tap.ok(leaf.grad and G.rel_err(leaf.grad, v * 2) <= TOL.f32, "... and it is 2·x")
  local gleaf = v:cuda():requires_grad_(true)
  local l2 = (gleaf:cpu() * 3):sum()
  l2:backward()
  close(gleaf.grad, venom.full({ 7, 33 }, 3), 0, "a CUDA leaf used on the CPU gets its gradient on CUDA")
end

-- dropout: the same mask on both devices for the same seed ---------------------------------------
do
  local x = venom.randn(33, 100) + 2 -- no zeros: a zero output means dropped
  local xg = x:cuda()
  for _, p in ipairs({ 0.1, 0.5, 0.9 }) do
    venom.manual_seed(2024)
    local a = venom.dropout(x, p)
    venom.manual_seed(2024)
    local b = venom.dropout(xg, p)
    close(b, a, 0, ("dropout p = %g: the same output on CUDA as on the CPU for the same seed"):format(p))
    local dropped = b:eq(0):sum():item() / b:numel()
    tap.ok(math.abs(dropped - p) < 0.05, ("dropout p = %g drops about p (%.3f)"):format(p, dropped))
  end
  -- backward: the gradient is the mask, also identical
  local values = { x = x }
  grads("dropout p = 0.3 backward", 0, function(L)
    venom.manual_seed(77)
    return (venom.dropout(L.x, 0.3) * 2):sum()
  end, values)
  venom.manual_seed(3)
  local a1 = venom.dropout(xg, 0.5)
  local a2 = venom.dropout(xg, 0.5)
  tap.ok(a1:ne(a2):sum():item() > 0, "two dropout calls draw different masks")
  close(venom.dropout(xg, 0.5, false), x, 0, "dropout in eval mode is the identity on CUDA")
end

tap.done()
