--- venom.prune_state — checkpoints of venom.prune's GMP scheduler
-- (state_dict, load_state_dict, snapshot): installed as GMP methods by
-- venom.prune; scripts reach them through venom.checkpoint.
local venom = require "venom"
local sparse = require "venom.sparse"
local util = require "venom.util"
local vnm = require "venom.prune_vnm"
local fail = util.fail

local is_tensor = venom.is_tensor

return function(GMP)

--- venom.checkpoint loads a part with this field before the model and the
-- optimizer: GMP:load_state_dict may turn layers into SparseLinear and swap
-- the optimizer's parameters, and their state must be loaded into those.
GMP.load_before_model = true

--- The schedule's position and each pruned layer's layout, as a flat table
-- for venom.checkpoint: "mode", "t" (steps taken), "current" (the target of
-- the last event), "shadow" (vnm: 1 with the dense shadow, else 0) and, per
-- layer (by its dotted path), "layers.<path>.M" (vnm: the V:2:M stage),
-- "layers.<path>.keep" (nm: weights kept per group of M) and
-- "layers.<path>.alive" (the dense f32 (rows, cols) mask of the weights
-- alive: vnm, the current pattern). A layer still dense has no entries.
-- The weights and the optimizer state (the shadow's dense ones during the
-- schedule) are the model's and the optimizer's parts.
function GMP:state_dict()
  local sd = { mode = self.mode, t = self.t, current = self.current }
  if self.mode == "vnm" then sd.shadow = self.shadow and 1 or 0 end
  for _, L in ipairs(self.layers) do
    local pre = "layers." .. L.path .. "."
    if L.M then sd[pre .. "M"] = L.M end
    if L.keep then sd[pre .. "keep"] = L.keep end
    if L.alive then sd[pre .. "alive"] = L.alive end
  end
  return sd
end

-- The fields of a layer record that state_dict/load_state_dict change.
local FIELDS = { "module", "M", "keep", "alive", "pruned" }

--- For venom.checkpoint: returns a function that puts the scheduler back as
-- it is now — its position, each layer's mask and layout, the modules in
-- their parents (with the shadow's forward) and their parameters (with
-- their state) in the optimizer — undoing a load_state_dict when a later
-- part of the checkpoint is refused.
function GMP:snapshot()
  local opt, saved, t, current = self.opt, {}, self.t, self.current
  for i, L in ipairs(self.layers) do
    local p = vnm.weight_param(L)
    local b = { param = p, state = opt.state[p], forward = rawget(L.module, "forward"),
                pruned_field = rawget(L.module, "_gmp_pruned"),
                matrix_field = rawget(L.module, "_gmp_matrix") }
    for _, f in ipairs(FIELDS) do b[f] = L[f] end
    saved[i] = b
  end
  return function()
    for i, L in ipairs(self.layers) do
      local b = saved[i]
      if L.module ~= b.module then -- load_state_dict rebuilt it as a SparseLinear
        opt:replace_parameter(vnm.weight_param(L), b.param, b.state)
        L.parent[L.key] = b.module
      end
      for _, f in ipairs(FIELDS) do L[f] = b[f] end
      rawset(L.module, "forward", b.forward)
      rawset(L.module, "_gmp_pruned", b.pruned_field)
      rawset(L.module, "_gmp_matrix", b.matrix_field)
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
-- options over a freshly built model and optimizer. In vnm mode a layer
-- saved compressed at stage 2:M becomes an nn.SparseLinear of that layout,
-- replacing the module in its parent and its parameter in the optimizer,
-- as a pruning event does (its weights, pattern and optimizer state then
-- come from the model's and the optimizer's parts, loaded after this one);
-- a layer saved in the dense shadow gets its mask back and stays dense.
-- Every entry is checked before anything changes; errors name the entry,
-- and a layer already pruned (at construction, t0 = 0) that the checkpoint
-- holds dense is refused.
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
  -- The shadow's layers are compressed at the last event: before it, a
  -- layer with a stage is in the shadow.
  local in_shadow = false
  if self.mode == "vnm" then
    known.shadow = true
    local shadow = sd_int(who, sd, "shadow", 0, 1) == 1
    if shadow ~= self.shadow then
      fail(("%s: the checkpoint was written with shadow = %s, this scheduler has shadow = %s")
        :format(who, tostring(shadow), tostring(self.shadow)))
    end
    in_shadow = shadow and t < self.t0 + self.n * self.dt
  end
  for i, L in ipairs(self.layers) do
    local pre = "layers." .. L.path .. "."
    local p = {}
    for _, f in ipairs({ "M", "keep", "alive" }) do known[pre .. f] = true end
    if self.mode == "vnm" and sd[pre .. "M"] ~= nil then
      p.M = sd_int(who, sd, pre .. "M", 4, self.layout.M)
      p.alive = sd_mask(who, sd, pre .. "alive", L.rows, L.cols)
      p.shadow = in_shadow
      if in_shadow and L.module.values then
        fail(("%s: layer '%s' is already compressed but the checkpoint holds it in the dense "
          .. "shadow"):format(who, L.path))
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
    if p.shadow then
      vnm.set_shadow(L, p.alive, p.M, self.layout.V)
    elseif p.M and p.M ~= L.M or p.M and not L.module.values then
      -- The weights given here are placeholders: the model's part loads the
      -- saved pattern and values into this layout.
      local old = vnm.weight_param(L)
      local new = sparse.from_layer(L.module, { V = self.layout.V, N = 2, M = p.M },
                                    vnm.dense_weight(L):cpu())
      new:to(vnm.device_of(L))
      L.parent[L.key] = new
      self.opt:replace_parameter(old, new.values, nil)
      L.module, L.pruned = new, nil
    end
    if p.alive and not p.shadow and not p.M then p.alive = p.alive:to(vnm.device_of(L)) end
    if not p.shadow then L.M, L.keep, L.alive = p.M, p.keep, p.alive end
  end
  self.t, self.current = t, current
end

end
