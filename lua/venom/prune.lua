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
-- t0 + n·dt: the weights of smallest magnitude among those still alive are
-- removed. Pruned weights stay pruned.
--
--     local prune = require "venom.prune"
--     local opt = optim.AdamW(model:parameters(), {lr = 1e-3})
--     local gmp = prune.GMP(model, {optimizer = opt, pattern = "64:2:8",
--                                   t0 = 500, n = 20, dt = 50})
--     for each batch:  ...; opt:step(); local ev = gmp:step()   -- ev: a table at events
--
-- Modes (opts.mode):
--   "vnm" (default) — V:2:M layers (venom.sparse). The target s_t maps to the
--     smallest M ≥ 4 with 1 − 2/M ≥ s_t, so each stage is a layout the sparse
--     kernels run: dense → 2:4 → 2:5 → … → 2:M_final. A layer becomes an
--     nn.SparseLinear (an nn.Conv2d an nn.SparseConv2d) the first time s_t > 0 and is re-selected by magnitude
--     and recompressed when M grows. The new module replaces the old one in
--     its parent, and its `values` replace the old parameter in the optimizer
--     (Optimizer:replace_parameter), which keeps the state (moments, step
--     count) of the surviving weights and drops that of the removed ones.
--     When M grows the groups of M columns move, so a block's 4 columns may
--     cover positions pruned earlier: those slots hold zeros and are held at
--     zero after every step, so a pruned weight never comes back.
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
local venom = require "venom"
local nn = require "venom.nn"
local sparse = require "venom.sparse"
local util = require "venom.util"
local fail = util.fail

local core = venom.core
local is_tensor = venom.is_tensor

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
      fail(("%s: layer '%s' is a %s; only nn.Linear and nn.Conv2d (groups = 1) layers can be "
        .. "pruned")
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
--   t0         first pruning step (≥ 0, default 0); n (≥ 1, required)
--              pruning steps, every dt (≥ 1, default 1) optimizer steps
--   layers     module paths or type names (default: every nn.Conv2d with
--              groups = 1 and every nn.Linear but the last; a Conv2d's
--              matrix is its weight as (out, in·kh·kw), "vnm" mode only); scope = "layer" (default) or "global" (unstructured)
-- Errors name the bad option. With t0 = 0 the first event (s_i) happens here.
function prune.GMP(model, opts)
  local who = "prune.GMP"
  if not nn.is_module(model) then
    fail(("%s: expected a module, got %s"):format(who, type(model)))
  end
  opts = util.check_options(opts, { "optimizer", "mode", "pattern", "s_f", "s_i", "V", "t0",
                                    "n", "dt", "layers", "scope" }, who)
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
  local s_i = check_sparsity(who, "s_i", opts.s_i or 0)
  if s_i > s_f then
    fail(("%s: s_i (%g) must not exceed the final sparsity (%g)"):format(who, s_i, s_f))
  end
  local t0 = check_int(who, "t0", opts.t0 or 0, 0)
  if opts.n == nil then
    fail(who .. ": n (the number of pruning events, spread dt optimizer steps apart) is required")
  end
  local n = check_int(who, "n", opts.n, 0)
  local dt = check_int(who, "dt", opts.dt or 1, 0)
  if n * dt == 0 then
    fail(("%s: n·dt must be positive (pruning happens over n·dt steps), got n = %d, dt = %d")
      :format(who, n, dt))
  end

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

-- Tensor helpers ------------------------------------------------------------------

-- x ⊙ mask in place for the parameter, its gradient and every optimizer
-- state tensor of its shape (moments, momentum buffers).
local function mask_param(opt, p, mask)
  venom.no_grad(function()
    p:mul_(mask)
    if p.grad then p.grad:mul_(mask) end
    local st = opt.state[p]
    if st then
      for _, v in pairs(st) do
        if is_tensor(v) then v:mul_(mask) end
      end
    end
  end)
end

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

-- The weight of a pruned layer as a dense (R, K) tensor.
local function dense_weight(L) return sparse.weight_matrix(L.module) end

-- The (trainable) tensor that holds a layer's weights.
local function weight_param(L)
  return L.module.values or L.module.weight
end

-- Devices. The masks applied after every step (vmask, and alive in the
-- masked modes) live on the layer's device. Pattern selection and
-- recompression of vnm layers run on the CPU, as do their alive masks (only
-- recompression reads them): the weight comes down once per stage, and the
-- new values, vmask and optimizer state go up.
local function device_of(L) return weight_param(L):device() end

-- vnm -------------------------------------------------------------------------------

-- A state tensor of the old parameter as dense (R, K).
local function dense_state(L, v)
  if not L.module.matrix then return v:reshape(L.rows, L.cols) end -- Linear, Conv2d
  local m = L.module.matrix
  return core.vnm_from_pattern(L.rows, L.cols, L.module.V, L.module.N, L.module.M, m:columns(),
                               m:indices(), v:contiguous()):to_dense()
end

-- Rebuilds layer L as a V:2:M SparseLinear (SparseConv2d) from its surviving weights.
function GMP:_vnm_stage(L, M)
  local opt, old, dev = self.opt, weight_param(L), device_of(L)
  local w = dense_weight(L):cpu()
  if L.alive then w = w * L.alive end
  local new = sparse.from_layer(L.module, { V = self.layout.V, N = 2, M = M }, w)
  local kept = new:mask():float()
  local alive = L.alive and kept * L.alive or kept
  local live = alive:sum():item()
  local slots = new:stats().nnz
  -- Slots over pruned positions (zeros) must stay zero: their mask in the
  -- compressed layout. Without such slots the pattern alone keeps them out.
  local vmask = live < slots and gather(new.matrix, alive) or nil

  -- Carry over the optimizer state of the survivors, in the new layout.
  local st, state = opt.state[old], nil
  if st then
    state = {}
    for k, v in pairs(st) do
      if is_tensor(v) then
        local d = dense_state(L, v:cpu()) * alive
        state[k] = gather(new.matrix, d):to(dev)
      else
        state[k] = v
      end
    end
  end
  new:to(dev)
  if vmask then vmask = vmask:to(dev) end
  L.parent[L.key] = new
  opt:replace_parameter(old, new.values, state)
  L.module, L.alive, L.vmask, L.M, L.live = new, alive, vmask, M, live
  if vmask then mask_param(opt, new.values, vmask) end
end

-- nm / unstructured masks --------------------------------------------------------------

-- Selection by magnitude has no answer for NaN (it compares false with
-- everything) or ±inf: refuse them with the layer and the 1-based position,
-- as vnm mode does. w − w is 0 where w is finite, so one sum tells.
local function check_finite(L)
  local w = L.module.weight:detach()
  local d = w - w
  local bad = d:sum():item() ~= 0
  d:free()
  if not bad then return end
  local flat = w:reshape(-1):cpu():totable()
  for i, v in ipairs(flat) do
    if v - v ~= 0 then
      fail(("GMP:step: layer '%s': weight (%d, %d) is %s; selection by magnitude needs finite "
        .. "weights")
        :format(L.path, math.floor((i - 1) / L.cols) + 1, (i - 1) % L.cols + 1,
          v ~= v and "nan" or v > 0 and "inf" or "-inf"))
    end
  end
end

-- The N:M mask keeping `keep` of each group of M inputs per row, by
-- magnitude among the alive weights.
function GMP:_nm_mask(L, keep)
  local R, K, M = L.rows, L.cols, self.layout.M
  local score = L.module.weight:detach():abs()
  if L.alive then score = score:masked_fill(L.alive:eq(0), -1) end -- pruned: never chosen
  score = score:reshape(R, K / M, M)
  local dev = score:device()
  local positions = venom.arange(M):long():reshape(1, 1, M):to(dev)
  local mask = venom.zeros(R, K / M, M, { device = dev })
  for _ = 1, keep do
    local idx = score:argmax(3) - 1 -- 0-based, like positions
    local pick = positions:eq(idx:unsqueeze(3))
    mask = mask + pick:float()
    score = score:masked_fill(pick, -2)
  end
  mask = mask:reshape(R, K)
  if L.alive then mask = mask * L.alive end
  return mask
end

-- The k-th smallest number of array a (1 ≤ k ≤ #a), reordering a: Hoare's
-- selection (Wirth's version), linear time on average; runs of equal
-- values split evenly, so ties do not make it quadratic.
local function kth_smallest(a, k)
  local lo, hi = 1, #a
  while lo < hi do
    local pivot = a[math.floor((lo + hi) / 2)]
    local i, j = lo, hi
    while i <= j do
      while a[i] < pivot do i = i + 1 end
      while a[j] > pivot do j = j - 1 end
      if i <= j then
        a[i], a[j] = a[j], a[i]
        i, j = i + 1, j - 1
      end
    end
    if k <= j then hi = j elseif k >= i then lo = i else return a[k] end
  end
  return a[k]
end

-- Magnitude masks keeping size − ⌊s·size⌋ weights (⌊s·size⌋ pruned) per layer or in all the
-- layers together: of the weights still alive, the smallest |w| go until
-- that count is left. The cut is the need-th smallest alive |w|: every
-- weight above it stays, every one below goes, and of those equal to it
-- the lowest indices go first (layers in order, each row-major), so ties
-- prune exactly as many as needed. |w| comes to the CPU as a Lua array for
-- the selection; the masks themselves are tensor comparisons.
function GMP:_unstructured_masks(s)
  local groups = {}
  if self.scope == "global" then
    groups[1] = self.layers
  else
    for i, L in ipairs(self.layers) do groups[i] = { L } end
  end
  for _, group in ipairs(groups) do
    -- |w| with the pruned weights at −1: never counted, never kept.
    local scores, flat, live, size = {}, {}, {}, 0
    for i, L in ipairs(group) do
      local a = L.module.weight:detach():abs()
      if L.alive then a = a:masked_fill(L.alive:eq(0), -1) end
      scores[i] = a:cpu()
      flat[i] = scores[i]:reshape(-1):totable()
      for _, v in ipairs(flat[i]) do
        if v >= 0 then live[#live + 1] = v end
      end
      size = size + L.rows * L.cols
    end
    -- ⌊s·size⌋ weights are pruned in all (1e-9 absorbs
    -- s·size landing a hair under an integer), so size − ⌊s·size⌋ stay.
    local need = #live - (size - math.floor(s * size + 1e-9)) -- how many more go
    local cut, at_cut = -1, 0 -- above cut stays; of the weights equal to it, at_cut go
    if need > 0 then
      cut = kth_smallest(live, need)
      at_cut = need
      for _, v in ipairs(live) do
        if v < cut then at_cut = at_cut - 1 end
      end
    end
    for i, L in ipairs(group) do
      local keep = scores[i]:gt(cut):float()
      if need > 0 then
        for j, v in ipairs(flat[i]) do
          if v == cut then
            if at_cut > 0 then
              at_cut = at_cut - 1 -- goes (gt left it 0)
            else
              keep:set(math.floor((j - 1) / L.cols) + 1, (j - 1) % L.cols + 1, 1)
            end
          end
        end
      end
      L.alive = keep:to(device_of(L))
    end
  end
end

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
  if s > 0 and self.mode ~= "vnm" then -- vnm: nn.SparseLinear checks (the same message)
    for _, L in ipairs(self.layers) do check_finite(L) end -- before any mask changes
  end
  if s > 0 then
    if self.mode == "vnm" then
      local M = math.min(prune.vnm_M(s), self.layout.M)
      for _, L in ipairs(self.layers) do
        if L.M ~= M then self:_vnm_stage(L, M) end
      end
    elseif self.mode == "nm" then
      local M = self.layout.M
      local keep = math.max(self.layout.N, math.floor(M * (1 - s) + 1e-9))
      for _, L in ipairs(self.layers) do
        if keep < M and keep ~= L.keep then
          L.alive, L.keep = self:_nm_mask(L, keep), keep
        end
      end
    else
      self:_unstructured_masks(s)
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

-- Holds the pruned positions at zero (weights, gradients, optimizer state).
function GMP:_apply()
  for _, L in ipairs(self.layers) do
    if self.mode == "vnm" then
      if L.vmask then mask_param(self.opt, L.module.values, L.vmask) end
    elseif L.alive then
      mask_param(self.opt, L.module.weight, L.alive)
    end
  end
end

--- Call after each optimizer step. Re-zeroes the pruned weights, counts the
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
-- V:N:M layers bytes (compressed storage of the weight) and slots (stored
-- values, ≥ nnz)}.
function GMP:report()
  local out = {}
  for _, L in ipairs(self.layers) do
    local size = L.rows * L.cols
    local nnz = L.alive and L.alive:sum():item() or size
    local r = { name = L.path, pattern = self:_pattern(L), nnz = nnz, size = size,
                sparsity = 1 - nnz / size }
    if self.mode == "vnm" and L.M then
      local st = L.module:stats()
      r.bytes, r.slots = st.bytes, st.nnz
    end
    out[#out + 1] = r
  end
  return out
end

-- Checkpoints ----------------------------------------------------------------------

--- venom.checkpoint loads a part with this field before the model and the
-- optimizer: GMP:load_state_dict may turn layers into SparseLinear and swap
-- the optimizer's parameters, and their state must be loaded into those.
GMP.load_before_model = true

--- The schedule's position and each pruned layer's layout, as a flat table
-- for venom.checkpoint: "mode", "t" (steps taken), "current" (the target of
-- the last event) and, per layer (by its dotted path), "layers.<path>.M"
-- (vnm: the V:2:M stage), "layers.<path>.keep" (nm: weights kept per group
-- of M), "layers.<path>.alive" (the dense f32 (rows, cols) mask of the
-- weights not pruned) and, for vnm layers whose compressed slots cover
-- pruned positions, "layers.<path>.vmask" (the mask in the compressed
-- layout). A layer still dense has no entries. The weights and the
-- optimizer state are the model's and the optimizer's parts.
function GMP:state_dict()
  local sd = { mode = self.mode, t = self.t, current = self.current }
  for _, L in ipairs(self.layers) do
    local pre = "layers." .. L.path .. "."
    if L.M then sd[pre .. "M"] = L.M end
    if L.keep then sd[pre .. "keep"] = L.keep end
    if L.alive then sd[pre .. "alive"] = L.alive end
    if L.vmask then sd[pre .. "vmask"] = L.vmask end
  end
  return sd
end

--- For venom.checkpoint: returns a function that puts the scheduler back as
-- it is now — its position, each layer's mask and layout, the modules in
-- their parents and their parameters (with their state) in the optimizer —
-- undoing a load_state_dict when a later part of the checkpoint is refused.
function GMP:snapshot()
  local opt, saved, t, current = self.opt, {}, self.t, self.current
  for i, L in ipairs(self.layers) do
    local p = weight_param(L)
    saved[i] = { module = L.module, param = p, state = opt.state[p], M = L.M, keep = L.keep,
                 alive = L.alive, vmask = L.vmask, live = L.live }
  end
  return function()
    for i, L in ipairs(self.layers) do
      local b = saved[i]
      if L.module ~= b.module then -- load_state_dict rebuilt it as a SparseLinear
        opt:replace_parameter(weight_param(L), b.param, b.state)
        L.parent[L.key] = b.module
      end
      L.module, L.M, L.keep, L.alive, L.vmask, L.live = b.module, b.M, b.keep, b.alive, b.vmask,
        b.live
    end
    self.t, self.current = t, current
  end
end

local shape_of = util.format_shape

-- sd[key] as an integer within [lo, hi] (hi optional; numbers may arrive as
-- strings).
local function sd_int(who, sd, key, lo, hi)
  return util.check_int(tonumber(sd[key]) or sd[key], ("'%s'"):format(key),
    { min = lo, max = hi, who = who })
end

-- sd[key] as an f32 tensor of the given shape, copied.
local function sd_mask(who, sd, key, rows, cols)
  local v, want = sd[key], shape_of({ rows, cols })
  if not is_tensor(v) or v:dtype() ~= "f32" or shape_of(v) ~= want then
    fail(("%s: '%s' must be an f32 tensor of shape %s, got %s"):format(who, key, want,
      is_tensor(v) and v:dtype() .. " " .. shape_of(v) or type(v)))
  end
  -- 0/1 only: anything else (NaN, 2) would scale weights instead of masking.
  local not0, not1 = v:ne(0), v:ne(1)
  local both = not0:mul(not1)
  local bad = both:sum():item()
  not0:free(); not1:free(); both:free()
  if bad > 0 then
    fail(("%s: '%s' must hold only 0 and 1, found %d other values"):format(who, key, bad))
  end
  return v:clone()
end

--- Restores a table from state_dict() (or read back by venom.checkpoint,
-- where numbers arrive as strings) into a scheduler built with the same
-- options over a freshly built model and optimizer. In vnm mode each layer
-- saved at stage 2:M becomes an nn.SparseLinear of that layout, replacing
-- the module in its parent and its parameter in the optimizer, as a pruning
-- event does (its weights, pattern and optimizer state then come from the
-- model's and the optimizer's parts, loaded after this one). Every entry is
-- checked before anything changes; errors name the entry, and a layer
-- already pruned (at construction, t0 = 0) that the checkpoint holds dense
-- is refused.
function GMP:load_state_dict(sd)
  local who = "GMP:load_state_dict"
  if type(sd) ~= "table" then
    fail(("%s: expected a table, got %s"):format(who, type(sd)))
  end
  if sd.mode ~= self.mode then
    fail(("%s: the checkpoint is for mode %s, this scheduler's is %s"):format(who,
      tostring(sd.mode), self.mode))
  end
  local t = sd_int(who, sd, "t", 0)
  local current = tonumber(sd.current)
  if not current or current ~= current or current < 0 or current >= 1 then
    fail(("%s: 'current' must be a sparsity in [0, 1), got %s"):format(who, tostring(sd.current)))
  end
  local known, plan = { mode = true, t = true, current = true }, {}
  for i, L in ipairs(self.layers) do
    local pre = "layers." .. L.path .. "."
    local p = {}
    for _, f in ipairs({ "M", "keep", "alive", "vmask" }) do known[pre .. f] = true end
    if self.mode == "vnm" and sd[pre .. "M"] ~= nil then
      p.M = sd_int(who, sd, pre .. "M", 4, self.layout.M)
      p.alive = sd_mask(who, sd, pre .. "alive", L.rows, L.cols)
      if sd[pre .. "vmask"] ~= nil then
        p.vmask = sd_mask(who, sd, pre .. "vmask", L.rows, 2 * math.ceil(L.cols / p.M))
      end
    elseif self.mode ~= "vnm" and sd[pre .. "alive"] ~= nil then
      p.alive = sd_mask(who, sd, pre .. "alive", L.rows, L.cols)
      if self.mode == "nm" then
        p.keep = sd_int(who, sd, pre .. "keep", self.layout.N, self.layout.M - 1)
      end
    end
    if (L.M or L.alive) and not (p.M or p.alive) then
      fail(("%s: layer '%s' is already pruned but the checkpoint holds it dense"):format(who,
        L.path))
    end
    if current > 0 and not (p.M or p.alive) then -- every event prunes every layer
      fail(("%s: the checkpoint's target sparsity is %g but it has no entry for layer '%s'")
        :format(who, current, L.path))
    end
    plan[i] = p
  end
  for key in pairs(sd) do
    if not known[key] then
      fail(("%s: unexpected entry '%s' (not a %s-mode entry of this scheduler's layers)")
        :format(who, tostring(key), self.mode))
    end
  end

  for i, L in ipairs(self.layers) do
    local p = plan[i]
    if p.M and p.M ~= L.M then
      -- The weights given here are placeholders: the model's part loads the
      -- saved pattern and values into this layout.
      local old = weight_param(L)
      local new = sparse.from_layer(L.module, { V = self.layout.V, N = 2, M = p.M },
                                    dense_weight(L):cpu())
      new:to(device_of(L))
      L.parent[L.key] = new
      self.opt:replace_parameter(old, new.values, nil)
      L.module = new
    end
    local dev = device_of(L)
    if p.vmask then p.vmask = p.vmask:to(dev) end
    if p.alive and not p.M then p.alive = p.alive:to(dev) end -- masked modes apply it
    L.M, L.keep, L.alive, L.vmask = p.M, p.keep, p.alive, p.vmask
    L.live = p.M and p.alive:sum():item() or nil
  end
  self.t, self.current = t, current
end

return prune
