-- Ternary × V:N:M from Lua (nn.SparseBitLinear in lua/venom/nn_quant.lua,
-- GMP from nn.BitLinear in venom.prune): the layer against the ops it is
-- made of, ternary kept weights, gradients reaching the values and the
-- norm, the packed layer against the training forward; GMP over a bitnet
-- GPT's MLPs: γ over the kept weights in the shadow, SparseBitLinear layers
-- at exactly 2 of every 8 weights at the end that keep the BitLinear's
-- RMSNorm, a loss that still falls; bad input.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local prune = require "venom.prune"
local GPT = require "models.gpt"

venom.manual_seed(7)

local function max_abs_diff(a, b) return (a - b):abs():max():item() end

-- nn.SparseBitLinear --------------------------------------------------------------------
do
  local layer = nn.SparseBitLinear(20, 12, { V = 4, M = 8 })
  local x = venom.randn(3, 20)
  local y = layer(x)
  local nnz = layer.matrix:stats().nnz
  tap.ok(nnz == layer:mask():float():sum():item(), "nnz counts the kept weights in real columns")
  local want = venom.vnm_linear(venom.int8_fake_quant(layer.norm(x)), layer.matrix,
    venom.ternary_fake_quant(layer.values, nnz))
  tap.ok(max_abs_diff(y, want) == 0, "= vnm_linear(int8(RMSNorm(x)), S, ternary(values, nnz))")
  local wq = venom.ternary_fake_quant(layer.values:detach(), nnz)
  local v = layer.values:detach():abs():sum():item() / nnz
  local ternary = true
  for _, q in ipairs(wq:reshape(-1):totable()) do
    local t = q / v
    ternary = ternary and (math.abs(t) < 1e-6 or math.abs(math.abs(t) - 1) < 1e-6)
  end
  tap.ok(ternary, "its kept weights are γ·{−1, 0, 1} with γ = mean |kept|")
  local loss = (y * y):sum()
  loss:backward()
  tap.ok(layer.values.grad:abs():sum():item() > 0 and layer.norm.weight.grad:abs():sum():item() > 0,
    "gradients reach the values (STE) and the norm's gain")
  -- a checkpoint (latent values, pattern, norm) through a file into a fresh layer
  local tmp = os.tmpname()
  venom.save(tmp, layer:state_dict())
  local fresh = nn.SparseBitLinear(20, 12, { V = 4, M = 8 })
  fresh:load_state_dict((venom.load(tmp)))
  os.remove(tmp)
  tap.ok(max_abs_diff(fresh(x), y) == 0, "state_dict → file → a fresh layer: the same outputs")
  local yp = venom.no_grad(function() return layer:pack()(x) end)
  tap.ok(max_abs_diff(yp, y) < 1e-5 * (1 + y:abs():max():item()),
    ("packed (%s, 4 bits per kept weight) = the training forward"):format(venom.ternary_isa()))
  tap.ok(tostring(layer):find("packed") ~= nil, "the packed layer says so")
  tap.error_like(function() nn.SparseBitLinear(20, 12, { bias = true }) end, "bias", "no bias option")
  tap.error_like(function() nn.SparseBitLinear(20, 12, { norm = "yes" }) end, "norm must be",
    "norm must be a boolean or an nn.RMSNorm")
  tap.error_like(function() nn.SparseBitLinear(20, 12, { norm = nn.RMSNorm(7) }) end, "expected 20",
    "a norm of the wrong width")
  tap.error_like(function() layer(venom.zeros(2, 3)) end, "%(%.%.%., 20%)", "a wrong last dim names the expected shape")
  tap.error_like(function() venom.ternary_vnm_matmul(x, layer.matrix, (venom.ternary_pack(venom.ones(12, 12)))
    , 1) end,
    "does not keep", "a packed matrix that breaks the pattern is refused")
end

-- GMP from a bitnet GPT's MLPs to 8:2:8 -------------------------------------------------
do
  local model = GPT({ vocab_size = 16, block_size = 16, n_layer = 1, n_head = 2, n_embd = 32,
                      bitnet = true })
  local idx = venom.randint(1, 17, { 4, 16 }, "i64")
  local tgt = venom.randint(1, 17, { 4, 16 }, "i64")
  local norm_before = model.blocks[1].mlp.fc.norm
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  local gmp = prune.GMP(model, { optimizer = opt, pattern = "8:2:8", layers = model:mlp_layers(),
                                 t0 = 5, n = 3, dt = 5 })
  local first, last, shadow_ok
  for step = 1, 40 do
    local loss = model:loss(idx, tgt)
    opt:zero_grad()
    loss:backward()
    opt:step()
    gmp:step()
    first = first or loss:item()
    last = loss:item()
    local fc = model.blocks[1].mlp.fc
    if step == 12 then
      -- in the shadow: γ over the pattern's kept weights, not over all R·K
      local kept = fc._gmp_kept
      local h = venom.randn(2, 32)
      local masked = fc.weight:detach() * (fc._gmp_pruned * -1 + 1)
      local want = venom.linear(venom.int8_fake_quant(fc.norm(h)), venom.ternary_fake_quant(masked, kept))
      shadow_ok = kept ~= nil and kept < 128 * 32 and max_abs_diff(fc(h), want) < 1e-6
    end
  end
  tap.ok(shadow_ok, "in the shadow a BitLinear computes with γ over the kept weights")
  local fc, proj = model.blocks[1].mlp.fc, model.blocks[1].mlp.proj
  tap.ok(getmetatable(fc) == nn.SparseBitLinear and getmetatable(proj) == nn.SparseBitLinear,
    "at the end the MLP layers are nn.SparseBitLinear")
  tap.ok(fc.matrix:stats().nnz == 128 * 32 / 4 and proj.matrix:stats().nnz == 32 * 128 / 4,
    "exactly 2 of every 8 weights kept")
  tap.ok(fc.norm == norm_before, "the SparseBitLinear keeps the BitLinear's RMSNorm (the optimizer's tensor)")
  tap.ok(getmetatable(model.blocks[1].attn.qkv) == nn.BitLinear, "attention stays dense BitLinear")
  tap.ok(last < first, ("the loss still falls (%.3f → %.3f)"):format(first, last))
  local before = venom.no_grad(function() return model(idx) end)
  fc:pack(); proj:pack()
  local after = venom.no_grad(function() return model(idx) end)
  tap.ok(max_abs_diff(before, after) < 1e-3, "the model with packed 2:8 MLPs gives the same logits")
end

-- Masked modes refuse a BitLinear -------------------------------------------------------
do
  local model = GPT({ vocab_size = 16, block_size = 8, n_layer = 1, n_head = 2,
                      n_embd = 16, bitnet = true })
  local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
  tap.error_like(function()
    prune.GMP(model, { optimizer = opt, pattern = "2:4", mode = "nm", layers = model:mlp_layers(),
                      n = 1 })
  end, "BitLinear; mode \"nm\"", "mode nm on a BitLinear is refused with the reason")
end

-- the inherited nn.SparseLinear checks name the class the user called
tap.error_like(function() nn.SparseBitLinear(0, 12) end, "^[^\n]*nn%.SparseBitLinear: in_features must be",
  "SparseBitLinear: a bad in_features names nn.SparseBitLinear")
tap.error_like(function() nn.SparseBitLinear(20, 12, { M = 2 }) end, "^[^\n]*nn%.SparseBitLinear: M must be",
  "SparseBitLinear: a bad M names nn.SparseBitLinear")
tap.error_like(function() nn.SparseLinear(0, 12) end, "^[^\n]*nn%.SparseLinear: in_features must be",
  "SparseLinear: its own errors still name nn.SparseLinear")

-- the kernel selector: a bad name is refused and changes nothing
do
  local isa = venom.ternary_isa()
  venom.ternary_set_kernel("portable")
  tap.error_like(function() venom.ternary_set_kernel("nope") end, 'unknown kernel "nope", expected "auto"',
    "ternary_set_kernel: an unknown name lists the known ones")
  tap.error_like(function() venom.ternary_set_kernel("portable\0x") end, "NUL byte at 8",
    "ternary_set_kernel: a name with a NUL byte is refused")
  tap.is(venom.ternary_kernel(64), "portable", "ternary_set_kernel: a refused call leaves the forced kernel")
  tap.error_like(function() venom.ternary_kernel(-1) end, "rows must be >= 0, found %-1",
    "ternary_kernel: negative rows are refused")
  venom.ternary_set_kernel("auto")
  tap.is(venom.ternary_kernel(2 ^ 40), isa, "ternary_set_kernel(\"auto\"): the widest kernel again")
end

tap.done()
