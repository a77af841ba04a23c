--- venom.nn's BitNet b1.58 layers (nn.RMSNorm, nn.BitLinear), loaded on
-- first use through nn's lazy fields, and the packed ternary export
-- (venom.export_ternary, venom.load_ternary). The formulas are in
-- engine/include/venom/quant.h (Ma et al. 2024, arXiv 2402.17764).
--
--     local layer = nn.BitLinear(256, 1024)       -- RMSNorm, then ternary W, int8 x
--     local y = layer(x)                          -- (..., 256) → (..., 1024), trains with the STE
--     venom.export_ternary(model, "model.ternary.safetensors")
--     venom.load_ternary(model, "model.ternary.safetensors") -- BitLinears now run packed
local venom = require "venom"
local util = require "venom.util"
local nn = require "venom.nn"
local sparse = require "venom.sparse"
local fail = util.fail

local Module = nn.Module
local is_tensor = venom.is_tensor
local fmt_shape = util.format_shape
local check_opts = util.check_options

local layers = {}

-- The input check both layers share: a tensor (..., dim).
local function check_input(who, x, dim)
  if not is_tensor(x) then fail(("%s: expected a tensor input, got %s"):format(who, type(x))) end
  local nd = x:dim()
  if nd == 0 or x:size(nd) ~= dim then
    fail(("%s: expected an input of shape (..., %d), got %s"):format(who, dim,
      nd == 0 and "a 0-d tensor" or fmt_shape(x)))
  end
end

--- Root-mean-square normalisation over the last dim (Zhang & Sennrich
-- 2019): y = x / sqrt(mean(x²) + eps) · weight, weight (dim) = 1 at first
-- (venom.rms_norm: one call at inference, the same bits as the composed
-- ops it runs when training). opts: eps = 1e-6.
local RMSNorm = Module:extend("RMSNorm")
layers.RMSNorm = RMSNorm

function RMSNorm:__init(dim, opts)
  Module.__init(self)
  util.check_int(dim, "dim", { min = 1, who = "nn.RMSNorm" })
  opts = check_opts(opts, { "eps" }, "nn.RMSNorm")
  local eps = opts.eps or 1e-6
  if type(eps) ~= "number" or not (eps > 0 and eps < math.huge) then
    fail("nn.RMSNorm: eps must be a positive number, got " .. tostring(eps))
  end
  self.dim, self.eps = dim, eps
  self:register_parameter("weight", venom.ones(dim))
end

function RMSNorm:forward(x)
  check_input("nn.RMSNorm", x, self.dim)
  return venom.rms_norm(x, self.weight, self.eps)
end

function RMSNorm:extra_repr()
  return ("%d, eps=%g"):format(self.dim, self.eps)
end

--- BitNet b1.58 linear layer y = Q(RMSNorm(x))·Q(W)ᵀ, no bias: W is kept in
-- f32 (the latent weights the optimizer updates) and quantised to γ·W̃,
-- W̃ ∈ {−1, 0, 1}, γ = mean|W|, at every forward; each input row to int8 by
-- its absmax. Backward is the straight-through estimator (venom.bitlinear).
-- opts: norm = true (the RMSNorm on the input, SubLN; false: none),
-- std (the weight's N(0, std) init; default: uniform ±1/√in as nn.Linear).
-- On CUDA the quantisers run as the engine's elementwise ops (never yet run
-- on a GPU); the packed kernels are CPU only. After
-- venom.load_ternary the layer holds packed weights (self.packed, self.gamma)
-- and runs the int8 × ternary kernel instead (inference: no gradient).
local BitLinear = Module:extend("BitLinear")
layers.BitLinear = BitLinear

function BitLinear:__init(in_features, out_features, opts)
  Module.__init(self)
  util.check_int(in_features, "in_features", { min = 1, who = "nn.BitLinear" })
  util.check_int(out_features, "out_features", { min = 1, who = "nn.BitLinear" })
  opts = check_opts(opts, { "norm", "std" }, "nn.BitLinear")
  self.in_features, self.out_features = in_features, out_features
  self.quant_mix = 1 -- see BitLinear:set_quant_mix
  local w
  if opts.std ~= nil then
    if type(opts.std) ~= "number" or not (opts.std > 0 and opts.std < math.huge) then
      fail("nn.BitLinear: std must be a positive number, got " .. tostring(opts.std))
    end
    local z = venom.randn(out_features, in_features)
    w = z * opts.std
    z:free()
  else
    local bound, u = 1 / math.sqrt(in_features), venom.rand(out_features, in_features)
    w = u * (2 * bound) - bound
    u:free()
  end
  self:register_parameter("weight", w)
  if util.check_bool(opts.norm, "norm", "nn.BitLinear", true) then
    self:add_module("norm", RMSNorm(in_features))
  end
end

-- The input check and the RMSNorm both BitNet layers share.
local function normed_input(who, self, x)
  check_input(who, x, self.in_features)
  if x:dtype() ~= "f32" then
    fail(("%s: expected an f32 input, got %s (convert it with x:float())"):format(who, x:dtype()))
  end
  return self.norm and self.norm(x) or x
end

-- a + λ·(q − a): the quantised q blended with its input a. The gradient
-- w.r.t. a is the identity for every λ (q's backward is the STE), so this
-- only changes the forward.
local function blend(a, q, lam)
  if lam >= 1 then return q end
  return a + (q - a) * lam
end

function BitLinear:forward(x)
  local h = normed_input("nn.BitLinear", self, x)
  if self.packed then return venom.ternary_matmul(h, self.packed, self.in_features, self.gamma) end
  local lam = self.quant_mix
  -- Under GMP's V:N:M shadow (venom.prune_vnm) the weight arrives masked and
  -- γ averages over the _gmp_kept weights of the pattern, as it will in the
  -- nn.SparseBitLinear the layer becomes.
  if self._gmp_kept or lam < 1 then
    local w = self.weight
    return venom.linear(blend(h, venom.int8_fake_quant(h), lam),
      blend(w, venom.ternary_fake_quant(w, self._gmp_kept or w:numel()), lam))
  end
  return venom.bitlinear(h, self.weight)
end

--- layer:set_quant_mix(λ): the forward uses a + λ·(Q(a) − a) for the
-- weights and the normed input instead of their quantised Q(a): λ = 1 (the
-- default) is BitNet b1.58, λ = 0 the same layer in f32, and values
-- between blend the two ("quantisation warm-up": ramp λ from 0 to 1
-- early in training). The backward stays the STE. Returns the layer.
-- nn.SparseBitLinear has the same method. λ is a schedule value, like a
-- learning rate: it is not in state_dict (which holds tensors), so a run
-- resumed from a checkpoint sets it again from its step, as it sets the
-- learning rate; a packed layer (inference) ignores it.
local function set_quant_mix(self, lam)
  local who = self.__name == "SparseBitLinear" and "nn.SparseBitLinear" or "nn.BitLinear"
  if type(lam) ~= "number" then
    fail(("%s:set_quant_mix: expected a number λ in [0, 1], got a %s (%s)"):format(who, type(lam),
      tostring(lam)))
  end
  if not (lam >= 0 and lam <= 1) then
    fail(("%s:set_quant_mix: expected λ in [0, 1], got %s"):format(who, tostring(lam)))
  end
  rawset(self, "quant_mix", lam)
  return self
end
BitLinear.set_quant_mix = set_quant_mix

function BitLinear:extra_repr()
  return ("in_features=%d, out_features=%d%s"):format(self.in_features, self.out_features,
    self.packed and ", packed" or "")
end

-- SparseBitLinear ----------------------------------------------------------------------

--- BitNet b1.58 with V:N:M weights ("BitNet 2:8"): y = Q(RMSNorm(x))·Q(W)ᵀ,
-- no bias, where W (out, in) is a V:N:M matrix (as nn.SparseLinear: the
-- trainable parameter is its compressed `values`, f32 (out, 2·⌈in/M⌉)),
-- Q(W) = γ·RoundClip(v/γ, −1, 1) of each kept value v with γ = the mean |v|
-- over the kept weights (venom.ternary_fake_quant(values, nnz)), and the
-- input quantised to int8 per row (venom.int8_fake_quant). Backward is the
-- straight-through estimator through both quantisers, then the V:N:M
-- kernels (SpMM, its transpose, SDDMM). opts: V = 64, M = 8, N = 2, weight
-- (a dense (out, in) f32 to compress by magnitude; default nn.Linear's
-- uniform ±1/√in), norm = true (a new nn.RMSNorm on the input), false
-- (none) or an nn.RMSNorm module to use (GMP passes the BitLinear's own).
-- prune.GMP (mode "vnm") makes these from nn.BitLinear. layer:pack()
-- switches it to inference with packed weights (venom.ternary_vnm_pack:
-- 4 bits per kept weight, the int8 × ternary kernel with the column gather).
local SparseBitLinear = sparse.SparseLinear:extend("SparseBitLinear")
layers.SparseBitLinear = SparseBitLinear

function SparseBitLinear:__init(in_features, out_features, opts)
  local who = "nn.SparseBitLinear"
  opts = check_opts(opts, { "V", "N", "M", "weight", "norm" }, who)
  local norm = opts.norm
  if norm ~= nil and type(norm) ~= "boolean" and getmetatable(norm) ~= RMSNorm then
    fail(("%s: norm must be true, false or an nn.RMSNorm, got %s"):format(who, tostring(norm)))
  end
  sparse.SparseLinear.__init(self, in_features, out_features,
    { V = opts.V, N = opts.N, M = opts.M, weight = opts.weight, bias = false })
  rawset(self, "quant_mix", 1) -- see BitLinear:set_quant_mix
  if getmetatable(norm) == RMSNorm then
    if norm.dim ~= in_features then
      fail(("%s: norm is an nn.RMSNorm(%d), expected %d features"):format(who, norm.dim, in_features))
    end
    self:add_module("norm", norm)
  elseif norm ~= false then
    self:add_module("norm", RMSNorm(in_features))
  end
end

function SparseBitLinear:forward(x)
  local h = normed_input("nn.SparseBitLinear", self, x)
  if self.packed then return venom.ternary_vnm_matmul(h, self.matrix, self.packed, self.gamma) end
  local lam, v = self.quant_mix, self.values
  local wq = blend(v, venom.ternary_fake_quant(v, self.matrix:stats().nnz), lam)
  return venom.vnm_linear(blend(h, venom.int8_fake_quant(h), lam), self.matrix, wq)
end

SparseBitLinear.set_quant_mix = set_quant_mix

--- Packs the current ternary weights for inference (self.packed, self.gamma):
-- the forward then runs the int8 × ternary V:N:M kernel (no gradient).
-- Returns the layer.
function SparseBitLinear:pack()
  self.packed, self.gamma = venom.ternary_vnm_pack(self.matrix)
  return self
end

function SparseBitLinear:extra_repr()
  return ("in_features=%d, out_features=%d, V=%d, N=%d, M=%d%s"):format(self.in_features,
    self.out_features, self.V, self.N, self.M, self.packed and ", packed" or "")
end

-- Export ---------------------------------------------------------------------------

local FORMAT = "venom-ternary-1"
local PACKING = "weight_packed: u8 (out, 32*ceil(in/128)); column k of row n is in byte "
  .. "32*floor(k/128) + k%32 of the row, bits 2*floor((k%128)/32) and up, as the code "
  .. "t+1 with t in {-1,0,1}; columns past `in` hold code 1. Output = gamma * (int8 x) . t / s, "
  .. "s = 127/max|x| per row (BitNet b1.58)."

-- The BitLinear layers of model as a list of {prefix, layer} ("blocks.1.attn.qkv.").
local function bit_layers(model)
  local out = {}
  local function walk(m, prefix)
    if getmetatable(m) == BitLinear then out[#out + 1] = { prefix, m } end
    for _, nc in ipairs(m:named_children()) do walk(nc[2], prefix .. tostring(nc[1]) .. ".") end
  end
  walk(model, "")
  return out
end

-- The model's parameters that are not BitLinear weights, name → tensor.
local function other_parameters(model, bits)
  local latent, out = {}, {}
  for _, b in ipairs(bits) do latent[b[2].weight] = true end
  for _, np in ipairs(model:named_parameters()) do
    if not latent[np[2]] then out[np[1]] = np[2] end
  end
  return out
end

local function check_model(who, model)
  if not nn.is_module(model) then fail(("%s: expected a model (an nn.Module), got %s"):format(who, type(model))) end
  local bits = bit_layers(model)
  if #bits == 0 then fail(("%s: the model has no nn.BitLinear layer to pack"):format(who)) end
  return bits
end

--- venom.export_ternary(model, path): writes the model for inference as a
-- safetensors file: each BitLinear's W̃ packed at 2 bits ("<name>.weight_packed",
-- U8) and γ ("<name>.gamma", F32 (1)), every other parameter in f32 (norms,
-- embeddings), and in __metadata__ the format, the packing and each
-- layer's in_features. The latent f32 weights are not written (save them
-- with venom.save(path, model:state_dict()) to go on training).
function layers.export_ternary(model, path)
  local who = "export_ternary"
  local bits = check_model(who, model)
  if type(path) ~= "string" then fail(("%s: expected a file path, got %s"):format(who, type(path))) end
  local tensors = other_parameters(model, bits)
  for k, v in pairs(tensors) do tensors[k] = v:detach() end
  local meta = { ["venom.format"] = FORMAT, ["venom.packing"] = PACKING }
  for _, b in ipairs(bits) do
    -- a layer that runs packed (after load_ternary) writes what it runs
    local packed, gamma = b[2].packed, b[2].gamma
    if not packed then packed, gamma = venom.ternary_pack(b[2].weight:detach()) end
    tensors[b[1] .. "weight_packed"] = packed
    tensors[b[1] .. "gamma"] = venom.tensor({ gamma })
    meta[b[1] .. "in_features"] = b[2].in_features
  end
  venom.save(path, tensors, meta)
end

--- venom.load_ternary(model, path): loads a file from venom.export_ternary
-- into a model of the same architecture: the other parameters are copied in
-- and every BitLinear gets the packed weights (it then runs the int8 ×
-- ternary kernel). Everything is checked first (format, names, shapes,
-- every packed code), so a load that fails changes nothing.
function layers.load_ternary(model, path)
  local who = "load_ternary"
  local bits = check_model(who, model)
  local tensors, meta = venom.load(path)
  if meta["venom.format"] ~= FORMAT then
    fail(("%s: %s is not a packed ternary file (venom.format = %s, expected %s)"):format(who, path,
      tostring(meta["venom.format"]), FORMAT))
  end
  local plan, used = {}, {}
  for _, b in ipairs(bits) do
    local name, layer = b[1], b[2]
    local packed, gamma = rawget(tensors, name .. "weight_packed"), rawget(tensors, name .. "gamma")
    if not packed or not gamma then
      fail(("%s: %s has no %sweight_packed and %sgamma for the BitLinear '%s'"):format(who, path,
        name, name, name:sub(1, -2)))
    end
    if meta[name .. "in_features"] ~= tostring(layer.in_features) or packed:dim() ~= 2
        or packed:size(1) ~= layer.out_features or gamma:numel() ~= 1 then
      fail(("%s: %sweight_packed %s (in_features %s) does not fit the layer's %d → %d"):format(who,
        name, fmt_shape(packed), tostring(meta[name .. "in_features"]), layer.in_features,
        layer.out_features))
    end
    local ok, err = pcall(venom.ternary_check, packed, layer.in_features)
    if not ok then fail(("%s: %s: %s"):format(who, path, util.error_text(err))) end
    local g = gamma:item()
    if not (g >= 0 and g < math.huge) then
      fail(("%s: %sgamma = %s, expected a finite γ ≥ 0"):format(who, name, tostring(g)))
    end
    plan[#plan + 1] = { layer, packed, g }
    used[name .. "weight_packed"], used[name .. "gamma"] = true, true
  end
  local wanted, sd = other_parameters(model, bits), {}
  for k in pairs(wanted) do
    if rawget(tensors, k) == nil then fail(("%s: %s has no tensor '%s'"):format(who, path, k)) end
    sd[k] = tensors[k]
  end
  for k in pairs(tensors) do
    if not used[k] and not wanted[k] then fail(("%s: %s has an unexpected tensor '%s'"):format(who, path, k)) end
  end
  -- Names were checked above; load_state_dict checks shapes and dtypes whole
  -- before it writes (strict off: the latent weights are not in the file).
  model:load_state_dict(sd, { strict = false })
  for _, p in ipairs(plan) do p[1].packed, p[1].gamma = p[2], p[3] end
  return model
end

return layers
