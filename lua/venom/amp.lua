--- venom.amp — dynamic loss scaling for f16 mixed precision (Micikevicius et
-- al. 2018, "Mixed Precision Training"). Under venom.autocast("f16", ...)
-- small gradients underflow f16's range (smallest normal 6.1e-5); scaling the
-- loss by S scales every gradient by S, and unscaling the f32 gradients by
-- 1/S before the optimizer step gives the true update. S is chosen on the
-- fly: a step whose gradients hold an inf or NaN is skipped and S shrinks
-- (× backoff_factor); after growth_interval clean steps in a row S grows
-- (× growth_factor). bf16 has f32's range and needs none of this.
--
--     local amp = require "venom.amp"
--     local scaler = amp.GradScaler()             -- {init_scale = 2^16, growth_factor = 2,
--                                                 --  backoff_factor = 0.5, growth_interval = 2000}
--     local loss = venom.autocast("f16", function() return model:loss(x, y) end)
--     opt:zero_grad()
--     scaler:scale(loss):backward()
--     scaler:step(opt)                            -- unscales, then steps unless inf/NaN
--     scaler:update()                             -- grows or shrinks the scale
--
-- scaler:unscale_(opt) unscales early (e.g. before clipping gradients);
-- step does not unscale twice. scaler.found_inf says whether the last step
-- was skipped; scaler:get_scale() is S.
local venom = require "venom"
local util = require "venom.util"
local fail = util.fail

local amp = {}

local GradScaler = {}
GradScaler.__index = GradScaler

local function check_positive(who, name, v, min_open)
  if type(v) ~= "number" or v ~= v or v == math.huge or not (v > min_open) then
    fail(("%s: %s must be a finite number > %s, got %s"):format(who, name, tostring(min_open),
      type(v) == "number" and tostring(v) or ("a %s (%s)"):format(type(v), tostring(v))))
  end
  return v
end

-- opt must be an optimizer (venom.optim's, or anything with a params list).
local function check_opt(who, opt)
  if type(opt) ~= "table" or type(opt.params) ~= "table" then
    fail(("%s: expected an optimizer (such as venom.optim.AdamW(...)), got %s"):format(who,
      type(opt) == "table" and "a table without a params list" or type(opt)))
  end
end

--- amp.GradScaler([opts]) → a scaler; opts init_scale (> 0, default 2^16),
-- growth_factor (> 1, default 2), backoff_factor (in (0, 1), default 0.5),
-- growth_interval (an integer ≥ 1, default 2000). Bad options are errors
-- that name them.
function amp.GradScaler(opts)
  local who = "GradScaler"
  opts = util.check_options(opts, { "init_scale", "growth_factor", "backoff_factor",
    "growth_interval" }, who)
  local self = setmetatable({
    scale_value = check_positive(who, "init_scale", opts.init_scale or 2 ^ 16, 0),
    growth_factor = check_positive(who, "growth_factor", opts.growth_factor or 2, 1),
    backoff_factor = check_positive(who, "backoff_factor", opts.backoff_factor or 0.5, 0),
    growth_interval = opts.growth_interval or 2000,
    growth_tracker = 0, -- clean steps in a row since the scale last changed
    found_inf = false,
    unscaled = false,   -- unscale_ ran since the last update
  }, GradScaler)
  if self.backoff_factor >= 1 then
    fail(("%s: backoff_factor must be in (0, 1), got %s"):format(who, tostring(self.backoff_factor)))
  end
  util.check_int(self.growth_interval, "growth_interval", { min = 1, who = who })
  return self
end

--- The current scale S.
function GradScaler:get_scale() return self.scale_value end

--- loss · S (a new tensor, differentiable), to call backward on.
function GradScaler:scale(loss)
  if not venom.is_tensor(loss) then
    fail(("GradScaler:scale: expected the loss tensor, got %s"):format(type(loss)))
  end
  return loss * self.scale_value
end

--- Divides every gradient of opt's parameters by S in place and records in
-- self.found_inf whether any of them holds an inf or NaN (one sum over all
-- gradients, read back once). Once per step: a second call before update()
-- is an error, since it would divide twice.
function GradScaler:unscale_(opt)
  if self.unscaled then
    fail("GradScaler:unscale_: already unscaled since the last update(); call it once per step")
  end
  check_opt("GradScaler:unscale_", opt)
  local inv, total = 1 / self.scale_value, nil
  venom.no_grad(function()
    for _, p in ipairs(opt.params) do
      local g = p.grad
      if g then
        g:mul_(inv)
        local s = g:abs():sum()
        total = total and total + s or s
      end
    end
  end)
  local t = total and total:item() or 0
  self.found_inf = t ~= t or t == math.huge
  self.unscaled = true
end

--- Unscales (unless unscale_ already did) and runs opt:step() unless a
-- gradient holds an inf or NaN; returns true when the step ran.
function GradScaler:step(opt)
  check_opt("GradScaler:step", opt)
  if not self.unscaled then self:unscale_(opt) end
  if self.found_inf then return false end
  opt:step()
  return true
end

--- After step: shrinks S (× backoff_factor) when the step was skipped, and
-- grows it (× growth_factor) after growth_interval clean steps in a row.
function GradScaler:update(...)
  if select("#", ...) > 0 then
    fail(("GradScaler:update: takes no argument (the scale follows growth_factor and "
      .. "backoff_factor), got %s"):format(type((...))))
  end
  if self.found_inf then
    self.scale_value = self.scale_value * self.backoff_factor
    self.growth_tracker = 0
  else
    self.growth_tracker = self.growth_tracker + 1
    if self.growth_tracker == self.growth_interval then
      self.scale_value = self.scale_value * self.growth_factor
      self.growth_tracker = 0
    end
  end
  self.unscaled = false
end

return amp
