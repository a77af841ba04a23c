-- Optimizer steps on CUDA tensors against the CPU (venom.sgd_step /
-- adam_step directly, and venom.optim on a model moved with :cuda()), and
-- the GPU random number generator: range, moments, independence,
-- repeatability under manual_seed.
local venom = require "venom"
if not venom.cuda.is_available() then print("1..0 # SKIP no CUDA device") os.exit(0) end
package.path = "tests/gpu/?.lua;tests/lua/?.lua;" .. package.path
local tap = require "tap"
local G = require "gpucheck"
local TOL, close = G.TOL, G.close
local nn = require "venom.nn"
local optim = require "venom.optim"

venom.cuda.set_allow_tf32(false)
venom.manual_seed(7)

-- venom.sgd_step / adam_step: the same gradients on both devices, 4 steps ---------------------
do
  local shapes = { { 1 }, { 7 }, { 33, 7 }, { 1000 } }
  local sgd_cases = {
    { "plain", 0, 0, 0, false },
    { "momentum 0.9", 0.9, 0, 0, false },
    { "momentum 0.9, dampening 0.1", 0.9, 0.1, 0, false },
    { "nesterov", 0.9, 0, 0, true },
    { "momentum + weight decay 0.01", 0.9, 0, 0.01, false },
  }
  for _, shape in ipairs(shapes) do
    local label = "(" .. table.concat(shape, ", ") .. ")"
    for _, c in ipairs(sgd_cases) do
      local name, mu, damp, wd, nest = c[1], c[2], c[3], c[4], c[5]
      local p = venom.randn(shape)
      local pg = p:cuda()
      local buf = mu > 0 and venom.zeros(shape) or nil
      local bufg = buf and buf:cuda() or nil
      local ok, err = pcall(function()
        for step = 1, 4 do
          local g = venom.randn(shape)
          venom.sgd_step(p, g, buf, 0.1, mu, damp, wd, nest, step == 1)
          venom.sgd_step(pg, g:cuda(), bufg, 0.1, mu, damp, wd, nest, step == 1)
        end
      end)
      if not ok then
        tap.ok(false, "sgd_step " .. name .. " " .. label)
        tap.diag("%s", tostring(err))
      else
        close(pg, p, TOL.f32, "sgd_step " .. name .. " " .. label .. ": parameter after 4 steps")
        if buf then close(bufg, buf, TOL.f32, "sgd_step " .. name .. " " .. label .. ": momentum buffer") end
      end
    end
    for _, c in ipairs({ { "Adam", 0, false }, { "Adam + L2 0.01", 0.01, false }, { "AdamW 0.01", 0.01, true } }) do
      local name, wd, decoupled = c[1], c[2], c[3]
      local p = venom.randn(shape)
      local m, v = venom.zeros(shape), venom.zeros(shape)
      local pg, mg, vg = p:cuda(), m:cuda(), v:cuda()
      local ok, err = pcall(function()
        for step = 1, 4 do
          local g = venom.randn(shape)
          venom.adam_step(p, g, m, v, step, 1e-2, 0.9, 0.999, 1e-8, wd, decoupled)
          venom.adam_step(pg, g:cuda(), mg, vg, step, 1e-2, 0.9, 0.999, 1e-8, wd, decoupled)
        end
      end)
      if not ok then
        tap.ok(false, "adam_step " .. name .. " " .. label)
        tap.diag("%s", tostring(err))
      else
        close(pg, p, TOL.f32, "adam_step " .. name .. " " .. label .. ": parameter after 4 steps")
        close(mg, m, TOL.f32, "adam_step " .. name .. " " .. label .. ": exp_avg")
        close(vg, v, TOL.f32, "adam_step " .. name .. " " .. label .. ": exp_avg_sq")
      end
    end
  end
  tap.error_like(function() venom.sgd_step(venom.randn(3):cuda(), venom.randn(3), nil, 0.1) end, "cuda",
    "sgd_step with the gradient on another device is an error")
end

-- venom.optim on a model moved with :cuda(), 5 steps ------------------------------------------------
do
  local x = venom.randn(64, 20)
  local t = (venom.rand(64) * 10):long() + 1
  local xg, tg = x:cuda(), t:cuda()
  local function model(seed)
    venom.manual_seed(seed)
    return nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 10))
  end
  local cases = {
    { "SGD", function(ps) return optim.SGD(ps, { lr = 0.1 }) end },
    { "SGD momentum + weight decay", function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.9, weight_decay = 1e-3 }) end },
    { "SGD nesterov", function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.9, nesterov = true }) end },
    { "Adam", function(ps) return optim.Adam(ps, { lr = 1e-2 }) end },
    { "Adam + L2", function(ps) return optim.Adam(ps, { lr = 1e-2, weight_decay = 1e-3 }) end },
    { "AdamW", function(ps) return optim.AdamW(ps, { lr = 1e-2 }) end },
  }
  for _, c in ipairs(cases) do
    local a, b = model(11), model(11):cuda()
    local oa, ob = c[2](a:parameters()), c[2](b:parameters())
    local ok, err = pcall(function()
      for _ = 1, 5 do
        oa:zero_grad()
        venom.cross_entropy(a(x), t):backward()
        oa:step()
        ob:zero_grad()
        venom.cross_entropy(b(xg), tg):backward()
        ob:step()
      end
    end)
    if not ok then
      tap.ok(false, "optim." .. c[1] .. " on CUDA")
      tap.diag("%s", tostring(err))
    else
      local pa, pb = a:parameters(), b:parameters()
      for i = 1, #pa do
        close(pb[i], pa[i], TOL.chain, ("optim.%s: parameter %d after 5 steps as on the CPU"):format(c[1], i))
      end
      local st = ob.state[pb[1]]
      local buf = st and (st.momentum_buffer or st.exp_avg)
      if buf then tap.is(buf:device(), "cuda", "optim." .. c[1] .. ": its state lives on CUDA") end
      local la, lb = venom.cross_entropy(a(x), t):item(), venom.cross_entropy(b(xg), tg):item()
      tap.ok(math.abs(la - lb) <= 1e-4 * math.abs(la), ("optim.%s: the loss after training agrees (%.6f vs %.6f)")
        :format(c[1], lb, la))
    end
  end
end

-- random numbers on the GPU -----------------------------------------------------------------------
do
  local N = 1000000
  venom.manual_seed(1)
  local u = venom.rand(N, { device = "cuda" })
  tap.is(u:device(), "cuda", "rand(..., {device = 'cuda'}) is on CUDA")
  tap.ok(u:min():item() >= 0 and u:max():item() < 1, "uniform values lie in [0, 1)")
  local mean = u:mean():item()
  local var = ((u - mean) ^ 2):mean():item()
  -- standard errors on 10^6 samples: mean 2.9e-4, variance 7e-5
  tap.near(mean, 0.5, 3e-3, "uniform mean ≈ 1/2")
  tap.near(var, 1 / 12, 1e-3, "uniform variance ≈ 1/12")
  tap.near(u:lt(0.25):sum():item() / N, 0.25, 3e-3, "a quarter of the uniforms lie below 1/4")
  tap.near(u:ge(0.9):sum():item() / N, 0.1, 3e-3, "a tenth lie at or above 0.9")
  -- neighbours are uncorrelated (a counter-based generator could repeat or correlate)
  local a, b = u:narrow(1, 1, N - 1) - 0.5, u:narrow(1, 2, N - 1) - 0.5
  tap.near((a * b):mean():item() * 12, 0, 1e-2, "neighbouring uniforms are uncorrelated")

  local z = venom.randn(N, { device = "cuda" })
  local zm = z:mean():item()
  local zs = math.sqrt(((z - zm) ^ 2):mean():item())
  tap.near(zm, 0, 1e-2, "normal mean ≈ 0")
  tap.near(zs, 1, 1e-2, "normal std ≈ 1")
  tap.near(z:abs():lt(1):sum():item() / N, 0.682689, 3e-3, "68.3% of normals lie within 1 std")
  tap.near(z:abs():gt(3):sum():item() / N, 0.0026998, 5e-4, "0.27% lie beyond 3 std")
  local za, zb = z:narrow(1, 1, N - 1), z:narrow(1, 2, N - 1)
  tap.near((za * zb):mean():item(), 0, 1e-2, "neighbouring normals are uncorrelated (Box–Muller pairs too)")
  tap.ok(z:ne(z):sum():item() == 0 and z:abs():max():item() < 10, "no NaN or absurd normals")

  -- odd sizes and shapes
  local small = venom.rand(1, { device = "cuda" })
  tap.ok(small:item() >= 0 and small:item() < 1, "rand of 1 element on CUDA")
  local shaped = venom.randn(5, 1, 7, { device = "cuda" })
  tap.is(G.shape_str(shaped), "(5, 1, 7)", "randn with a shape on CUDA")
  tap.is(venom.rand(0, { device = "cuda" }):numel(), 0, "rand of 0 elements on CUDA")

  -- repeatable under manual_seed; different seeds and successive calls differ
  venom.manual_seed(42)
  local r1, n1 = venom.rand(1000, { device = "cuda" }), venom.randn(33, { device = "cuda" })
  venom.manual_seed(42)
  local r2, n2 = venom.rand(1000, { device = "cuda" }), venom.randn(33, { device = "cuda" })
  close(r2, r1:cpu():cuda(), 0, "rand on CUDA repeats under manual_seed")
  close(n2, n1:cpu():cuda(), 0, "randn on CUDA repeats under manual_seed")
  venom.manual_seed(43)
  local r3 = venom.rand(1000, { device = "cuda" })
  tap.ok(r3:ne(r1):sum():item() > 990, "another seed gives other numbers")
  local r4 = venom.rand(1000, { device = "cuda" })
  tap.ok(r4:ne(r3):sum():item() > 990, "successive calls give other numbers")
  -- the GPU stream shares the engine RNG: a CUDA draw advances the CPU stream
  venom.manual_seed(5)
  local c1 = venom.rand(4):totable()
  venom.manual_seed(5)
  venom.rand(4, { device = "cuda" })
  local c2 = venom.rand(4):totable()
  tap.ok(c1[1] ~= c2[1], "a CUDA draw takes its key from the engine RNG (the CPU stream moves on)")
end

tap.done()
