-- The GPT's blocks on the GPU against the CPU: embedding (forward and the
-- deterministic scatter-add backward with repeated ids: the same bits),
-- layer_norm (forward and the three gradients), bias_gelu, and causal
-- attention (FlashAttention-2 on bf16 tensor cores) for head dims 32, 64,
-- 128 and T = 1, 37, 130 (ragged last tiles), on separate (B, H, T, Dh)
-- heads and on a fused (B, T, 3C) projection read through strides
-- (causal_self_attention), then a whole small GPT: loss,
-- every gradient, and one AdamW step over all its parameters. Fresh random
-- inputs; the CUDA cache is filled with NaN before each op, so an output
-- element a kernel forgets to write shows.
local venom = require "venom"
if not venom.cuda.is_available() then print("1..0 # SKIP no CUDA device") os.exit(0) end
package.path = "tests/gpu/?.lua;tests/lua/?.lua;./?.lua;" .. package.path
local tap = require "tap"
local G = require "gpucheck"
local TOL, close = G.TOL, G.close

venom.cuda.set_allow_tf32(false)
venom.manual_seed(7)

-- Leaves a NaN-filled block of each size in the CUDA cache.
local function poison(...)
  for _, n in ipairs({ ... }) do
    local t = venom.zeros(n):cuda()
    t:fill_(0 / 0)
    t:free()
  end
end

-- The same leaf on both devices.
local function pair(t)
  return t:clone():requires_grad_(true), t:cuda():requires_grad_(true)
end

-- embedding: ids with repeats, an odd width
do
  local V, D = 11, 37
  local w = venom.randn(V, D)
  local ids = venom.randint(1, V + 1, 5, 29, { dtype = "i64" })
  local wc, wg = pair(w)
  poison(5 * 29 * D, V * D)
  local yc, yg = venom.embedding(wc, ids), venom.embedding(wg, ids:cuda())
  G.same(yg, yc, "embedding forward: the same rows")
  local c = venom.randn(5, 29, D)
  ;(yc * c):sum():backward()
  ;(yg * c:cuda()):sum():backward()
  G.same(wg.grad, wc.grad, "embedding backward: the CPU's sums bit for bit (repeated ids)")
  local ok, err = pcall(venom.embedding, wg, ids)
  tap.ok(not ok and tostring(err):find("one device"), "embedding: CPU ids with a CUDA weight are refused")
end

-- layer_norm: odd rows and widths, with and without gamma/beta
for _, sz in ipairs({ { 37, 97 }, { 130, 384 }, { 3, 1000 } }) do
  local R, D = sz[1], sz[2]
  local x = venom.randn(R, D) * 3 + 1
  local gamma, beta = venom.rand(D) + 0.5, venom.randn(D)
  for _, affine in ipairs({ true, false }) do
    local what = ("layer_norm (%d, %d)%s"):format(R, D, affine and "" or " without gamma/beta")
    local xc, xg = pair(x)
    local gc, gg = pair(gamma)
    local bc, bg = pair(beta)
    poison(R * D, R * 2, D)
    local yc = venom.layer_norm(xc, affine and gc or nil, affine and bc or nil)
    local yg = venom.layer_norm(xg, affine and gg or nil, affine and bg or nil)
    close(yg, yc, TOL.reduce, what .. ": forward")
    local c = venom.randn(R, D)
    ;(yc * c):sum():backward()
    ;(yg * c:cuda()):sum():backward()
    close(xg.grad, xc.grad, TOL.chain, what .. ": dx")
    if affine then
      close(gg.grad, gc.grad, TOL.chain, what .. ": dgamma")
      close(bg.grad, bc.grad, TOL.chain, what .. ": dbeta")
    end
  end
end

-- bias + GELU
do
  local x, b = venom.randn(33, 7, 129) * 2, venom.randn(129)
  local xc, xg = pair(x)
  local bc, bg = pair(b)
  poison(33 * 7 * 129)
  local yc, yg = venom.bias_gelu(xc, bc), venom.bias_gelu(xg, bg)
  close(yg, yc, TOL.f32, "bias_gelu forward")
  local c = venom.randn(33, 7, 129)
  ;(yc * c):sum():backward()
  ;(yg * c:cuda()):sum():backward()
  close(xg.grad, xc.grad, TOL.f32, "bias_gelu: dx")
  close(bg.grad, bc.grad, TOL.reduce, "bias_gelu: dbias")
end

-- causal attention: bf16 tensor cores against the f32 CPU op
for _, D in ipairs({ 32, 64, 128 }) do
  for _, T in ipairs({ 1, 37, 130 }) do
    local what = ("causal_attention Dh %d, T %d"):format(D, T)
    local shape = { 2, 3, T, D }
    local q, k, v = venom.randn(shape), venom.randn(shape), venom.randn(shape)
    local qc, qg = pair(q)
    local kc, kg = pair(k)
    local vc, vg = pair(v)
    poison(2 * 3 * T * D, 2 * 3 * T)
    local yc, yg = venom.causal_attention(qc, kc, vc), venom.causal_attention(qg, kg, vg)
    close(yg, yc, TOL.bf16, what .. ": forward")
    local c = venom.randn(shape)
    ;(yc * c):sum():backward()
    poison(2 * 3 * T * D, 2 * 3 * T)
    ;(yg * c:cuda()):sum():backward()
    -- at T = 1 dq and dk are 0 on the CPU: compare against the scale of dv
    local floor = T == 1 and vc.grad:abs():max():item() * TOL.bf16 or 0
    for name, pr in pairs({ dq = { qg, qc }, dk = { kg, kc }, dv = { vg, vc } }) do
      local g, cg = pr[1].grad, pr[2].grad
      if floor > 0 then
        local d = (g:cpu() - cg):abs():max():item()
        tap.ok(d <= floor, what .. ": " .. name .. " (exactly 0 on the CPU)")
      else
        close(g, cg, TOL.bf16, what .. ": " .. name)
      end
    end
  end
end
do
  local q = venom.randn(1, 1, 8, 48):cuda()
  local ok, err = pcall(venom.causal_attention, q, q, q)
  tap.ok(not ok and tostring(err):find("32, 64 or 128"), "causal_attention: head dim 48 on CUDA is refused by name")
end

-- causal self-attention of a fused (B, T, 3C) projection: the kernels read
-- the heads through strides and write (B, T, C), and the backward writes
-- dq, dk, dv into their column ranges of one gradient (all poisoned first)
for _, D in ipairs({ 32, 64, 128 }) do
  for _, T in ipairs({ 1, 37, 130 }) do
    local B, H = 2, 3
    local C = H * D
    local what = ("causal_self_attention Dh %d, T %d, %d heads"):format(D, T, H)
    local xc, xg = pair(venom.randn(B, T, 3 * C))
    poison(B * T * 3 * C, B * T * C, B * H * T)
    local yc, yg = venom.causal_self_attention(xc, H), venom.causal_self_attention(xg, H)
    close(yg, yc, TOL.bf16, what .. ": forward (B, T, C)")
    local c = venom.randn(B, T, C)
    ;(yc * c):sum():backward()
    poison(B * T * 3 * C, B * T * C, B * H * T)
    ;(yg * c:cuda()):sum():backward()
    local floor = T == 1 and xc.grad:narrow(3, 2 * C + 1, C):abs():max():item() * TOL.bf16 or 0
    for i, name in ipairs({ "dq", "dk", "dv" }) do
      local g, cg = xg.grad:narrow(3, (i - 1) * C + 1, C), xc.grad:narrow(3, (i - 1) * C + 1, C)
      if floor > 0 and i < 3 then
        local d = (g:cpu() - cg):abs():max():item()
        tap.ok(d <= floor, what .. ": " .. name .. " (exactly 0 on the CPU)")
      else
        close(g, cg, TOL.bf16, what .. ": " .. name)
      end
    end
  end
end
do
  local x = venom.randn(1, 8, 3 * 96):cuda()
  local ok, err = pcall(venom.causal_self_attention, x, 2)
  tap.ok(not ok and tostring(err):find("32, 64 or 128"), "causal_self_attention: head dim 48 on CUDA is refused by name")
end

-- A whole GPT: the loss, every parameter's gradient and one AdamW step
-- (one multi-tensor launch over all parameters) against the CPU.
do
  local GPT = require "models.gpt"
  local optim = require "venom.optim"
  local cfg = { vocab_size = 67, block_size = 40, n_layer = 2, n_head = 2, n_embd = 64 }
  venom.manual_seed(3)
  local mc = GPT(cfg)
  venom.manual_seed(3)
  local mg = GPT(cfg):cuda()
  local idx = venom.randint(1, 68, 3, 37, { dtype = "i64" })
  local tgt = venom.randint(1, 68, 3, 37, { dtype = "i64" })
  local lc = mc:loss(idx, tgt)
  local lg = mg:loss(idx:cuda(), tgt:cuda())
  close(lg, lc, TOL.bf16, "GPT loss on CUDA (bf16 attention)")
  lc:backward()
  lg:backward()
  local pc, pg = mc:parameters(), mg:parameters()
  local n = 0
  for i = 1, #pc do
    n = n + pc[i]:numel()
    close(pg[i].grad, pc[i].grad, 5e-2, ("GPT gradient of parameter %d %s"):format(i, G.shape_str(pc[i])))
  end
  tap.diag("GPT: %d parameter tensors, %d parameters", #pc, n)
  local oc = optim.AdamW(pc, { lr = 1e-3, weight_decay = 0.1 })
  local og = optim.AdamW(pg, { lr = 1e-3, weight_decay = 0.1 })
  -- the same gradients on both sides, so the step itself is compared
  venom.no_grad(function() for i = 1, #pc do pg[i].grad:copy_(pc[i].grad:cuda()) end end)
  oc:step()
  og:step()
  local worst = 0
  for i = 1, #pc do worst = math.max(worst, G.rel_err(pg[i]:cpu(), pc[i])) end
  tap.ok(worst <= TOL.chain, ("AdamW step over all %d GPT parameters: relative error %g"):format(n, worst))
end

tap.done()
