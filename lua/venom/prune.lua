--- venom.prune — gradual magnitude pruning (GMP) during training.
--
-- The schedule is the cubic one of Zhu & Gupta, "To prune, or not to prune:
-- exploring the efficacy of pruning for model compression" (2017): with
-- initial sparsity s_i, final sparsity s_f, start step t0, n pruning steps
-- every dt optimizer steps,
--
--     s_t = s_f + (s_i − s_f) · (1 − (t − t0) / (n·dt))³    for t0 ≤ t ≤ t0 + n·dt
--
-- (s_i before t0, s_f after), and the masks follow s_t at t = t0, t0 + dt, …,
-- t0 + n·dt: the weights of smallest magnitude (or score) are removed. In
-- the masked modes pruned weights stay pruned; in vnm mode see below.
--
--     local prune = require "venom.prune"
--     local opt = optim.AdamW(model:parameters(), {lr = 1e-3})
--     local gmp = prune.GMP(model, {optimizer = opt, pattern = "64:2:8",
--                                   t0 = 500, n = 20, dt = 50})
--     for each batch:  ...; opt:step(); local ev = gmp:step()   -- ev: a table at events
--
-- Modes (opts.mode):
--   "vnm" (default) — V:2:M layers (venom.sparse). The target s_t maps to
--     a stage M (progression = "every": the smallest M ≥ 4 with 1 − 2/M ≥
--     s_t, dense → 2:4 → 2:5 → … → 2:M_final; "doubling": 4 → 8 → 16 …,
--     whose groups of columns nest), so each stage is a layout the sparse
--     kernels run. With shadow = true (default) the layer keeps its dense
--     weight and optimizer state during the schedule, computes through the
--     stage's pattern chosen afresh from the dense weights at every event,
--     and trains all of the dense weight with the straight-through gradient
--     plus the SR-STE decay of the weights outside the pattern (Zhou et al.
--     2021; decay = λ); at the last event it becomes an nn.SparseLinear (a
--     Conv2d: an nn.SparseConv2d) for good (venom.prune_vnm says how). With
--     shadow = false it becomes a sparse layer at the first event and is recompressed when M grows,
--     from the weights alive so far. The new module replaces the old one in
--     its parent, and its `values` replace the old parameter in the
--     optimizer (Optimizer:replace_parameter), which keeps the state
--     (moments, step count) of the kept weights. score = "magnitude" or
--     "fisher" (oBERT's w²·F with F the diagonal empirical Fisher from
--     Adam's squared-gradient average) ranks the weights. The final layer
--     holds exactly its pattern: 2 weights of every row in each group of M
--     (nnz = 2·R·⌈K/M⌉ minus the slots of padding columns), all trainable;
--     a slot that lands on a weight pruned at an earlier stage brings it
--     back (at 0 without the shadow).
--   "nm" — masked dense weights with N:M masks (pattern "2:4", "1:4",
--     "4:8"…): within each group of M consecutive inputs of a row, the
--     largest surviving |w| are kept, going from M:M down to N:M as s_t grows
--     (keep ⌊M·(1 − s_t)⌋ per group, at least N).
--   "unstructured" — masked dense weights, magnitude masks keeping
--     size − ⌊s_t·size⌋ weights per layer (scope = "layer") or over all the
--     pruned layers together (scope = "global"). Exactly that many stay:
--     among equal magnitudes the weight of lowest index goes first (layers
--     in order, each row by row), so ties never prune more than the count.
-- Only the masks say what is pruned: a weight that is exactly zero but was
-- never pruned (a zero-initialised layer, a ReLU-dead unit) is alive and
-- may grow. Selection by magnitude needs finite weights: a NaN or ±inf
-- weight is an error naming the layer and the position, in every mode.
-- Masked modes multiply the weight, its gradient and the optimizer's state
-- tensors by the mask after every step, so Adam's moments of removed
-- weights are zero and the weights stay exactly zero.
local nn = require "venom.nn"
local sparse = require "venom.sparse"
local util = require "venom.util"
local masks = require "venom.prune_masks"
local vnm = require "venom.prune_vnm"
local fail = util.fail

local prune = {}

local GMP = {}
GMP.__index = GMP

-- An integer >= min (util.check_int: up to 2^53, so math.huge, which would
-- silently mean "never", is refused).
local function check_int(who, name, v, min)
  return util.check_int(v, name, { min = min, who = who, what = ("an integer >= %d"):format(min) })
end

local function check_sparsity(who, name, v)
  if type(v) ~= "number" or v ~= v or v < 0 or v >= 1 then
    fail(("%s: %s must be a sparsity (a number in [0, 1)), got %s%s"):format(who, name,
      type(v) == "number" and "" or type(v) .. " ", tostring(v)))
  end
  return v
end

--- The smallest M ≥ 4 with 1 − 2/M ≥ s (s in [0, 1)); the 1e-12 absorbs the
-- rounding of s computed from a pattern (1 − 2/M itself).
function prune.vnm_M(s)
  check_sparsity("prune.vnm_M", "s", s)
  -- The closed form, then a few steps to undo its rounding (near s = 1 the
  -- subtraction 1 − 2/M loses digits); past 2^40 no layout fits anyway.
  local M = math.max(4, math.floor(2 / (1 - s + 1e-12)))
  if M > 2 ^ 40 then return M end
  while M > 4 and 1 - 2 / (M - 1) >= s - 1e-12 do M = M - 1 end
  while 1 - 2 / M < s - 1e-12 do M = M + 1 end
  return M
end

-- The largest V and M the V:N:M format takes (the engine's limits: block
-- rows in int32, column offsets in uint16).
local MAX_V, MAX_M = 2 ^ 31 - 1, 65535

local function check_layout(who, V, M, what)
  if V > MAX_V or M > MAX_M then
    fail(("%s: %s gives V = %s and M = %s; the V:N:M format takes V <= %d and M <= %d")
      :format(who, what, tostring(V), tostring(M), MAX_V, MAX_M))
  end
  return { V = V, M = M }
end

-- The final layout from opts.pattern / opts.s_f, per mode. Returns s_f and
-- the mode's constants (V, M for vnm; N, M for nm).
local function parse_target(who, mode, opts)
  local pat, s_f = opts.pattern, opts.s_f
  if pat ~= nil and s_f ~= nil then
    fail(who .. ": give either s_f or pattern, not both")
  end
  if pat ~= nil and type(pat) ~= "string" then
    fail(("%s: pattern must be a string such as \"64:2:8\", got %s"):format(who, type(pat)))
  end
  if mode == "vnm" then
    if pat then
      local V, N, M = pat:match("^(%d+):(%d+):(%d+)$")
      V, N, M = tonumber(V), tonumber(N), tonumber(M)
      if not (V and V >= 1 and N == 2 and M >= 4) then
        fail(("%s: pattern must be V:2:M with V >= 1 and M >= 4 (e.g. \"64:2:8\"), got %q")
          :format(who, pat))
      end
      return 1 - 2 / M, check_layout(who, V, M, ("pattern %q"):format(pat))
    end
    if s_f == nil then
      fail(who .. ": give the final sparsity s_f or a pattern such as \"64:2:8\"")
    end
    check_sparsity(who, "s_f", s_f)
    local V = check_int(who, "V", opts.V or 64, 1)
    return s_f, check_layout(who, V, prune.vnm_M(s_f), "s_f = " .. tostring(s_f))
  elseif mode == "nm" then
    if not pat then
      fail(who .. ": mode \"nm\" needs a pattern N:M such as \"2:4\"")
    end
    local N, M = pat:match("^(%d+):(%d+)$")
    N, M = tonumber(N), tonumber(M)
    if not (N and M and N >= 1 and N < M and M <= MAX_M) then
      fail(("%s: pattern must be N:M with 1 <= N < M <= %d (e.g. \"2:4\"), got %q")
        :format(who, MAX_M, pat))
    end
    return 1 - N / M, { N = N, M = M }
  else
    if pat then fail(who .. ": mode \"unstructured\" takes s_f, not a pattern") end
    if s_f == nil then fail(who .. ": mode \"unstructured\" needs the final sparsity s_f") end
    return check_sparsity(who, "s_f", s_f), {}
  end
end

-- Every module below `model` as {path, parent, key, module}, depth first.
local function all_modules(model)
  local out = {}
  local function walk(m, prefix)
    for _, key in ipairs(m._modules) do
      local child, path = m[key], prefix .. tostring(key)
      out[#out + 1] = { path = path, parent = m, key = key, module = child }
      walk(child, path .. ".")
    end
  end
  walk(model, "")
  return out
end

-- The layers to prune: opts.layers names modules by dotted path ("3",
-- "encoder.fc") or by type ("Linear", "Conv2d"); default every nn.Conv2d
-- with groups = 1 and every nn.Linear but the last (the classifier).
local function select_layers(who, model, names)
  local mods, chosen, picked = all_modules(model), {}, {}
  if names == nil then
    local last
    for _, e in ipairs(mods) do
      if getmetatable(e.module) == nn.Linear then last = e end
    end
    for _, e in ipairs(mods) do
      if e ~= last and sparse.is_prunable(e.module) then chosen[#chosen + 1] = e end
    end
    if #chosen == 0 then
      fail(who .. ": the model has no nn.Conv2d, nor nn.Linear besides the last (the "
        .. "classifier), to prune")
    end
    return chosen
  end
  if type(names) ~= "table" or #names == 0 then
    fail(who .. ": layers must be a non-empty list of module names or types")
  end
  for _, name in ipairs(names) do
    local found = false
    for _, e in ipairs(mods) do
      if e.path == tostring(name) or getmetatable(e.module).__name == name then
        found = true
        if not picked[e.path] then
          picked[e.path] = true
          chosen[#chosen + 1] = e
        end
      end
    end
    if not found then
      fail(("%s: layers lists '%s', which is neither a module of the model nor the type of one")
        :format(who, tostring(name)))
    end
  end
  for _, e in ipairs(chosen) do
    if not sparse.is_prunable(e.module) then
      fail(("%s: layer '%s' is a %s; only nn.Linear, nn.BitLinear and nn.Conv2d (groups = 1) "
        .. "layers can be pruned")
        :format(who, e.path, getmetatable(e.module).__name or "?"))
    end
  end
  return chosen
end

--- prune.check_target(mode, target): raises the error prune.GMP would give
-- for this final layout (target: a pattern string for "vnm"/"nm", the final
-- sparsity s_f for "unstructured"), so that a script can check its options
-- before it loads data and builds a model.
function prune.check_target(mode, target)
  if mode ~= "vnm" and mode ~= "nm" and mode ~= "unstructured" then
    fail(("prune.GMP: mode must be \"vnm\", \"nm\" or \"unstructured\", got %s"):format(tostring(mode)))
  end
  parse_target("prune.GMP", mode, type(target) == "number" and { s_f = target } or { pattern = target })
end

--- A GMP scheduler for `model`. opts:
--   optimizer  the optimizer over model:parameters() (required): masked
--              modes clear its state at pruned positions, vnm swaps in the
--              new parameters
--   mode       "vnm" (default), "nm" or "unstructured"
--   pattern    final layout: "V:2:M" for vnm ("64:2:8"), "N:M" for nm
--   s_f        final sparsity in [0, 1) (vnm: with V = 64, M from s_f;
--              unstructured: required)
--   s_i        initial sparsity, 0 ≤ s_i ≤ s_f (default 0)
--   shadow     vnm: train a dense shadow with SR-STE during the schedule
--              (default true; false: compress at every stage)
--   decay      vnm shadow: SR-STE's λ, W ← W − lr·λ·(1−m)⊙W after each
--              step outside the pattern m (≥ 0, default 1)
--   progression  vnm: "every" (default) or "doubling" M stages
--   score      vnm: "magnitude" (default) or "fisher"
--   t0         first pruning step (≥ 0, default 0); n (≥ 1, required)
--              pruning steps, every dt (≥ 1, default 1) optimizer steps
--   layers     module paths or type names (default: every nn.Conv2d with
--              groups = 1 and every nn.Linear but the last; a Conv2d's
--              matrix is its weight as (out, in·kh·kw), "vnm" mode only);
--              scope = "layer" (default) or "global" (unstructured)
-- Errors name the bad option. With t0 = 0 the first event (s_i) happens here.
function prune.GMP(model, opts)
  local who = "prune.GMP"
  if not nn.is_module(model) then
    fail(("%s: expected a module, got %s"):format(who, type(model)))
  end
  opts = util.check_options(opts, { "optimizer", "mode", "pattern", "s_f", "s_i", "V", "t0",
                                    "n", "dt", "layers", "scope", "shadow", "decay",
                                    "progression", "score" }, who)
  local opt = opts.optimizer
  if opt == nil then
    fail(who .. ": optimizer is required (the optimizer over model:parameters())")
  elseif type(opt) ~= "table" or type(opt.params) ~= "table" or type(opt.state) ~= "table" then
    fail(("%s: optimizer must be a venom.optim optimizer over model:parameters(), got %s")
      :format(who, type(opt)))
  end
  local mode = opts.mode or "vnm"
  if mode ~= "vnm" and mode ~= "nm" and mode ~= "unstructured" then
    fail(("%s: mode must be \"vnm\", \"nm\" or \"unstructured\", got %s")
      :format(who, tostring(mode)))
  end
  local scope = opts.scope or "layer"
  if scope ~= "layer" and scope ~= "global" then
    fail(("%s: scope must be \"layer\" or \"global\", got %s"):format(who, tostring(scope)))
  end
  if scope == "global" and mode ~= "unstructured" then
    fail(who .. ": scope = \"global\" is for mode \"unstructured\"")
  end
  local s_f, layout = parse_target(who, mode, opts)
  for _, k in ipairs({ "shadow", "decay", "progression", "score" }) do
    if opts[k] ~= nil and mode ~= "vnm" then
      fail(("%s: %s is an option of mode \"vnm\""):format(who, k))
    end
  end
  local shadow = opts.shadow
  if shadow == nil then shadow = true end
  if type(shadow) ~= "boolean" then
    fail(("%s: shadow must be true or false, got %s"):format(who, tostring(shadow)))
  end
  local decay = opts.decay or 1
  if type(decay) ~= "number" or not (decay >= 0 and decay < math.huge) then
    fail(("%s: decay must be a finite number >= 0, got %s"):format(who, tostring(decay)))
  end
  local progression, score = opts.progression or "every", opts.score or "magnitude"
  if progression ~= "every" and progression ~= "doubling" then
    fail(("%s: progression must be \"every\" or \"doubling\", got %s"):format(who,
      tostring(progression)))
  end
  if score ~= "magnitude" and score ~= "fisher" then
    fail(("%s: score must be \"magnitude\" or \"fisher\", got %s"):format(who, tostring(score)))
  end
  -- fisher reads the optimizer's average of squared gradients at each event:
  -- an optimizer that keeps none (SGD) is refused now, not at the first event.
  if score == "fisher" and not (opt._state_fields and opt._state_fields.exp_avg_sq) then
    fail(("%s: score = \"fisher\" needs an optimizer that keeps an average of squared gradients "
      .. "(optim.Adam or optim.AdamW: exp_avg_sq); this optimizer's state holds %s"):format(who,
      opt._state_desc or "no exp_avg_sq"))
  end
  local s_i = check_sparsity(who, "s_i", opts.s_i or 0)
  if s_i > s_f then
    fail(("%s: s_i (%g) must not exceed the final sparsity (%g)"):format(who, s_i, s_f))
  end
  local t0 = check_int(who, "t0", opts.t0 or 0, 0)
  if opts.n == nil then
    fail(who .. ": n (the number of pruning events, spread dt optimizer steps apart) is required")
  end
  -- Pruning happens over n·dt steps: both at least 1.
  local n = check_int(who, "n", opts.n, 1)
  local dt = check_int(who, "dt", opts.dt or 1, 1)

  local layers = select_layers(who, model, opts.layers)
  -- A pruned layer gets a weight of its own, so a weight it shares with any
  -- other module (pruned or not) would silently stop being trained there.
  local held, users = {}, {}
  for _, p in ipairs(opt.params) do held[p] = true end
  for _, e in ipairs(all_modules(model)) do
    for _, name in ipairs(e.module._params) do
      local t = e.module[name]
      if t ~= nil then
        users[t] = users[t] or {}
        table.insert(users[t], e.path)
      end
    end
  end
  for _, L in ipairs(layers) do
    local others = {}
    for _, path in ipairs(users[L.module.weight] or {}) do
      if path ~= L.path then others[#others + 1] = path end
    end
    if #others > 0 then
      fail(("%s: layers '%s' and '%s' share one weight; a pruned layer gets a weight of its "
        .. "own, so untie them first"):format(who, L.path, table.concat(others, "', '")))
    end
    if not held[L.module.weight] then
      fail(("%s: the optimizer does not hold layer '%s''s weight; build it over "
        .. "model:parameters()"):format(who, L.path))
    end
    local k = L.module.kernel_size -- a Conv2d: its im2col matrix (out, in·kh·kw)
    L.rows = L.module.out_features or L.module.out_channels
    L.cols = L.module.in_features or L.module.in_channels * k[1] * k[2]
    if k and mode ~= "vnm" then
      fail(("%s: layer '%s' is a Conv2d; mode %q prunes nn.Linear layers only (Conv2d: mode "
        .. "\"vnm\")"):format(who, L.path, mode))
    end
    -- A masked BitLinear would take γ over its pruned zeros too.
    if getmetatable(L.module) == nn.BitLinear and mode ~= "vnm" then
      fail(("%s: layer '%s' is a BitLinear; mode %q prunes nn.Linear layers only (BitLinear: "
        .. "mode \"vnm\", which makes it an nn.SparseBitLinear)"):format(who, L.path, mode))
    end
    if layout.M and L.cols < layout.M then
      fail(("%s: layer '%s' has %d inputs, fewer than M = %d")
        :format(who, L.path, L.cols, layout.M))
    end
    if mode == "nm" and L.cols % layout.M ~= 0 then
      fail(("%s: layer '%s' has %d inputs, not a multiple of M = %d"):format(who, L.path, L.cols,
        layout.M))
    end
  end

  local self = setmetatable({ opt = opt, mode = mode, scope = scope, s_i = s_i, s_f = s_f,
    t0 = t0, n = n, dt = dt, layout = layout, layers = layers, t = 0, current = 0,
    shadow = mode == "vnm" and shadow, decay = decay, progression = progression, score = score,
    events = {} }, GMP)
  if t0 == 0 and s_i > 0 then self:_update(0) end
  return self
end

--- The scheduled sparsity at optimizer step t (the formula above; s_i
-- before t0 and s_f after t0 + n·dt).
function GMP:target(t)
  t = t or self.t
  if type(t) ~= "number" or t ~= t then -- NaN would compare false everywhere and give NaN
    fail(("GMP:target: t must be a step number, got %s"):format(type(t) == "number"
      and tostring(t) or type(t)))
  end
  if t <= self.t0 then return self.s_i end
  local span = self.n * self.dt
  if t >= self.t0 + span then return self.s_f end
  return self.s_f + (self.s_i - self.s_f) * (1 - (t - self.t0) / span) ^ 3
end

--- The target the masks currently follow: s_t at the last event (0 before
-- the first).
function GMP:sparsity() return self.current end

-- Events ---------------------------------------------------------------------------

function GMP:_pattern(L)
  if self.mode == "vnm" then
    return L.M and ("%d:2:%d"):format(self.layout.V, L.M) or "dense"
  elseif self.mode == "nm" then
    return L.keep and ("%d:%d"):format(L.keep, self.layout.M) or "dense"
  end
  return L.alive and ("%.1f%%"):format(100 * (1 - L.alive:sum():item() / (L.rows * L.cols)))
    or "dense"
end

-- Sets the masks for the target at step t and records the event.
function GMP:_update(t)
  local s = self:target(t)
  if s > 0 then -- before any mask changes
    for _, L in ipairs(self.layers) do masks.check_finite(L, vnm.dense_weight(L)) end
  end
  if s > 0 then
    if self.mode == "vnm" then
      local M = self:_stage_M(s)
      -- The shadow re-selects at every event and compresses at the last;
      -- without it a layer is recompressed when M grows.
      local final = t >= self.t0 + self.n * self.dt
      for _, L in ipairs(self.layers) do
        if self.shadow and L.pruned or L.M ~= M then vnm.stage(self, L, M, final) end
      end
    elseif self.mode == "nm" then
      local M = self.layout.M
      local keep = math.max(self.layout.N, math.floor(M * (1 - s) + 1e-9))
      for _, L in ipairs(self.layers) do
        if keep < M and keep ~= L.keep then
          L.alive, L.keep = masks.nm_mask(self, L, keep), keep
        end
      end
    else
      masks.unstructured(self, s)
    end
    if self.mode ~= "vnm" then self:_apply() end
  end
  self.current = s -- once the masks follow it (a refused weight leaves it as it was)
  local ev = { step = t, sparsity = s, layers = {} }
  for _, L in ipairs(self.layers) do
    ev.layers[#ev.layers + 1] = { name = L.path, pattern = self:_pattern(L) }
  end
  self.events[#self.events + 1] = ev
  return ev
end

-- The V:2:M stage for target s: the smallest M ≥ 4 with 1 − 2/M ≥ s
-- ("every"), or the smallest of 4, 8, 16, … ("doubling", whose groups of
-- columns nest), at most the final M.
function GMP:_stage_M(s)
  local M = prune.vnm_M(s)
  if self.progression == "doubling" then
    local d = 4
    while d < M do d = 2 * d end
    M = d
  end
  return math.min(M, self.layout.M)
end

-- After each optimizer step: masked modes hold the pruned positions at zero
-- (weights, gradients, optimizer state); the vnm shadow decays the weights
-- outside its pattern (SR-STE).
function GMP:_apply()
  for _, L in ipairs(self.layers) do
    if self.mode == "vnm" then
      vnm.decay(self, L)
    elseif L.alive then
      masks.mask_param(self.opt, L.module.weight, L.alive)
    end
  end
end

--- Call after each optimizer step. Re-zeroes the pruned weights (masked
-- modes) or decays them (the vnm shadow), counts the
-- step, and at t0, t0 + dt, …, t0 + n·dt prunes to the scheduled sparsity.
-- Returns the event at those steps — {step, sparsity, layers = {{name,
-- pattern}, ...}} — and nil otherwise.
function GMP:step()
  self:_apply()
  self.t = self.t + 1
  local t, t0 = self.t, self.t0
  if t >= t0 and t <= t0 + self.n * self.dt and (t - t0) % self.dt == 0 then
    return self:_update(t)
  end
end

--- Per pruned layer: {name, pattern ("64:2:8", "2:4", "75.0%" or "dense"),
-- nnz (weights alive), size (rows·cols), sparsity = 1 − nnz/size, and for
-- compressed V:N:M layers bytes (storage of the weight) and slots (stored
-- values: nnz plus the slots of padding columns)}.
function GMP:report()
  local out = {}
  for _, L in ipairs(self.layers) do
    local size = L.rows * L.cols
    local nnz = L.alive and L.alive:sum():item() or size
    local r = { name = L.path, pattern = self:_pattern(L), nnz = nnz, size = size,
                sparsity = 1 - nnz / size }
    if self.mode == "vnm" and L.module.stats then
      local st = L.module:stats()
      r.bytes, r.slots = st.bytes, st.nnz
    end
    out[#out + 1] = r
  end
  return out
end

require("venom.prune_state")(GMP)

return prune
