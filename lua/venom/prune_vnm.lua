--- venom.prune_vnm — the V:N:M stages of venom.prune's GMP (mode "vnm"):
-- selection scores, the dense shadow trained with SR-STE while the schedule
-- runs, and compression into nn.SparseLinear. Part of venom.prune; scripts
-- use prune.GMP.
--
-- Selection: for a score matrix S (R, K), the engine's magnitude rule on S
-- (per block of V rows and group of M columns, the 4 columns with the
-- largest Σ over rows of the two largest scores, then each row's two
-- largest), applied to
--   score = "magnitude": S = |w|;
--   score = "fisher":    S = |w|·√(F + δ), i.e. √ of the single-weight OBS
--     saliency w²/[F⁻¹]_qq with a diagonal empirical Fisher F = E[g²]
--     (oBERT, Kurtic et al. 2022), read from Adam's exp_avg_sq (an
--     average of squared gradients the optimizer already keeps); δ =
--     1e-2·mean(F) is the damping, relative so it needs no tuning per loss
--     scale.
--
-- Dense shadow (shadow = true): while the schedule runs each layer stays an
-- nn.Linear with its dense weight W and the optimizer's dense state. Each
-- event selects the stage's V:2:M pattern m from W (all of W: a weight
-- outside the last pattern may come back); the forward computes with W⊙m,
-- and the gradient of W⊙m goes to all of W unchanged (the straight-through
-- estimator), so weights outside the pattern keep learning and compete at
-- the next selection. After each optimizer step they decay, W ← W −
-- lr·λ·(1−m)⊙W (SR-STE, Zhou et al. 2021, "Learning N:M fine-grained
-- structured sparse neural networks from scratch"; applied after the step
-- like AdamW's decoupled decay, since Adam would rescale a term added to
-- the gradient). For an nn.Linear on the CPU the forward and the decay are
-- fused C ops (venom/shadow.h: the product runs on the V:N:M kernels with
-- the kept weights read from W, dW is one dense product, the decay one
-- pass); a Conv2d, or a layer on CUDA, composes them from W − W⊙(1−m).
-- At the last event the layer is compressed for good into an
-- nn.SparseLinear and the shadow (dense weight, dense state) is released.
-- Without the shadow each event compresses from the weights alive so far.
-- Either way every slot of the final pattern is a trained weight: nnz =
-- 2·R·⌈K/M⌉ minus the slots of padding columns.
local venom = require "venom"
local nn = require "venom.nn"
local sparse = require "venom.sparse"
local util = require "venom.util"
local fail = util.fail

local core = venom.core
local is_tensor = venom.is_tensor

local vnm = {}

--- The (trainable) tensor that holds a layer's weights.
function vnm.weight_param(L)
  return L.module.values or L.module.weight
end

--- The weight of a pruned layer as a dense (R, K) tensor.
function vnm.dense_weight(L) return sparse.weight_matrix(L.module) end

--- Devices: masks applied after every step live on the layer's device;
-- selection and compression run on the CPU (the weight comes down once per
-- stage; the new values and optimizer state go up).
function vnm.device_of(L) return vnm.weight_param(L):device() end

local eyes = setmetatable({}, { __mode = "v" })
local function eye(R)
  if not eyes[R] then
    local a = venom.arange(R):long()
    eyes[R] = a:reshape(R, 1):eq(a:reshape(1, R)):float()
  end
  return eyes[R]
end

-- The dense (R, K) matrix d gathered into the compressed layout of the
-- V:N:M matrix s: the SDDMM Iᵀ·d sampled at s's kept positions.
local function gather(s, d)
  return core.vnm_sddmm(s, eye(d:size(1)), d:contiguous())
end

-- A state tensor of the layer's parameter as dense (R, K), on the CPU.
local function dense_state(L, v)
  v = v:cpu()
  if not L.module.matrix then return v:reshape(L.rows, L.cols) end -- Linear, Conv2d
  local m = L.module.matrix
  return core.vnm_from_pattern(L.rows, L.cols, L.module.V, L.module.N, L.module.M, m:columns(),
                               m:indices(), v:contiguous()):to_dense()
end

--- The selection score of layer L (dense (R, K), CPU) under opts.score,
-- restricted to `alive` when given (positions outside score −∞-like 0 and
-- are chosen only where a block has nothing better).
function vnm.score(gmp, L, alive)
  local w = vnm.dense_weight(L):cpu()
  local s = w:abs()
  if gmp.score == "fisher" then
    local st = gmp.opt.state[vnm.weight_param(L)]
    local v = st and st.exp_avg_sq
    if not is_tensor(v) then
      fail(("GMP:step: layer '%s': score = \"fisher\" needs the optimizer's average of squared "
        .. "gradients (Adam/AdamW exp_avg_sq), found none (prune after the first Adam step)")
        :format(L.path))
    end
    local F = dense_state(L, v)
    local damp = 1e-2 * F:mean():item() + 1e-30 -- 1e-30: an all-zero F still ranks by |w|
    s = s * (F + damp):sqrt()
  end
  if alive then s = s * alive end
  return s
end

-- The V:2:M pattern chosen on score matrix s, as a V:N:M matrix (its values
-- are the scores; only columns and indices are used).
local function select(gmp, L, s, M)
  local ok, sel = pcall(sparse.from_dense, s, { V = gmp.layout.V, N = 2, M = M })
  if not ok then fail(("GMP:step: layer '%s': %s"):format(L.path, util.error_text(sel))) end
  return sel
end

-- x ← x ⊙ (1 − pruned), or with a factor f: x ← x ⊙ (1 − f·pruned).
local function shrink(x, pruned, f)
  local k = (pruned * -f) + 1
  x:mul_(k)
  k:free()
end

-- The forward of a layer in the shadow: y = x·(W⊙m)ᵀ + b (a Conv2d: the
-- convolution by W⊙m) with dy/dW that of the plain layer (the
-- straight-through estimator) while the value is the pattern's. An
-- nn.Linear on the CPU runs the fused op (core.vnm_shadow_linear: the kept
-- weights gathered from W into the V:N:M kernels, dW one dense product);
-- otherwise W⊙m is written W − c with c = W⊙(1−m) held constant, and the
-- class's own forward runs on a view of the layer whose weight is W − c.
local function shadow_forward(self, x)
  local s = self._gmp_matrix
  if s and self.weight:device() == "cpu" and x:device() == "cpu" then
    return core.vnm_shadow_linear(x, s, self.weight, self.bias)
  end
  local c = venom.no_grad(function() return self.weight:detach() * self._gmp_pruned end)
  local masked = setmetatable({ weight = self.weight - c }, { __index = self })
  return getmetatable(self).forward(masked, x)
end

-- Compresses layer L into a V:2:M SparseLinear over the pattern chosen on
-- score s, with values from its current dense weights and the optimizer
-- state gathered into the compressed layout.
local function compress(gmp, L, s, M)
  local opt, old, dev = gmp.opt, vnm.weight_param(L), vnm.device_of(L)
  local sel = select(gmp, L, s, M)
  local w = vnm.dense_weight(L):cpu()
  local new = sparse.from_layer(L.module, { V = gmp.layout.V, N = 2, M = M }, w)
  new:_load_extra_state({ columns = sel:columns(), indices = sel:indices(), V = gmp.layout.V,
                          N = 2, M = M })
  venom.no_grad(function() new.values:copy_(gather(new.matrix, w)) end)

  -- The optimizer state in the new layout: kept weights keep theirs;
  -- weights outside the old pattern that come back start at zero state
  -- (without a shadow their value is 0 too: they grow from there).
  local st, state = opt.state[old], nil
  if st then
    state = {}
    for k, v in pairs(st) do
      if is_tensor(v) then
        local d = dense_state(L, v)
        if L.alive then d = d * L.alive end
        state[k] = gather(new.matrix, d):to(dev)
      else
        state[k] = v
      end
    end
  end
  new:to(dev)
  L.parent[L.key] = new
  opt:replace_parameter(old, new.values, state)
  L.module, L.alive, L.pruned, L.M = new, new:mask():float(), nil, M
end

-- The shadow at stage M: the pattern chosen on the dense weights; the layer
-- stays dense and computes through the pattern (shadow_forward).
local function shadow_stage(gmp, L, M)
  local sel = select(gmp, L, vnm.score(gmp, L), M)
  vnm.set_shadow(L, sel:mask():float(), M, gmp.layout.V, sel)
end

--- Puts layer L (an nn.Linear or nn.Conv2d) in the shadow at stage M of
-- layout V with the dense (R, K) 0/1 mask `alive` (CPU) and the V:N:M
-- matrix `sel` whose pattern it is. A checkpoint keeps only the mask: sel =
-- nil selects the pattern again on the mask itself, which gives the same
-- kept positions (each row has exactly its 2 ones in each group).
function vnm.set_shadow(L, alive, M, V, sel)
  local dev = vnm.device_of(L)
  L.alive, L.M = alive, M
  -- in the weight's own shape: (out, in) for a Linear, (out, in, kh, kw) for a Conv2d
  L.pruned = (alive * -1 + 1):reshape(L.module.weight:size()):to(dev)
  rawset(L.module, "_gmp_pruned", L.pruned)
  -- the fused op's pattern: nn.Linear only (a Conv2d composes)
  if getmetatable(L.module) == nn.Linear then
    rawset(L.module, "_gmp_matrix", sel or sparse.from_dense(alive, { V = V, N = 2, M = M }))
  end
  -- an nn.BitLinear takes γ over the kept weights only (nn_quant.lua)
  if getmetatable(L.module) == nn.BitLinear then rawset(L.module, "_gmp_kept", alive:sum():item()) end
  rawset(L.module, "forward", shadow_forward) -- this instance only; removed at compression
end

--- Moves layer L to stage M (final: the last event of the schedule).
function vnm.stage(gmp, L, M, final)
  if gmp.shadow and not final then return shadow_stage(gmp, L, M) end
  -- Without a shadow, select among the weights alive so far; with it, over
  -- all of the dense weights (alive is nil there, the pattern is fresh).
  local alive = not gmp.shadow and L.alive or nil
  if gmp.shadow then L.alive = nil end
  local s = vnm.score(gmp, L, alive)
  rawset(L.module, "forward", nil)
  rawset(L.module, "_gmp_pruned", nil)
  rawset(L.module, "_gmp_matrix", nil)
  rawset(L.module, "_gmp_kept", nil)
  compress(gmp, L, s, M)
end

--- After each optimizer step in the shadow: the SR-STE decay of the weights
-- outside the current pattern, W ← W − lr·λ·(1−m)⊙W (one pass of
-- core.vnm_shadow_decay_ for an nn.Linear on the CPU; the same numbers).
function vnm.decay(gmp, L)
  local f = (gmp.opt.lr or 0) * gmp.decay
  if not (L.pruned and f > 0) then return end
  local W, s = L.module.weight, rawget(L.module, "_gmp_matrix")
  venom.no_grad(function()
    if s and W:device() == "cpu" then core.vnm_shadow_decay_(W, s, f) else shrink(W, L.pruned, f) end
  end)
end

return vnm
