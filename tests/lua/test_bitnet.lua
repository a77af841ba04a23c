-- BitNet b1.58 from Lua (lua/venom/nn_quant.lua, models/gpt.lua bitnet):
-- nn.RMSNorm against a plain reference, nn.BitLinear against the op on the
-- normalised input with ternary weights and gradients reaching W and the
-- norm's gain, a bitnet GPT whose loss falls in a few steps, the packed
-- export loaded back (the same logits, the same file byte for byte), and
-- bad input: no BitLinear to export, corrupt or foreign files (the model is
-- left unchanged), bad options.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local GPT = require "models.gpt"

venom.manual_seed(5)
local tmp = os.tmpname()

local function max_abs_diff(a, b) return (a - b):abs():max():item() end

local read_bytes = require("testutil").slurp

-- nn.RMSNorm -------------------------------------------------------------------------
do
  local rn = nn.RMSNorm(4)
  venom.no_grad(function() rn.weight:copy_(venom.tensor({ 1, 2, 3, 4 })) end)
  local x = venom.tensor({ { 1, 2, 3, 6 }, { -1, 0, 0, 5 } })
  local y, worst = rn(x), 0
  for i = 1, 2 do
    local ms = 0
    for k = 1, 4 do ms = ms + x:get(i, k) ^ 2 / 4 end
    for k = 1, 4 do
      worst = math.max(worst, math.abs(y:get(i, k) - x:get(i, k) / math.sqrt(ms + 1e-6) * k))
    end
  end
  tap.ok(worst < 1e-5, ("nn.RMSNorm matches x/√(mean(x²) + eps)·w (max error %.2g)"):format(worst))
  tap.error_like(function() rn(venom.zeros(2, 3)) end, "%(%.%.%., 4%)", "nn.RMSNorm: a wrong last dim names the expected shape")
end

-- nn.BitLinear ----------------------------------------------------------------------
do
  local layer = nn.BitLinear(10, 6)
  local x = venom.randn(3, 10)
  local y = layer(x)
  local want = venom.bitlinear(layer.norm(x), layer.weight)
  tap.ok(max_abs_diff(y, want) == 0, "nn.BitLinear = venom.bitlinear(RMSNorm(x), W)")
  local wq, gamma = venom.ternary_quantize(layer.weight:detach())
  local ternary, kinds = true, {}
  for _, v in ipairs(wq:reshape(-1):totable()) do
    local t = v / gamma
    ternary = ternary and (t == -1 or t == 0 or t == 1)
    kinds[t] = true
  end
  tap.ok(ternary and kinds[-1] and kinds[0] and kinds[1], "its weights quantise to γ·{−1, 0, 1}")
  local loss = (y * y):sum()
  loss:backward()
  tap.ok(layer.weight.grad ~= nil and layer.weight.grad:abs():sum():item() > 0
    and layer.norm.weight.grad:abs():sum():item() > 0, "gradients reach W (STE) and the norm's gain")
  tap.ok(nn.BitLinear(10, 6, { norm = false }).norm == nil, "norm = false: no RMSNorm")
  tap.error_like(function() nn.BitLinear(10, 6, { bias = true }) end, "bias", "nn.BitLinear has no bias option")
  tap.error_like(function() layer(venom.zeros(2, 3)) end, "%(%.%.%., 10%)", "a wrong last dim names the expected shape")
  -- γ = 0 and a zero row: zeros, no NaN
  local z = nn.BitLinear(4, 3, { norm = false })
  venom.no_grad(function() z.weight:fill_(0) end)
  local out = z(venom.tensor({ { 1, 2, 3, 4 }, { 0, 0, 0, 0 } }))
  tap.ok(out:abs():sum():item() == 0, "a zero weight matrix (γ = 0) and a zero row give zeros, not NaN")
end

-- the quantisation mix λ (BitLinear:set_quant_mix) --------------------------------------
do
  local layer = nn.BitLinear(10, 6)
  local x = venom.randn(3, 10)
  local h, w = layer.norm(x):detach(), layer.weight:detach()
  local full = layer(x)
  tap.ok(max_abs_diff(layer:set_quant_mix(1)(x), full) == 0, "λ = 1 is BitNet b1.58, the default")
  tap.ok(max_abs_diff(layer:set_quant_mix(0)(x), venom.linear(h, w)) < 1e-5,
    "λ = 0 is the same layer unquantised: RMSNorm(x)·Wᵀ")
  -- λ = 0.25 by hand from the quantised operands: h + λ(Q(h) − h), w + λ(Q(w) − w)
  local lam = 0.25
  local hq, wq = venom.int8_fake_quant(h), venom.ternary_fake_quant(w, w:numel())
  local hl, wl = h + (hq - h) * lam, w + (wq - w) * lam
  local y = layer:set_quant_mix(lam)(x)
  tap.ok(max_abs_diff(y, venom.linear(hl, wl)) < 1e-5, "λ = 0.25 blends inputs and weights: h + λ(Q(h) − h)")
  -- the STE: dL/dW is the gradient w.r.t. the blended weight, gᵀ·h_λ, for L = Σ y·r
  local r = venom.randn(3, 6)
  local loss = (y * r):sum()
  loss:backward()
  tap.ok(max_abs_diff(layer.weight.grad, r:transpose(1, 2):matmul(hl)) < 1e-4,
    "the backward is the STE at every λ: dL/dW = rᵀ·h_λ")
  tap.error_like(function() layer:set_quant_mix(1.5) end, "λ in %[0, 1%], got 1.5", "λ outside [0, 1] is an error")
  tap.error_like(function() layer:set_quant_mix("0.5") end, "expected a number λ in %[0, 1%], got a string %(0%.5%)",
    "λ as a string is a type error that says so")
  -- λ is a schedule value, not state: state_dict holds the weight and the norm only
  local keys = {}
  for k in pairs(layer:state_dict()) do keys[#keys + 1] = k end
  table.sort(keys)
  tap.is(table.concat(keys, ","), "norm.weight,weight", "quant_mix is not in state_dict")
  -- nn.SparseBitLinear blends the same way (its values, the kept weights)
  local sp = nn.SparseBitLinear(16, 8, { V = 4, M = 8 })
  local xs = venom.randn(3, 16)
  local hs, v = sp.norm(xs):detach(), sp.values:detach()
  local nnz = sp.matrix:stats().nnz
  local ws = v + (venom.ternary_fake_quant(v, nnz) - v) * lam
  local want = venom.vnm_linear(hs + (venom.int8_fake_quant(hs) - hs) * lam, sp.matrix, ws)
  tap.ok(max_abs_diff(sp:set_quant_mix(lam)(xs), want) < 1e-5, "SparseBitLinear:set_quant_mix(0.25) blends as BitLinear")
  tap.error_like(function() sp:set_quant_mix(true) end, "nn.SparseBitLinear:set_quant_mix: expected a number",
    "SparseBitLinear: λ must be a number")
end

-- a bitnet GPT trains ------------------------------------------------------------------
local cfg = { vocab_size = 16, block_size = 8, n_layer = 1, n_head = 2, n_embd = 32, bitnet = true }
do
  local model = GPT(cfg)
  local bit = 0
  local function count(m)
    if getmetatable(m) == nn.BitLinear then bit = bit + 1 end
    for _, c in ipairs(m:children()) do count(c) end
  end
  count(model)
  tap.is(bit, 4, "bitnet = true: the block's 4 projections are nn.BitLinear")
  tap.ok(getmetatable(model.ln_f) == nn.RMSNorm and getmetatable(model.blocks[1].ln1) == nn.RMSNorm,
    "and its norms nn.RMSNorm")
  local idx = venom.randint(1, 17, { 4, 8 }, "i64")
  local tgt = venom.randint(1, 17, { 4, 8 }, "i64")
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2, weight_decay = 0 })
  local first, last
  for step = 1, 25 do
    opt:zero_grad()
    local loss = model:loss(idx, tgt)
    loss:backward()
    opt:step()
    if step == 1 then first = loss:item() end
    last = loss:item()
  end
  tap.ok(last < 0.7 * first, ("a bitnet GPT fits one batch: loss %.3f → %.3f in 25 steps"):format(first, last))

  -- export, load into a fresh model, the same logits; the same file again
  venom.export_ternary(model, tmp)
  local fresh = GPT(cfg)
  venom.load_ternary(fresh, tmp)
  local a, b = venom.no_grad(function() return model(idx), fresh(idx) end)
  local d = max_abs_diff(a, b)
  tap.ok(d < 1e-4, ("the packed model gives the training model's logits (max diff %.2g)"):format(d))
  local again = tmp .. ".2"
  venom.export_ternary(fresh, again)
  tap.ok(read_bytes(tmp) == read_bytes(again), "exporting the loaded model gives the same file byte for byte")
  os.remove(again)
  local tensors, meta = venom.load(tmp)
  tap.ok(tensors["blocks.1.mlp.fc.weight_packed"]:dtype() == "u8" and meta["venom.packing"]:match("32%*floor"),
    "the file holds U8 packed weights and the packing in __metadata__")

  -- a corrupt packed tensor: refused, the model unchanged
  local raw = {}
  for k, v in pairs(tensors) do raw[k] = v end
  local p = raw["blocks.1.attn.proj.weight_packed"]
  venom.no_grad(function() p:narrow(1, 3, 1):narrow(2, 5, 1):fill_(255) end)
  venom.save(again, raw, meta)
  local victim = GPT(cfg)
  local before = victim.wte.weight:clone()
  tap.error_like(function() venom.load_ternary(victim, again) end, "row 2, column 4: code 3",
    "a corrupt packed tensor is refused, naming row, column and code")
  tap.ok(max_abs_diff(victim.wte.weight, before) == 0 and victim.blocks[1].attn.qkv.packed == nil,
    "and the model is left unchanged")
  -- a truncated file, a file that is not a ternary export
  local bytes = read_bytes(tmp)
  local f = assert(io.open(again, "wb"))
  f:write(bytes:sub(1, #bytes - 10))
  f:close()
  tap.error_like(function() venom.load_ternary(victim, again) end, "go past the end",
    "a truncated file is an error")
  venom.save(again, model:state_dict())
  tap.error_like(function() venom.load_ternary(victim, again) end, "not a packed ternary file",
    "a plain checkpoint is not taken for a packed one")
  os.remove(again)
end

-- bad input ------------------------------------------------------------------------------
tap.error_like(function() venom.export_ternary(nn.Linear(3, 4), tmp) end, "no nn.BitLinear",
  "export_ternary of a model without BitLinear is an error")
tap.error_like(function() venom.export_ternary(42, tmp) end, "expected a model", "export_ternary of a non-model")
tap.error_like(function() GPT({ bitnet = true, mlp = { V = 8, M = 8 } }) end, "not implemented",
  "bitnet with V:N:M MLPs is refused with a clear error")
tap.error_like(function() GPT({ bitnet = 1 }) end, "bitnet must be true or false", "bitnet must be a boolean")
tap.error_like(function() venom.ternary_matmul(venom.zeros(2, 5), venom.zeros(3, 31, "u8"), 5, 1) end,
  "expected %(N, 32%)", "ternary_matmul: a wrong packed width")
tap.error_like(function() nn.BitLinear(4, 4, { norm = "no" }) end,
  "nn.BitLinear: norm must be true or false, got string \"no\"", "BitLinear: norm = \"no\" is refused")
tap.ok(nn.BitLinear(4, 4, { norm = false }).norm == nil, "BitLinear: norm = false drops the norm")
tap.error_like(function() nn.BitLinear(4, 4)(venom.zeros(2, 4, "i64")) end,
  "nn.BitLinear: expected an f32 input, got i64", "BitLinear: an i64 input is refused by name")

os.remove(tmp)
tap.done()
