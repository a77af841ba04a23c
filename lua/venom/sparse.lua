--- venom.sparse — V:N:M sparse matrices and layers (VENOM: Castro et al.,
-- "VENOM: A Vectorized N:M Format for Unleashing the Power of Sparse Tensor
-- Cores", SC 2023).
--
-- A V:N:M matrix W (R × K) is cut into blocks of V rows × M columns; each
-- block keeps the same 4 of its M columns in all its rows, and each row keeps
-- N = 2 of those 4, so the sparsity is 1 − 2/M (M = 8: 75%). The kept weights
-- form the compressed `values` tensor, R × 2·⌈K/M⌉; the pattern (which
-- columns, which 2 of 4) is fixed when the matrix is built, by magnitude.
--
--     local sparse = require "venom.sparse"
--     local S = sparse.from_dense(W, {V = 64, M = 8})   -- W: (R, K) f32
--     S:to_dense()   -- (R, K): W with the pruned weights zeroed
--     S:mask()       -- u8 (R, K): 1 where a weight is kept
--     S:stats()      -- {rows, cols, V, N, M, nnz, sparsity, bytes, dense_bytes, ...}
--     S:values()     -- the compressed values, f32 (R, 2·⌈K/M⌉)
--
--     local layer = nn.SparseLinear(1024, 1024, {V = 64, M = 8})
--     sparse.sparsify(model, {V = 64, M = 8, skip = {"5"}})  -- Linear → SparseLinear
--
-- A SparseLinear's trainable parameter is `values` (plus `bias`): optimizers
-- update the compressed array in place and keep state of its shape, and the
-- gradient only ever exists at kept positions, so the pattern never changes.
-- The CPU kernels (forward SpMM, dX = dY·W, SDDMM for dvalues) run with
-- AVX-512 where the CPU has it; venom.vnm_isa() says which;
-- venom.set_vnm_precision("bf16") runs the three in bf16 on CPUs with
-- avx512_bf16 (x, dY and values rounded, f32 sums). On CUDA
-- (layer:cuda(), then an input on the GPU) the same three products run on
-- Sparse Tensor Cores: operands rounded to bf16 (f16 under
-- venom.autocast("f16")), f32 sums, f32 outputs and gradients, f32 values;
-- V must be a multiple of 16, and V and M at most 128 for the input's
-- gradient (errors say so).
local venom = require "venom"
local nn = require "venom.nn"
local util = require "venom.util"
local fail = util.fail

local core = venom.core
local is_tensor = venom.is_tensor

local sparse = {}

local fmt_shape = util.format_shape

local function check_int(who, what, v)
  return util.check_int(v, what, { who = who })
end

-- V, N, M from an options table (defaults 64, 2, 8) that may also hold the
-- names in `more`; the ranges are checked by the engine, whose messages name
-- the bad value.
local function layout(who, opts, more)
  local known = { "V", "N", "M" }
  for _, k in ipairs(more or {}) do known[#known + 1] = k end
  opts = util.check_options(opts, known, who)
  return check_int(who, "V", opts.V or 64), check_int(who, "N", opts.N or 2),
         check_int(who, "M", opts.M or 8)
end

-- core.vnm_from_dense with the engine's error re-raised at the caller's line.
-- A NaN or Inf weight is reported here, at its 1-based position.
local function compress(who, w, V, N, M)
  if w:dim() == 2 and w:dtype() == "f32" and w:numel() > 0 then
    local wd = w:detach()
    local diff = wd - wd -- 0 where finite, NaN at NaN and ±Inf
    local bad = diff:ne(0)
    local pos = bad:reshape(-1):argmax():item() -- 1-based, the first of the maxima
    if bad:reshape(-1):get(pos) == 1 then
      local K = w:size(2)
      local r, c = math.floor((pos - 1) / K) + 1, (pos - 1) % K + 1
      local v = w:get(r, c)
      fail(("%s: weight (%d, %d) is %s; selection by magnitude needs finite weights")
        :format(who, r, c, v ~= v and "nan" or v > 0 and "inf" or "-inf"))
    end
    wd:free(); diff:free(); bad:free()
  end
  local ok, s = pcall(core.vnm_from_dense, w, V, N, M)
  if not ok then fail(who .. ": " .. util.error_text(s):gsub("^vnm_from_dense: ", "")) end
  return s
end

--- The V:N:M compression of the dense f32 matrix W (R, K), chosen by
-- magnitude: for each block of V rows and group of M columns, the 4 columns
-- with the largest Σ over rows of the two largest |w| among them (all
-- C(M, 4) subsets for M ≤ 16; for larger M, the subsets of the 16 columns
-- with the largest Σ|w|), then each row's two largest |w| of those 4.
-- opts: V = 64, M = 8, N = 2 (the only N). Errors name the bad value (M < 4,
-- V < 1, N ≠ 2, fewer columns than M, a NaN or Inf weight with its position).
function sparse.from_dense(w, opts)
  local who = "sparse.from_dense"
  if not is_tensor(w) then
    fail(("%s: expected a tensor, got %s"):format(who, type(w)))
  end
  local V, N, M = layout(who, opts)
  return compress(who, w, V, N, M)
end

--- nil when a V:2:M layer can train on CUDA, else why not: the Sparse
-- Tensor Core kernels need V a multiple of 16, and M <= 128 for the
-- input's gradient (the engine refuses the rest with the same limits).
function sparse.cuda_layout_error(V, M)
  if V % 16 ~= 0 or M > 128 then
    return "training on CUDA needs V a multiple of 16 and M <= 128 (the Sparse "
      .. "Tensor Core kernels)"
  end
end

-- SparseLinear --------------------------------------------------------------------

--- y = x·Wᵀ + b with W (out_features, in_features) in V:N:M form.
-- opts: V = 64, M = 8, N = 2, bias = true; weight = a dense (out, in) tensor
-- to compress (default: U(−1/√in, 1/√in), as nn.Linear, then pruned by
-- magnitude); bias may also be a tensor (out) to use as the bias.
-- Parameters: `values` (out, 2·⌈in/M⌉) and `bias` (out).
local SparseLinear = nn.Module:extend("SparseLinear")
sparse.SparseLinear = SparseLinear

local function uniform(bound, ...)
  local u = venom.rand(...)
  local t = u * (2 * bound) - bound
  u:free()
  return t
end

function SparseLinear:__init(in_features, out_features, opts)
  nn.Module.__init(self)
  local who = "nn." .. (getmetatable(self).__name or "SparseLinear") -- a subclass's errors name it
  util.check_int(in_features, "in_features", { min = 1, who = who })
  util.check_int(out_features, "out_features", { min = 1, who = who })
  local V, N, M = layout(who, opts, { "bias", "weight" })
  opts = opts or {}
  self.in_features, self.out_features = in_features, out_features
  self.V, self.N, self.M = V, N, M
  local bound = 1 / math.sqrt(in_features)

  local w = opts.weight
  if w == nil then
    w = uniform(bound, out_features, in_features)
  elseif not is_tensor(w) or fmt_shape(w) ~= fmt_shape({ out_features, in_features }) then
    fail(("%s: weight must be a tensor of shape (%d, %d), got %s"):format(who, out_features,
      in_features, is_tensor(w) and fmt_shape(w) or type(w)))
  end
  self.matrix = compress(who, w, V, N, M)
  if w ~= opts.weight then w:free() end
  self:register_parameter("values", self.matrix:values())

  local bias = opts.bias
  if bias == nil or bias == true then
    bias = uniform(bound, out_features)
  elseif bias == false then
    bias = nil
  elseif not is_tensor(bias) or fmt_shape(bias) ~= fmt_shape({ out_features }) then
    fail(("%s: bias must be true, false or a tensor of shape (%d), got %s"):format(who,
      out_features, is_tensor(bias) and fmt_shape(bias) or tostring(bias)))
  end
  self:register_parameter("bias", bias)
end

function SparseLinear:forward(x)
  if not is_tensor(x) then
    fail("nn.SparseLinear: expected a tensor input, got " .. type(x))
  end
  local nd = x:dim()
  local width = nd > 0 and x:size(nd) or nil
  if width ~= self.in_features then
    fail(("nn.SparseLinear: input last dimension is %s but in_features is %d (input shape %s)")
      :format(tostring(width), self.in_features, fmt_shape(x)))
  end
  return core.vnm_linear(x, self.matrix, self.values, self.bias)
end

-- For Module:to(): the parameters have just moved, so the matrix is rebuilt
-- around the moved `values` (same pattern), keeping the two one tensor.
function SparseLinear:_to_device()
  local m = self.matrix
  self.matrix = core.vnm_from_pattern(self.out_features, self.in_features, self.V, self.N,
                                      self.M, m:columns(), m:indices(), self.values)
end

--- The current weight as a dense (out, in) tensor (zeros where pruned), on
-- the layer's device.
function SparseLinear:to_dense() return self.matrix:to_dense() end
--- u8 (out, in) on the CPU, where the pattern lives (whatever the layer's
-- device): 1 where a weight is kept.
function SparseLinear:mask() return self.matrix:mask() end
--- The matrix's stats (see S:stats()).
function SparseLinear:stats() return self.matrix:stats() end

-- For Module:state_dict(): the pattern and layout, saved next to values and
-- bias, so that a checkpoint restores this exact matrix.
function SparseLinear:_extra_state()
  return { columns = self.matrix:columns(), indices = self.matrix:indices(),
           V = self.V, N = self.N, M = self.M }
end

-- For Module:load_state_dict(): rebuild the matrix from a saved pattern
-- (numbers may arrive as strings from a file). With the same layout the
-- values tensor stays the same object, so an optimizer built on this
-- layer's parameters keeps working; the values themselves are copied in by
-- load_state_dict afterwards.
function SparseLinear:_load_extra_state(st)
  local who = "nn.SparseLinear: load_state_dict"
  local V, N, M = tonumber(st.V), tonumber(st.N), tonumber(st.M)
  local int = util.is_int
  if not (int(V) and int(N) and int(M)) then
    fail(("%s: V, N and M must be integers, got %s, %s, %s"):format(who, tostring(st.V),
      tostring(st.N), tostring(st.M)))
  end
  -- A different layout would need a new values tensor, which an optimizer
  -- built on this model would never see (it would silently stop training
  -- the layer): refuse it and say how to build a matching model.
  if V ~= self.V or N ~= self.N or M ~= self.M then
    fail(("%s: the checkpoint holds a %d:%d:%d layer but this one is %d:%d:%d (V:N:M); "
      .. "build the model with the checkpoint's layout"):format(who, V, N, M, self.V, self.N, self.M))
  end
  local ok, s = pcall(core.vnm_from_pattern, self.out_features, self.in_features, V, N, M,
                      st.columns, st.indices, self.values)
  if not ok then fail(who .. ": " .. util.error_text(s)) end
  self.matrix = s
end

-- For Module:dense_state_dict(): the layer as plain dense tensors.
function SparseLinear:_dense_state()
  local st = { weight = self:to_dense() }
  if self.bias then st.bias = self.bias:detach() end
  return st
end

function SparseLinear:extra_repr()
  return ("in_features=%d, out_features=%d, V=%d, N=%d, M=%d, bias=%s")
    :format(self.in_features, self.out_features, self.V, self.N, self.M,
            tostring(self.bias ~= nil))
end

--- A SparseLinear holding the magnitude-pruned weight of nn.Linear `lin`
-- (and the same bias tensor). opts: V, M, N as for nn.SparseLinear.
function SparseLinear.from_linear(lin, opts)
  if getmetatable(lin) ~= nn.Linear then
    fail(("SparseLinear.from_linear: expected an nn.Linear, got %s"):format(
      type(lin) == "table" and getmetatable(lin) and getmetatable(lin).__name or type(lin)))
  end
  return sparse.from_layer(lin, opts)
end

-- SparseConv2d ----------------------------------------------------------------------

--- A 2-d convolution whose weight, seen as the im2col matrix (out_channels,
-- in_channels·kh·kw), is V:N:M: the input is unfolded by venom.im2col into
-- (B, in_channels·kh·kw, Ho·Wo) and its transpose multiplied by the V:N:M SpMM
-- (venom.vnm_linear), so only kept weights are read and trained.
-- nn.SparseConv2d(in_channels, out_channels, kernel_size, opts); opts: stride,
-- padding, dilation (as nn.Conv2d; groups = 1 only), V = 64, M = 8, N = 2,
-- bias = true, weight = a dense (out, in, kh, kw) or (out, in·kh·kw) tensor
-- to compress (default: nn.Conv2d's initialisation, pruned by magnitude).
-- Parameters: `values` (out, 2·⌈in·kh·kw/M⌉) and `bias` (out). It is an
-- nn.SparseLinear over the im2col rows, so it saves, loads and prunes as one.
local SparseConv2d = SparseLinear:extend("SparseConv2d")
sparse.SparseConv2d = SparseConv2d

function SparseConv2d:__init(in_channels, out_channels, kernel_size, opts)
  local who = "nn.SparseConv2d"
  opts = util.check_options(opts, { "stride", "padding", "dilation", "V", "N", "M", "bias",
                                    "weight" }, who)
  local conv = require "venom.nn_conv"
  conv.conv_geometry(self, who, in_channels, out_channels, kernel_size, opts)
  local k = self.kernel_size
  local K = in_channels * k[1] * k[2]
  local w = opts.weight
  if is_tensor(w) and w:dim() == 4 then
    if fmt_shape(w) ~= fmt_shape({ out_channels, in_channels, k[1], k[2] }) then
      fail(("%s: weight must be a tensor of shape (%d, %d, %d, %d), got %s"):format(who,
        out_channels, in_channels, k[1], k[2], fmt_shape(w)))
    end
    w = w:detach():reshape(out_channels, K)
  elseif w == nil then
    w = uniform(1 / math.sqrt(K), out_channels, K) -- nn.Conv2d's bound, 1/√fan_in
  end
  SparseLinear.__init(self, K, out_channels, { V = opts.V, N = opts.N, M = opts.M, -- Module.__init too
    bias = opts.bias, weight = w })
end

function SparseConv2d:forward(x)
  if not is_tensor(x) or x:dim() ~= 4 or x:size(2) ~= self.in_channels then
    fail(("nn.SparseConv2d: expected an input of shape (B, %d, H, W), got %s"):format(
      self.in_channels, is_tensor(x) and fmt_shape(x) or type(x)))
  end
  local cols = venom.im2col(x, self.kernel_size, self.stride, self.padding, self.dilation)
  local y = core.vnm_linear(cols:transpose(2, 3), self.matrix, self.values, self.bias) -- (B, Ho·Wo, out)
  -- back to NCHW: the output size from the formula of venom/conv.h
  local H, W, k, s, p, d = x:size(3), x:size(4), self.kernel_size, self.stride, self.padding,
                           self.dilation
  local Ho = math.floor((H + 2 * p[1] - d[1] * (k[1] - 1) - 1) / s[1]) + 1
  local Wo = math.floor((W + 2 * p[2] - d[2] * (k[2] - 1) - 1) / s[2]) + 1
  return y:transpose(2, 3):reshape(x:size(1), self.out_channels, Ho, Wo)
end

-- For Module:dense_state_dict(): the weight as nn.Conv2d has it.
function SparseConv2d:_dense_state()
  local k = self.kernel_size
  local st = { weight = self:to_dense():reshape(self.out_channels, self.in_channels, k[1], k[2]) }
  if self.bias then st.bias = self.bias:detach() end
  return st
end

function SparseConv2d:extra_repr()
  return ("%s, V=%d, N=%d, M=%d, bias=%s"):format(require("venom.nn_conv").geometry_repr(self),
    self.V, self.N, self.M, tostring(self.bias ~= nil))
end

--- Whether `m` is a layer sparse.from_layer can make V:N:M: an nn.Linear,
-- an nn.BitLinear, or an nn.Conv2d with groups = 1.
function sparse.is_prunable(m)
  local mt = getmetatable(m)
  return mt == nn.Linear or mt == nn.BitLinear or (mt == nn.Conv2d and m.groups == 1)
end

--- The weight matrix of a layer as (R, K): nn.Linear's (nn.BitLinear's) weight, nn.Conv2d's
-- reshaped to (out_channels, in_channels·kh·kw), a sparse layer's to_dense().
function sparse.weight_matrix(m)
  local mt = getmetatable(m)
  if mt == nn.Linear or mt == nn.BitLinear then return m.weight:detach() end
  if mt == nn.Conv2d then return m.weight:detach():reshape(m.out_channels, -1) end
  return m:to_dense()
end

--- The V:N:M layer of the same kind as `m` (nn.Linear or SparseLinear →
-- SparseLinear, nn.Conv2d or SparseConv2d → SparseConv2d: same sizes and
-- geometry; nn.BitLinear or SparseBitLinear → nn.SparseBitLinear with m's
-- RMSNorm and quant_mix) holding the dense (R, K) `weight` (default: m's own, pruned by
-- magnitude) and m's bias tensor. opts: V, M, N.
function sparse.from_layer(m, opts, weight)
  local who = "sparse.from_layer"
  local V, N, M = layout(who, opts)
  weight = weight or sparse.weight_matrix(m)
  local mt = getmetatable(m)
  if mt == nn.BitLinear or mt == nn.SparseBitLinear then
    return nn.SparseBitLinear(m.in_features, m.out_features,
      { V = V, N = N, M = M, weight = weight, norm = m.norm or false }):set_quant_mix(m.quant_mix)
  end
  if m.kernel_size then
    if m.groups and m.groups ~= 1 then
      fail(("%s: a Conv2d with groups = %d; V:N:M convolutions take groups = 1"):format(who,
        m.groups))
    end
    return SparseConv2d(m.in_channels, m.out_channels, m.kernel_size, { stride = m.stride,
      padding = m.padding, dilation = m.dilation, V = V, N = N, M = M, weight = weight,
      bias = m.bias or false })
  end
  return SparseLinear(m.in_features, m.out_features,
    { V = V, N = N, M = M, weight = weight, bias = m.bias or false })
end

-- sparsify --------------------------------------------------------------------------

--- Replaces every nn.Linear in `model` (at any depth) by a SparseLinear,
-- and every nn.Conv2d with groups = 1 by a SparseConv2d, initialised by
-- magnitude from its weight, in place. opts: V = 64, M = 8,
-- N = 2, skip = a list of module names to leave dense, as dotted paths like
-- those of named_parameters() without the parameter ("5", "layers.3").
-- Returns the model and the list of the names replaced. Build the optimizer
-- afterwards: the old weights are no longer parameters.
function sparse.sparsify(model, opts)
  local who = "sparse.sparsify"
  if not nn.is_module(model) then
    fail(("%s: expected a module, got %s"):format(who, type(model)))
  end
  local V, N, M = layout(who, opts, { "skip" })
  local skip = {}
  if opts and opts.skip ~= nil then
    if type(opts.skip) ~= "table" then
      fail(("%s: skip must be a list of module names, got %s"):format(who, type(opts.skip)))
    end
    for _, name in ipairs(opts.skip) do skip[tostring(name)] = false end
  end
  -- Find the layers, check the skip list and build every sparse layer
  -- first, and only then swap them in: an error leaves the model unchanged.
  local found = {}
  local function walk(m, prefix)
    for _, nc in ipairs(m:named_children()) do
      local name, child = nc[1], nc[2]
      local path = prefix .. tostring(name)
      if skip[path] ~= nil then
        skip[path] = true
      elseif sparse.is_prunable(child) then
        found[#found + 1] = { parent = m, name = name, child = child, path = path }
      else
        walk(child, path .. ".")
      end
    end
  end
  walk(model, "")
  for name, seen in pairs(skip) do
    if not seen then
      fail(("%s: skip names '%s', which is not a module of the model"):format(who, name))
    end
  end
  -- Tied weights would silently become two independent sparse layers.
  local owner = {}
  for _, f in ipairs(found) do
    local other = owner[f.child.weight]
    if other then
      fail(("%s: layers '%s' and '%s' share one weight; each sparse layer has its own values, "
        .. "so skip one of them or untie them first"):format(who, other, f.path))
    end
    owner[f.child.weight] = f.path
  end
  local replaced = {}
  for i, f in ipairs(found) do
    local ok, layer = pcall(sparse.from_layer, f.child, { V = V, N = N, M = M })
    if not ok then
      fail(("%s: layer '%s': %s"):format(who, f.path, util.error_text(layer)))
    end
    f.layer, replaced[i] = layer, f.path
  end
  for _, f in ipairs(found) do f.parent[f.name] = f.layer end
  return model, replaced
end

return sparse
