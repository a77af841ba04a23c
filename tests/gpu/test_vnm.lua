-- V:N:M layers on the GPU (Sparse Tensor Cores, kernels/vnm_sptc.cu through
-- engine/vnm_cuda.c) against the CPU kernels: the forward SpMM, the input
-- gradient and the values' gradient (SDDMM) for every V in {16, 32, 64, 128}
-- and M in {4, 5, 8, 16, 32, 64}, with rows, columns and batch rows that
-- fill no tile; f16 under autocast; the plain calls; SparseLinear on CUDA
-- (the packed values follow optimizer steps, to_dense, checkpoints); GMP
-- (vnm, nm, unstructured) pruning a CUDA model; the layouts the kernels
-- refuse. On a compute capability 9.0 device with a build that has the
-- sm_90a code, the forward of every V % 64 == 0 case runs the wgmma kernel
-- (kernels/vnm_wgmma.cu), the others the mma.sp one (kernels.h,
-- vnk_vnm_fwd); bench/vnm_gpu checks and times both on the same shapes.
-- The input gradient runs both ways: the sparse kernel (k_dx) and, with
-- venom.set_vnm_cuda_dx("dense"), cuBLAS on the dense W rebuilt per values
-- version, guarded against Inf in dY.
local venom = require "venom"
if not venom.cuda.is_available() then print("1..0 # SKIP no CUDA device") os.exit(0) end
package.path = "tests/gpu/?.lua;tests/lua/?.lua;" .. package.path
local tap = require "tap"
local G = require "gpucheck"
local nn = require "venom.nn"
local optim = require "venom.optim"
local sparse = require "venom.sparse"
local prune = require "venom.prune"
local close = G.close

venom.manual_seed(7)

-- The GPU rounds x, the values and dY to 16 bits (round to nearest even,
-- as x:to("bf16") does); the CPU reference gets the same rounded operands,
-- so the two differ only in the order of the f32 sums.
local TOL = 1e-4

local function round(t, dtype) return t:to(dtype):float() end

-- Runs fn; on an error, fails `name` with the message and returns nil.
local function try(name, fn)
  local r = { pcall(fn) }
  if r[1] then return unpack(r, 2, table.maxn(r)) end
  tap.ok(false, name)
  tap.diag("error on CUDA: %s", tostring(r[2]))
end

-- y = x·Wᵀ + b and its three gradients on both devices.
local function check_layer(V, M, R, K, B, dtype)
  local name = ("V=%d M=%d, %d × %d, B=%d, %s, dx %s"):format(V, M, R, K, B, dtype, venom.vnm_cuda_dx())
  local s = venom.vnm_from_dense(G.randn_nz(R, K), V, 2, M)
  local v = round(s:values(), dtype)
  local x, b = round(G.randn_nz(B, K), dtype), G.randn_nz(R)
  local gy = round(G.randn_nz(B, R), dtype)

  local xc, vc, bc = x:clone():requires_grad_(true), v:clone():requires_grad_(true),
    b:clone():requires_grad_(true)
  venom.vnm_linear(xc, s, vc, bc):backward(gy)

  local xg, vg, bg = x:cuda():requires_grad_(true), v:cuda():requires_grad_(true),
    b:cuda():requires_grad_(true)
  local y = try(name, function()
    local y = venom.autocast(dtype == "f16" and "f16" or "f32",
      function() return venom.vnm_linear(xg, s, vg, bg) end)
    y:backward(gy:cuda())
    return y
  end)
  if not y then return end
  close(y, venom.no_grad(function() return venom.vnm_linear(x, s, v, b) end), TOL, name .. ": y")
  close(xg.grad, xc.grad, TOL, name .. ": dx")
  close(vg.grad, vc.grad, TOL, name .. ": dvalues")
  close(bg.grad, bc.grad, TOL, name .. ": dbias")
end

for _, V in ipairs({ 16, 32, 64, 128 }) do
  for _, M in ipairs({ 4, 5, 8, 16, 32, 64 }) do
    -- A partial V-block and 16-row tile; K = 9M + 3 leaves padding columns
    -- and a partial k-tile; 37 batch rows fill neither 8 nor 64.
    check_layer(V, M, 2 * V + 5, 9 * M + 3, 37, "bf16")
  end
end
check_layer(64, 8, 300, 1000, 300, "bf16") -- several batch tiles and V-blocks
check_layer(32, 8, 48, 64, 1, "bf16")      -- one row
check_layer(64, 8, 133, 203, 41, "f16")
check_layer(16, 5, 40, 47, 9, "f16")
check_layer(256, 8, 300, 203, 37, "bf16") -- V = 256: the input gradient has no limit on V
check_layer(64, 8, 128, 203, 70, "bf16")  -- R % 8 == 0: dY's rows go by cp.async, not plain loads
check_layer(192, 8, 200, 700, 130, "bf16") -- wgmma: 3 CTAs per block, 2 batch tiles, the last partial
check_layer(128, 16, 90, 1030, 129, "f16") -- wgmma f16: 33 k-tiles, rows past R in the last CTA

-- The plain calls ---------------------------------------------------------------
do
  local s = venom.vnm_from_dense(G.randn_nz(70, 90), 32, 2, 6)
  local v = round(s:values(), "bf16")
  local x, dy = round(G.randn_nz(5, 3, 90), "bf16"), round(G.randn_nz(5, 3, 70), "bf16")
  local xg, vg, dyg = x:cuda(), v:cuda(), dy:cuda()
  local y = try("vnm_spmm", function() return venom.vnm_spmm(s, vg, xg) end)
  if y then close(y, venom.vnm_spmm(s, v, x), TOL, "vnm_spmm on CUDA (3-D input)") end
  local dx = try("vnm_spmm_t", function() return venom.vnm_spmm_t(s, vg, dyg) end)
  if dx then close(dx, venom.vnm_spmm_t(s, v, dy), TOL, "vnm_spmm_t on CUDA (3-D gradient)") end
  local dv = try("vnm_sddmm", function() return venom.vnm_sddmm(s, dyg, xg) end)
  if dv then close(dv, venom.vnm_sddmm(s, dy, x), TOL, "vnm_sddmm on CUDA") end
  -- M > 128 runs forward (only dX needs M ≤ 128).
  local wide = venom.vnm_from_dense(G.randn_nz(32, 600), 16, 2, 256)
  local wv, wx = round(wide:values(), "bf16"), round(G.randn_nz(4, 600), "bf16")
  local wy = try("M=256 forward", function() return venom.vnm_linear(wx:cuda(), wide, wv:cuda()) end)
  if wy then close(wy, venom.vnm_linear(wx, wide, wv), TOL, "M=256: the forward runs on CUDA") end
end

-- What the GPU caches per version of the values tensor (the packed values,
-- the dense W of the dX path): op(s, values, arg) on CUDA, then the values
-- written in place (copy_, as an optimizer step does) and op again, each
-- against the CPU; `again` names what the second call must have rebuilt.
local function check_values_cache(label, op, s, v, v2, arg, again)
  local vg, ag = v:cuda(), arg:cuda()
  local y1 = try(label, function() return op(s, vg, ag) end)
  if y1 then
    close(y1, op(s, v, arg), TOL, label .. ": first call")
    vg:copy_(v2:cuda())
    close(op(s, vg, ag), op(s, v2, arg), TOL, label .. ": " .. again)
  end
end

do
  local s = venom.vnm_from_dense(G.randn_nz(48, 64), 16, 2, 8)
  check_values_cache("packed cache", venom.vnm_spmm, s, round(s:values(), "bf16"),
    round(G.randn_nz(48, 16), "bf16"), round(G.randn_nz(6, 64), "bf16"),
    "values written in place are packed again")
end

-- dX with an Inf in dY: the CPU multiplies kept weights only, so a column no
-- row of that block keeps stays finite; the GPU must not turn 0 · Inf into NaN
-- (the sparse kernel's kept-only path; on the dense path the flag set while
-- converting dY makes the sparse kernel rewrite cuBLAS's dX).
local function check_inf_dx()
  local path = venom.vnm_cuda_dx()
  local s = venom.vnm_from_dense(G.randn_nz(32, 64), 16, 2, 8)
  local v = round(s:values(), "bf16")
  local dy = round(G.randn_nz(4, 32), "bf16")
  dy:narrow(1, 2, 1):narrow(2, 3, 1):fill_(math.huge)
  local dx = try("dx with Inf", function() return venom.vnm_spmm_t(s, v:cuda(), dy:cuda()) end)
  if dx then
    local want, got = venom.vnm_spmm_t(s, v, dy):totable(), dx:cpu():totable()
    local bad = 0
    for i = 1, #want do
      for j = 1, #want[i] do
        local w, g = want[i][j], got[i][j]
        if (w == w) and (g ~= g) then bad = bad + 1 end
      end
    end
    tap.is(bad, 0, "dX (" .. path .. ") with an Inf in dY: no NaN where the CPU is not NaN")
    close(dx:narrow(1, 1, 1), venom.vnm_spmm_t(s, v, dy):narrow(1, 1, 1), TOL,
      "... and a row of dY without Inf gives the CPU's dX")
  end
end
check_inf_dx()

-- The dense dX path (venom.set_vnm_cuda_dx "dense"): layouts with partial
-- blocks, groups and tiles, f16, the Inf guard, and the dense W following an
-- in-place write of the values (rebuilt with the packed values).
venom.set_vnm_cuda_dx("dense")
for _, V in ipairs({ 16, 64, 128 }) do
  for _, M in ipairs({ 4, 5, 8, 32 }) do check_layer(V, M, 2 * V + 5, 9 * M + 3, 37, "bf16") end
end
check_layer(64, 4, 300, 1000, 300, "bf16")
check_layer(16, 5, 40, 47, 9, "f16")
check_inf_dx()
do
  local s = venom.vnm_from_dense(G.randn_nz(48, 64), 16, 2, 4)
  check_values_cache("dense W cache", venom.vnm_spmm_t, s, round(s:values(), "bf16"),
    round(G.randn_nz(48, 32), "bf16"), round(G.randn_nz(6, 48), "bf16"),
    "values written in place give a new dense W")
end
venom.set_vnm_cuda_dx("auto")
-- "auto" at a shape its rule sends to cuBLAS (M = 4, 256 rows, 2^20 weights).
check_layer(64, 4, 1024, 1024, 256, "bf16")

-- Inputs that start to require a gradient after the forward: the backward
-- rebuilds what the forward did not keep (the packed values, Xᵀ).
do
  local s = venom.vnm_from_dense(G.randn_nz(40, 70), 16, 2, 8)
  local v, x = round(s:values(), "bf16"), round(G.randn_nz(9, 70), "bf16")
  local gy = round(G.randn_nz(9, 40), "bf16")
  local vc, xc = v:clone():requires_grad_(true), x:clone():requires_grad_(true)
  venom.vnm_linear(xc, s, vc):backward(gy)
  for _, late in ipairs({ "x", "values" }) do
    local vg, xg = v:cuda(), x:cuda()
    if late == "x" then vg:requires_grad_(true) else xg:requires_grad_(true) end
    local y = try("late " .. late, function() return venom.vnm_linear(xg, s, vg) end)
    if y then
      if late == "x" then xg:requires_grad_(true) else vg:requires_grad_(true) end
      local ok, err = pcall(function() y:backward(gy:cuda()) end)
      tap.ok(ok, late .. " made trainable after the forward: backward runs" .. (ok and "" or ": " .. tostring(err)))
      if ok then
        close(xg.grad, xc.grad, TOL, late .. " made trainable after the forward: dx")
        close(vg.grad, vc.grad, TOL, late .. " made trainable after the forward: dvalues")
      end
    end
  end
end

-- Layouts the kernels refuse, and mixed devices -----------------------------------------
do
  local s8 = venom.vnm_from_dense(G.randn_nz(16, 32), 8, 2, 8)
  tap.error_like(function() return venom.vnm_linear(venom.randn(2, 32):cuda(), s8, s8:values():cuda()) end,
    "V must be a multiple of 16.*V=8", "V=8 on CUDA: an error naming V")
  local wide = venom.vnm_from_dense(G.randn_nz(32, 600), 16, 2, 256)
  local x = venom.randn(2, 600):cuda():requires_grad_(true)
  tap.error_like(function() return venom.vnm_linear(x, wide, wide:values():cuda()) end,
    "M <= 128.*M=256", "M=256 with an input that needs a gradient: an error naming M")
  local s = venom.vnm_from_dense(G.randn_nz(16, 32), 16, 2, 8)
  tap.error_like(function() return venom.vnm_linear(venom.randn(2, 32):cuda(), s, s:values()) end,
    "vnm_linear: .*on cpu and another on cuda", "CPU values with a CUDA input: an error naming both devices")
end

-- SparseLinear on CUDA: optimizer steps, to_dense, checkpoints ---------------------------
do
  local layer = nn.SparseLinear(96, 64, { V = 32, M = 8 })
  layer:cuda()
  tap.is(layer.values:device(), "cuda", "SparseLinear:cuda() moves the values")
  tap.is(layer.matrix:values():device(), "cuda", "... and the matrix holds the moved values")
  local opt = optim.AdamW(layer:parameters(), { lr = 1e-2 })
  local x = round(G.randn_nz(20, 96), "bf16")
  for _ = 1, 3 do
    local y = layer(x:cuda())
    local loss = (y * y):mean()
    loss:backward()
    opt:step()
    opt:zero_grad()
  end
  local m = layer.matrix
  local vals = round(layer.values:cpu(), "bf16")
  local y = layer(x:cuda())
  close(y, venom.vnm_linear(x, m, vals, layer.bias:cpu()), TOL,
    "after 3 AdamW steps the GPU forward uses the updated values (no stale packed copy)")
  local want = venom.vnm_from_pattern(64, 96, 32, 2, 8, m:columns(), m:indices(),
    layer.values:cpu()):to_dense()
  G.same(layer:to_dense(), want, "SparseLinear:to_dense() on CUDA: the current values, on cuda")

  local path = os.tmpname()
  venom.checkpoint.save(path, { model = layer })
  local copy = nn.SparseLinear(96, 64, { V = 32, M = 8 }):cuda()
  venom.checkpoint.load(path, { model = copy })
  os.remove(path)
  G.same(copy(x:cuda()), y:cpu(), "a CUDA layer loaded from a checkpoint computes the same y")
  layer:cpu()
  close(y, layer(x), 2e-2, "back on the CPU (f32) the layer agrees with its bf16 GPU forward")
end

-- GMP on a CUDA model ----------------------------------------------------------------------
-- With lr = 0 the weights never change, so the CPU and the GPU run must pick
-- the same patterns at every event; recompression runs on the CPU for both.
local function gmp_run(device, mode, pattern, init)
  local model = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 96), nn.ReLU(),
    nn.Linear(96, 10))
  model:load_state_dict(init)
  model:to(device)
  local opt = optim.AdamW(model:parameters(), { lr = 0 })
  local o = { optimizer = opt, mode = mode, t0 = 1, n = 3 }
  if mode == "unstructured" then o.s_f = pattern else o.pattern = pattern end
  local gmp = prune.GMP(model, o)
  local x = venom.randn(16, 64):to(device)
  for _ = 1, 5 do
    local loss = model(x):sum()
    loss:backward()
    opt:step()
    opt:zero_grad()
    gmp:step()
  end
  return model, opt, gmp
end

for _, case in ipairs({ { "vnm", "16:2:8" }, { "nm", "2:4" }, { "unstructured", 0.75 } }) do
  local mode, pattern = case[1], case[2]
  local init = nn.Sequential(nn.Linear(64, 96), nn.ReLU(), nn.Linear(96, 96), nn.ReLU(),
    nn.Linear(96, 10)):state_dict()
  local cm, _, cgmp = gmp_run("cpu", mode, pattern, init)
  local gm, gopt, ggmp = try("GMP " .. mode .. " on CUDA",
    function() return gmp_run("cuda", mode, pattern, init) end)
  if gm then
    for _, key in ipairs({ 1, 3 }) do
      local g, c = gm[key], cm[key]
      if mode == "vnm" then
        tap.is(getmetatable(g), sparse.SparseLinear, "GMP vnm: layer " .. key .. " is a SparseLinear")
        tap.is(g.values:device(), "cuda", "GMP vnm: layer " .. key .. "'s values are on cuda")
        local held = false
        for _, p in ipairs(gopt.params) do held = held or p == g.values end
        tap.ok(held, "GMP vnm: the optimizer holds layer " .. key .. "'s new values")
        G.same(g:to_dense(), c:to_dense(), "GMP vnm: layer " .. key .. " has the CPU run's weights")
      else
        G.same(g.weight, c.weight:detach(), "GMP " .. mode .. ": layer " .. key .. " has the CPU run's masked weights")
      end
    end
    -- The masks: masked modes apply theirs after every step, on cuda; vnm's
    -- (the final pattern, after the dense shadow) live on the CPU. Both
    -- equal the CPU run's.
    local checked = 0
    for i, L in ipairs(ggmp.layers) do
      local gmask, cmask = L.alive, cgmp.layers[i].alive
      tap.is(gmask ~= nil, cmask ~= nil, ("GMP %s: layer %s has a mask as on the CPU")
        :format(mode, L.path))
      if gmask and cmask then
        checked = checked + 1
        tap.is(gmask:device(), mode == "vnm" and "cpu" or "cuda",
          ("GMP %s: layer %s's mask is where it is used"):format(mode, L.path))
        G.same(gmask:cuda(), cmask, ("GMP %s: layer %s's mask equals the CPU one")
          :format(mode, L.path))
      end
    end
    tap.ok(checked > 0, "GMP " .. mode .. ": per-step masks were compared")
    local x = round(G.randn_nz(8, 64), "bf16")
    close(gm(x:cuda()), cm(x), 2e-2, "GMP " .. mode .. ": the pruned CUDA model's output matches the CPU one")
  end
end

tap.done()
