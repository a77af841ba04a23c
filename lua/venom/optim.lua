--- venom.optim — optimizers and learning-rate schedules.
--
--     local opt = optim.AdamW(model:parameters(), {lr = 1e-3})
--     local sched = optim.CosineWarmup(opt, {warmup_steps = 100, total_steps = 2000})
--     for each batch:  opt:zero_grad(); loss:backward(); opt:step(); sched:step()
--
-- The update arithmetic runs in C (venom.sgd_step / venom.adam_step), in place
-- on each parameter. Per-parameter state lives in `opt.state[p]`, with tensors
-- of the parameter's shape. The learning rate is the plain field `opt.lr`;
-- schedules write it before each step.
local venom = require "venom"
local util = require "venom.util"
local fail = util.fail

local optim = {}

local function check_number(who, name, v, lo, hi, lo_open, hi_open)
  local bad = type(v) ~= "number" or v ~= v
    or (lo and (v < lo or (lo_open and v == lo)))
    or (hi and (v > hi or (hi_open and v == hi)))
  if bad then
    local range = ("%s%s, %s%s"):format(lo_open and "(" or "[", tostring(lo or "-inf"),
      tostring(hi or "inf"), hi_open and ")" or "]")
    fail(("%s: %s must be a number in %s, got %s"):format(who, name, range, tostring(v)))
  end
  return v
end

local function check_params(who, params)
  if type(params) ~= "table" then
    fail(("%s: params must be a list of tensors (e.g. model:parameters()), got %s")
      :format(who, type(params)))
  end
  if #params == 0 then
    fail(who .. ": params is an empty list")
  end
  local seen, list = {}, {}
  for i, p in ipairs(params) do
    if not venom.is_tensor(p) then
      fail(("%s: params[%d] is a %s, expected a tensor"):format(who, i, type(p)))
    end
    if seen[p] then
      fail(("%s: params[%d] appears twice in the list"):format(who, i))
    end
    -- A computed tensor (a view such as p:narrow(...), or x*2) never gets a
    -- .grad of its own: backward accumulates into the leaves it came from,
    -- so the optimizer would silently do nothing with it.
    if not p:is_leaf() then
      fail(("%s: params[%d] is not a leaf tensor (it was computed by '%s'); pass the "
        .. "parameter itself"):format(who, i, p:grad_fn() or "?"))
    end
    if not p:requires_grad() then
      fail(("%s: params[%d] does not require a gradient (call p:requires_grad_(true))")
        :format(who, i))
    end
    seen[p] = true
    list[i] = p
  end
  return list
end

-- Optimizer base ----------------------------------------------------------------

local Optimizer = {}
Optimizer.__index = Optimizer

local function new_optimizer(cls, who, params, opts, known)
  opts = util.check_options(opts, known, who)
  local self = setmetatable({}, cls)
  self.who = who
  self.params = check_params(who, params)
  self.state = {}
  return self, opts
end

-- Parameter i, checked to be usable: a parameter freed after the optimizer
-- was built is an error at the caller's line, not inside this file.
local function live_param(self, i, p, method)
  if p:is_freed() then
    fail(("%s:%s: params[%d] was freed (t:free()) and can no longer be updated")
      :format(self.who, method, i))
  end
  return p
end

--- Drops the gradient of every parameter.
function Optimizer:zero_grad()
  for i, p in ipairs(self.params) do
    live_param(self, i, p, "zero_grad"):zero_grad()
  end
end

local shape_str = util.format_shape

--- Puts parameter `new` in the place of `old` (same position in the list, so
-- state_dict numbering is unchanged) and drops old's state. `state` (a
-- table with the fields of this optimizer's state, for `new`'s shape) lets
-- the caller carry state over, e.g. the moments of the weights a pruned
-- layer keeps (venom.prune); nil starts `new` fresh.
function Optimizer:replace_parameter(old, new, state)
  local who = self.who .. ":replace_parameter"
  if not venom.is_tensor(new) or not new:is_leaf() or not new:requires_grad() then
    fail(who .. ": the new parameter must be a leaf tensor that requires a gradient")
  end
  for i, p in ipairs(self.params) do
    if p == old then
      self.params[i] = new
      self.state[old] = nil
      self.state[new] = state
      return i
    end
  end
  fail(who .. ": the old tensor is not one of this optimizer's parameters")
end

--- What training changes, as a flat table for venom.checkpoint: "lr" (the
-- current learning rate) and, for each parameter i (its position in the
-- params list) that has state, "state.<i>.<field>" (tensors such as
-- exp_avg, numbers such as step). Hyperparameters (betas, momentum, weight
-- decay...) are not included: they come from the constructor.
function Optimizer:state_dict()
  local sd = { lr = self.lr }
  for i, p in ipairs(self.params) do
    local st = self.state[p]
    if st then
      for k, v in pairs(st) do sd[("state.%d.%s"):format(i, k)] = v end
    end
  end
  return sd
end

--- Restores a table from state_dict() (or read back by venom.checkpoint,
-- where numbers arrive as strings). Every entry is checked before anything
-- changes: a parameter's state is all of its fields or none, tensors are f32
-- of the parameter's shape, and any other name is an error. Tensors are
-- copied, so the optimizer never shares memory with `sd`.
function Optimizer:load_state_dict(sd)
  local who = "optimizer load_state_dict"
  if type(sd) ~= "table" then
    fail(("%s: expected a table, got %s"):format(who, type(sd)))
  end
  local lr = tonumber(sd.lr)
  if not lr or lr ~= lr or lr < 0 or lr == math.huge then
    fail(("%s: 'lr' must be a non-negative finite number, got %s"):format(who, tostring(sd.lr)))
  end
  local fields, found = self._state_fields, {}
  for key, v in pairs(sd) do
    if key ~= "lr" then
      local i, field = tostring(key):match("^state%.(%d+)%.([%w_]+)$")
      local p = i and self.params[tonumber(i)]
      local kind = field and fields[field]
      if not (p and kind) then
        fail(("%s: unexpected entry '%s' (this optimizer has %d parameters with state %s)")
          :format(who, tostring(key), #self.params, self._state_desc))
      end
      if kind == "number" then -- step counts
        v = util.check_int(tonumber(v) or v, ("'%s'"):format(key), { min = 0, who = who })
      elseif not venom.is_tensor(v) or v:dtype() ~= "f32" or shape_str(v) ~= shape_str(p) then
        fail(("%s: '%s' must be an f32 tensor of parameter %s's shape %s, got %s"):format(who, key,
          i, shape_str(p), venom.is_tensor(v) and v:dtype() .. " " .. shape_str(v) or type(v)))
      end
      found[p] = found[p] or {}
      found[p][field] = v
    end
  end
  local state = {}
  for i, p in ipairs(self.params) do
    local st = found[p]
    if st then
      for field in pairs(fields) do
        if st[field] == nil then
          fail(("%s: parameter %d has state but no 'state.%d.%s'"):format(who, i, i, field))
        end
        local v = st[field]
        if venom.is_tensor(v) then -- a copy, on the parameter's device
          st[field] = v:device() == p:device() and v:clone() or v:to(p:device())
        end
      end
      state[p] = st
    end
  end
  self.lr, self.state = lr, state
end

-- SGD -----------------------------------------------------------------------------

--- Stochastic gradient descent with momentum, PyTorch's convention:
--   g ← ∇p + wd·p
--   buf ← μ·buf + (1 − dampening)·g      (buf ← g on the first step)
--   g ← g + μ·buf if nesterov else buf    (when μ > 0)
--   p ← p − lr·g
-- Nesterov momentum follows Sutskever et al. 2013.
-- opts: lr (required), momentum = 0, dampening = 0, weight_decay = 0,
-- nesterov = false. State: state[p] = {momentum_buffer = tensor}.
local SGD = setmetatable({}, { __index = Optimizer })
SGD.__index = SGD
SGD._state_fields = { momentum_buffer = "tensor" }
SGD._state_desc = "momentum_buffer"

function optim.SGD(params, opts)
  local who = "optim.SGD"
  local self
  self, opts = new_optimizer(SGD, who, params, opts,
    { "lr", "momentum", "dampening", "weight_decay", "nesterov" })
  if opts.lr == nil then
    fail(who .. ": lr is required (e.g. {lr = 0.1})")
  end
  self.lr = check_number(who, "lr", opts.lr, 0)
  self.momentum = check_number(who, "momentum", opts.momentum or 0, 0)
  self.dampening = check_number(who, "dampening", opts.dampening or 0, 0, 1)
  self.weight_decay = check_number(who, "weight_decay", opts.weight_decay or 0, 0)
  self.nesterov = opts.nesterov and true or false
  if self.nesterov and (self.momentum <= 0 or self.dampening ~= 0) then
    fail(who .. ": nesterov requires momentum > 0 and dampening = 0, got momentum "
      .. self.momentum .. ", dampening " .. self.dampening)
  end
  return self
end

function SGD:step()
  local lr, mu = self.lr, self.momentum
  for i, p in ipairs(self.params) do
    local g = live_param(self, i, p, "step").grad
    if g then
      local buf, first = nil, false
      if mu ~= 0 then
        local st = self.state[p]
        if not st then
          st = { momentum_buffer = venom.zeros(p:shape(), { device = p:device() }) }
          self.state[p] = st
          first = true
        end
        buf = st.momentum_buffer
      end
      venom.sgd_step(p, g, buf, lr, mu, self.dampening, self.weight_decay,
                     self.nesterov, first)
    end
  end
end

-- Adam / AdamW ----------------------------------------------------------------------

--- Adam (Kingma & Ba 2015, "Adam: A Method for Stochastic Optimization") and
-- AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization").
-- At step t ≥ 1, with g = ∇p:
--   Adam:  g ← g + wd·p              AdamW: p ← p·(1 − lr·wd)
--   m ← β1·m + (1 − β1)·g
--   v ← β2·v + (1 − β2)·g²
--   p ← p − lr · (m / (1 − β1^t)) / (√(v / (1 − β2^t)) + eps)
-- State: state[p] = {step = t, exp_avg = m, exp_avg_sq = v}.
local Adam = setmetatable({}, { __index = Optimizer })
Adam.__index = Adam
Adam._state_fields = { step = "number", exp_avg = "tensor", exp_avg_sq = "tensor" }
Adam._state_desc = "step, exp_avg, exp_avg_sq"

local function new_adam(who, params, opts, default_wd, decoupled)
  local self
  self, opts = new_optimizer(Adam, who, params, opts, { "lr", "betas", "eps", "weight_decay" })
  self.lr = check_number(who, "lr", opts.lr or 1e-3, 0)
  local betas = opts.betas or { 0.9, 0.999 }
  if type(betas) ~= "table" then
    fail(who .. ": betas must be a table {beta1, beta2}, got " .. type(betas))
  end
  self.betas = {
    check_number(who, "betas[1]", betas[1], 0, 1, false, true),
    check_number(who, "betas[2]", betas[2], 0, 1, false, true),
  }
  self.eps = check_number(who, "eps", opts.eps or 1e-8, 0)
  self.weight_decay = check_number(who, "weight_decay", opts.weight_decay or default_wd, 0)
  self.decoupled = decoupled
  return self
end

--- opts: lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0 (L2,
-- added to the gradient).
function optim.Adam(params, opts)
  return new_adam("optim.Adam", params, opts, 0, false)
end

--- opts as Adam, but weight_decay = 0.01 and decoupled from the gradient.
function optim.AdamW(params, opts)
  return new_adam("optim.AdamW", params, opts, 0.01, true)
end

-- CUDA parameters at the same step count are updated together by
-- venom.adam_step_multi (one kernel launch for up to 48 of them); the rest
-- one by one.
function Adam:step()
  local lr, b1, b2 = self.lr, self.betas[1], self.betas[2]
  local batch = { {}, {}, {}, {} } -- params, grads, exp_avgs, exp_avg_sqs
  local batch_step
  for i, p in ipairs(self.params) do
    local g = live_param(self, i, p, "step").grad
    if g then
      local st = self.state[p]
      if not st then
        local shape = p:shape()
        local on = { device = p:device() }
        st = { step = 0, exp_avg = venom.zeros(shape, on), exp_avg_sq = venom.zeros(shape, on) }
        self.state[p] = st
      end
      st.step = st.step + 1
      if p:is_cuda() and (batch_step == nil or batch_step == st.step) then
        batch_step = st.step
        local k = #batch[1] + 1
        batch[1][k], batch[2][k], batch[3][k], batch[4][k] = p, g, st.exp_avg, st.exp_avg_sq
      else
        venom.adam_step(p, g, st.exp_avg, st.exp_avg_sq, st.step, lr, b1, b2, self.eps,
                        self.weight_decay, self.decoupled)
      end
    end
  end
  if batch_step then
    venom.adam_step_multi(batch[1], batch[2], batch[3], batch[4], batch_step, lr, b1, b2,
                          self.eps, self.weight_decay, self.decoupled)
  end
end

-- Learning-rate schedules -----------------------------------------------------------

-- A schedule's state is its step count t and base_lr; loading it also sets
-- the optimizer's lr to lr(t), as t steps would have.
local function schedule_state_dict(self)
  return { t = self.t, base_lr = self.base_lr }
end

local function schedule_load_state_dict(self, sd)
  local who = "schedule load_state_dict"
  if type(sd) ~= "table" then
    fail(("%s: expected a table, got %s"):format(who, type(sd)))
  end
  local t = util.check_int(tonumber(sd.t) or sd.t, "'t'", { min = 0, who = who })
  local base = tonumber(sd.base_lr)
  if not base then
    fail(("%s: 'base_lr' must be a number, got %s"):format(who, tostring(sd.base_lr)))
  end
  for k in pairs(sd) do
    if k ~= "t" and k ~= "base_lr" then
      fail(("%s: unexpected entry '%s' (expected t and base_lr)"):format(who, tostring(k)))
    end
  end
  self.t, self.base_lr = t, base
  self.opt.lr = self:get_lr()
end

local function check_optimizer(who, opt)
  if type(opt) ~= "table" or type(opt.lr) ~= "number" then
    fail(who .. ": first argument must be an optimizer (a table with a numeric lr)")
  end
end

--- Step decay: lr(t) = base_lr · gamma^⌊t / step_size⌋, where t counts calls
-- of sched:step() (usually once per epoch).
-- opts: step_size (required, positive integer), gamma = 0.1.
local StepLR = {}
StepLR.__index = StepLR

function optim.StepLR(opt, opts)
  local who = "optim.StepLR"
  check_optimizer(who, opt)
  opts = util.check_options(opts, { "step_size", "gamma" }, who)
  local s = util.check_int(opts.step_size, "step_size", { min = 1, who = who })
  local self = setmetatable({ opt = opt, base_lr = opt.lr, step_size = s, t = 0 }, StepLR)
  self.gamma = check_number(who, "gamma", opts.gamma or 0.1, 0)
  return self
end

function StepLR:get_lr()
  return self.base_lr * self.gamma ^ math.floor(self.t / self.step_size)
end

StepLR.state_dict = schedule_state_dict
StepLR.load_state_dict = schedule_load_state_dict

function StepLR:step()
  self.t = self.t + 1
  self.opt.lr = self:get_lr()
  return self.opt.lr
end

--- Linear warm-up then cosine decay (the cosine half-period of SGDR,
-- Loshchilov & Hutter 2017, without restarts). With W = warmup_steps,
-- T = total_steps and t the number of sched:step() calls so far:
--   lr(t) = base_lr · t / W                                        t < W
--   lr(t) = min_lr + (base_lr − min_lr) · ½ · (1 + cos(π · (t − W) / (T − W)))   W ≤ t ≤ T
--   lr(t) = min_lr                                                  t > T
-- Construction sets opt.lr = lr(0); call sched:step() after each opt:step().
-- opts: warmup_steps (≥ 0), total_steps (> warmup_steps), min_lr = 0.
local CosineWarmup = {}
CosineWarmup.__index = CosineWarmup

function optim.CosineWarmup(opt, opts)
  local who = "optim.CosineWarmup"
  check_optimizer(who, opt)
  opts = util.check_options(opts, { "warmup_steps", "total_steps", "min_lr" }, who)
  local w = util.check_int(opts.warmup_steps, "warmup_steps", { min = 0, who = who })
  local T = util.check_int(opts.total_steps, "total_steps", { min = w + 1, who = who,
    what = ("an integer greater than warmup_steps (%d)"):format(w) })
  local self = setmetatable({ opt = opt, base_lr = opt.lr, warmup_steps = w,
                              total_steps = T, t = 0 }, CosineWarmup)
  self.min_lr = check_number(who, "min_lr", opts.min_lr or 0, 0, opt.lr)
  opt.lr = self:get_lr()
  return self
end

function CosineWarmup:get_lr()
  local t, w, T = self.t, self.warmup_steps, self.total_steps
  if t < w then
    return self.base_lr * t / w
  elseif t > T then
    return self.min_lr
  end
  local c = 0.5 * (1 + math.cos(math.pi * (t - w) / (T - w)))
  return self.min_lr + (self.base_lr - self.min_lr) * c
end

CosineWarmup.state_dict = schedule_state_dict
CosineWarmup.load_state_dict = schedule_load_state_dict

function CosineWarmup:step()
  self.t = self.t + 1
  self.opt.lr = self:get_lr()
  return self.opt.lr
end

return optim
