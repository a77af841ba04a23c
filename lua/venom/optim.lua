--- venom.optim — optimizers (SGD, Adam, AdamW) and learning-rate schedules
-- (StepLR, CosineWarmup, OneCycleLR, ReduceLROnPlateau).
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
    fail(("%s: %s must be a number in %s, got %s"):format(who, name, range, util.shown(v)))
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

--- Appends parameter `p` (a leaf tensor that requires a gradient) with
-- `state` (this optimizer's state fields for p's shape; nil starts fresh),
-- e.g. an expert that migrated to this rank (venom.nn_moe_placement).
function Optimizer:add_parameter(p, state)
  local who = self.who .. ":add_parameter"
  if not venom.is_tensor(p) or not p:is_leaf() or not p:requires_grad() then
    fail(who .. ": the parameter must be a leaf tensor that requires a gradient")
  end
  for _, q in ipairs(self.params) do
    if rawequal(q, p) then fail(who .. ": the tensor is already one of this optimizer's parameters") end
  end
  self.params[#self.params + 1] = p
  self.state[p] = state
end

--- Removes parameter `p` from the list and returns its state (nil if it
-- has none yet): an expert that migrated away from this rank.
function Optimizer:remove_parameter(p)
  for i, q in ipairs(self.params) do
    if rawequal(q, p) then
      local st = self.state[p]
      table.remove(self.params, i)
      self.state[p] = nil
      return st
    end
  end
  fail(self.who .. ":remove_parameter: the tensor is not one of this optimizer's parameters")
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

-- Parameters on one device at the same step count are updated together by
-- venom.adam_step_multi (on CUDA one kernel launch for up to 48 of them, on
-- the CPU one parallel loop over all their elements); the rest one by one.
function Adam:step()
  local lr, b1, b2 = self.lr, self.betas[1], self.betas[2]
  local batch = { {}, {}, {}, {} } -- params, grads, exp_avgs, exp_avg_sqs
  local batch_step, batch_cuda
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
      if batch_step == nil or (batch_step == st.step and batch_cuda == p:is_cuda()) then
        batch_step, batch_cuda = st.step, p:is_cuda()
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

-- The schedules whose lr is a function of the step count t (StepLR,
-- CosineWarmup, OneCycleLR): each class defines get_lr() and inherits
-- step(), state_dict() and load_state_dict().
local Schedule = {}
Schedule.__index = Schedule
Schedule.state_dict = schedule_state_dict
Schedule.load_state_dict = schedule_load_state_dict

--- sched:step() → the new lr: counts one step and sets opt.lr = lr(t).
function Schedule:step()
  self.t = self.t + 1
  self.opt.lr = self:get_lr()
  return self.opt.lr
end

local function schedule_class()
  local cls = setmetatable({}, Schedule)
  cls.__index = cls
  return cls
end

--- Step decay: lr(t) = base_lr · gamma^⌊t / step_size⌋, where t counts calls
-- of sched:step() (usually once per epoch).
-- opts: step_size (required, positive integer), gamma = 0.1.
local StepLR = schedule_class()

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


--- Linear warm-up then cosine decay (the cosine half-period of SGDR,
-- Loshchilov & Hutter 2017, without restarts). With W = warmup_steps,
-- T = total_steps and t the number of sched:step() calls so far:
--   lr(t) = base_lr · t / W                                        t < W
--   lr(t) = min_lr + (base_lr − min_lr) · ½ · (1 + cos(π · (t − W) / (T − W)))   W ≤ t ≤ T
--   lr(t) = min_lr                                                  t > T
-- Construction sets opt.lr = lr(0); call sched:step() after each opt:step().
-- opts: warmup_steps (≥ 0), total_steps (> warmup_steps), min_lr = 0, and
-- one optional warm restart (SGDR's restart; after pruning it is the
-- learning-rate rewinding of Renda et al. 2020, "Comparing rewinding and
-- fine-tuning in neural network pruning"): restart_step S (W ≤ S < T) and
-- restart_lr L (≥ min_lr), from which on a new half cosine runs to T,
--   lr(t) = min_lr + (L − min_lr) · ½ · (1 + cos(π · (t − S) / (T − S)))   S ≤ t ≤ T.
local CosineWarmup = schedule_class()

function optim.CosineWarmup(opt, opts)
  local who = "optim.CosineWarmup"
  check_optimizer(who, opt)
  opts = util.check_options(opts, { "warmup_steps", "total_steps", "min_lr", "restart_step",
                                    "restart_lr" }, who)
  local w = util.check_int(opts.warmup_steps, "warmup_steps", { min = 0, who = who })
  local T = util.check_int(opts.total_steps, "total_steps", { min = w + 1, who = who,
    what = ("an integer greater than warmup_steps (%d)"):format(w) })
  local self = setmetatable({ opt = opt, base_lr = opt.lr, warmup_steps = w,
                              total_steps = T, t = 0 }, CosineWarmup)
  self.min_lr = check_number(who, "min_lr", opts.min_lr or 0, 0, opt.lr)
  if (opts.restart_step == nil) ~= (opts.restart_lr == nil) then
    fail(who .. ": give restart_step and restart_lr together (a warm restart), or neither")
  end
  if opts.restart_step ~= nil then
    self.restart_step = util.check_int(opts.restart_step, "restart_step", { min = w, max = T - 1,
      who = who, what = ("an integer in [warmup_steps, total_steps) = [%d, %d)"):format(w, T) })
    self.restart_lr = check_number(who, "restart_lr", opts.restart_lr, self.min_lr)
    -- restart_lr = math.huge would give inf − inf = NaN in get_lr
    if self.restart_lr == math.huge then
      fail(who .. ": restart_lr must be finite, got inf")
    end
  end
  opt.lr = self:get_lr()
  return self
end

--- The CosineWarmup options of a pruning run with learning-rate rewinding
-- (Renda et al. 2020): over `total_steps` with `warmup_steps` of warm-up, and,
-- when `rewind` > 0, a warm restart at `rewind`·`lr` after step `last_event`
-- (the last pruning event; moved to the end of the warm-up if it falls
-- inside it). A last event at or after the last step leaves nothing to
-- restart. Returns the options for optim.CosineWarmup, the restart step
-- (nil without a restart) and, when rewind > 0 found nothing to restart, a
-- sentence saying why ("restarts the cosine after the last pruning event
-- and the warm-up (step S), which leaves nothing to restart in T steps"),
-- which the tutorials that prune (2, 3, 8) print after their option's name
-- when the user gave it.
-- Errors name an option that is missing or out of range: warmup_steps an
-- integer ≥ 0, total_steps one above it, last_event an integer ≥ 0, rewind
-- a fraction in [0, 1], lr a positive number.
function optim.rewind_options(o)
  local who = "optim.rewind_options"
  o = util.check_options(o, { "total_steps", "warmup_steps", "last_event", "rewind", "lr" }, who)
  local w = util.check_int(o.warmup_steps, "warmup_steps", { min = 0, who = who })
  local T = util.check_int(o.total_steps, "total_steps", { min = w + 1, who = who,
    what = ("an integer greater than warmup_steps (%d)"):format(w) })
  local last = util.check_int(o.last_event, "last_event", { min = 0, who = who })
  -- a NaN or negative rewind would quietly mean no restart
  local rewind = check_number(who, "rewind", o.rewind, 0, 1)
  local lr = check_number(who, "lr", o.lr, 0, math.huge, true, true)
  local sched_opts = { warmup_steps = w, total_steps = T }
  local restart = math.max(last, w) -- not inside the warm-up
  if rewind > 0 and restart < T then
    sched_opts.restart_step, sched_opts.restart_lr = restart, rewind * lr
    return sched_opts, restart
  end
  if rewind > 0 then
    return sched_opts, nil, ("restarts the cosine after the last pruning event and the warm-up (step %d), "
      .. "which leaves nothing to restart in %d steps"):format(restart, T)
  end
  return sched_opts, nil
end

function CosineWarmup:get_lr()
  local t, w, T = self.t, self.warmup_steps, self.total_steps
  if t < w then
    return self.base_lr * t / w
  elseif t > T then
    return self.min_lr
  end
  local S = self.restart_step
  if S and t >= S then -- the restart's own half cosine
    local c = 0.5 * (1 + math.cos(math.pi * (t - S) / (T - S)))
    return self.min_lr + (self.restart_lr - self.min_lr) * c
  end
  local c = 0.5 * (1 + math.cos(math.pi * (t - w) / (T - w)))
  return self.min_lr + (self.base_lr - self.min_lr) * c
end


--- The 1cycle policy (Smith & Topin 2018, "Super-Convergence"), as
-- PyTorch's OneCycleLR: the lr rises from max_lr/div_factor to max_lr over
-- the first pct_start of total_steps, then falls to
-- max_lr/(div_factor·final_div_factor) by step total_steps − 1, each phase
-- along a half cosine (anneal_strategy "cos") or a line ("linear"). With
-- cycle_momentum (default true) the momentum moves the other way, from
-- max_momentum down to base_momentum and back (SGD's momentum, Adam's
-- beta1); an optimizer without momentum (SGD with momentum 0) is an error
-- unless cycle_momentum = false. Call sched:step() after each opt:step(),
-- total_steps times at most (more is an error).
-- opts: max_lr (required), total_steps (required), pct_start = 0.3,
-- anneal_strategy = "cos", div_factor = 25, final_div_factor = 1e4,
-- cycle_momentum = true, base_momentum = 0.85, max_momentum = 0.95.
local OneCycleLR = schedule_class()

function optim.OneCycleLR(opt, opts)
  local who = "optim.OneCycleLR"
  check_optimizer(who, opt)
  opts = util.check_options(opts, { "max_lr", "total_steps", "pct_start", "anneal_strategy", "div_factor",
                                    "final_div_factor", "cycle_momentum", "base_momentum", "max_momentum" }, who)
  local max_lr = check_number(who, "max_lr", opts.max_lr, 0, nil, true)
  local T = util.check_int(opts.total_steps, "total_steps", { min = 1, who = who })
  local pct = check_number(who, "pct_start", opts.pct_start or 0.3, 0, 1, true, true)
  local anneal = opts.anneal_strategy or "cos"
  if anneal ~= "cos" and anneal ~= "linear" then
    fail(("%s: anneal_strategy must be \"cos\" or \"linear\", got %s"):format(who, tostring(anneal)))
  end
  local div = check_number(who, "div_factor", opts.div_factor or 25, 0, nil, true)
  local final_div = check_number(who, "final_div_factor", opts.final_div_factor or 1e4, 0, nil, true)
  local self = setmetatable({ opt = opt, total_steps = T, anneal = anneal, t = 0,
                              initial_lr = max_lr / div, max_lr = max_lr,
                              min_lr = max_lr / div / final_div }, OneCycleLR)
  self.base_lr = self.initial_lr
  -- Phase ends as PyTorch places them: step pct·T − 1, then T − 1.
  self.peak_step = pct * T - 1
  if opts.cycle_momentum ~= false then
    self.base_momentum = check_number(who, "base_momentum", opts.base_momentum or 0.85, 0, 1)
    self.max_momentum = check_number(who, "max_momentum", opts.max_momentum or 0.95, self.base_momentum, 1)
    if not (opt.betas or (opt.momentum and opt.momentum > 0)) then
      fail(who .. ": the optimizer has no momentum to cycle (SGD needs momentum > 0); "
        .. "pass {cycle_momentum = false}")
    end
  end
  self:apply()
  return self
end

local function anneal(kind, from, to, pct)
  if kind == "linear" then return from + (to - from) * pct end
  return to + (from - to) / 2 * (math.cos(math.pi * pct) + 1)
end

-- lr and momentum at step t.
function OneCycleLR:get_lr()
  local t, peak, last = self.t, self.peak_step, self.total_steps - 1
  local lr, mom
  if t <= peak then
    local pct = peak > 0 and t / peak or 1
    lr = anneal(self.anneal, self.initial_lr, self.max_lr, pct)
    mom = self.base_momentum and anneal(self.anneal, self.max_momentum, self.base_momentum, pct)
  else
    local pct = last > peak and (t - peak) / (last - peak) or 1
    lr = anneal(self.anneal, self.max_lr, self.min_lr, pct)
    mom = self.base_momentum and anneal(self.anneal, self.base_momentum, self.max_momentum, pct)
  end
  return lr, mom
end

function OneCycleLR:apply()
  local lr, mom = self:get_lr()
  self.opt.lr = lr
  if mom then
    if self.opt.betas then self.opt.betas[1] = mom else self.opt.momentum = mom end
  end
  return lr
end

function OneCycleLR:step()
  -- As PyTorch: total_steps calls of step() are allowed (one per batch of a
  -- run of total_steps batches; the last one goes past the final phase).
  if self.t + 1 > self.total_steps then
    fail(("optim.OneCycleLR: step %d is past total_steps = %d (one step() per batch)")
      :format(self.t + 1, self.total_steps))
  end
  self.t = self.t + 1
  return self:apply()
end

function OneCycleLR:load_state_dict(sd)
  schedule_load_state_dict(self, sd)
  self:apply()
end

--- Lower the lr when a metric stops improving (PyTorch's
-- ReduceLROnPlateau): call sched:step(metric) once per evaluation; after
-- more than `patience` evaluations without an improvement, lr ← max(lr ·
-- factor, min_lr) and `cooldown` evaluations pass before counting again.
-- An improvement is a metric below best·(1 − threshold) (mode "min",
-- threshold_mode "rel"), above best·(1 + threshold) ("max"), or beyond best
-- ∓ threshold (threshold_mode "abs"). A NaN metric is an error.
-- opts: mode = "min", factor = 0.1, patience = 10, threshold = 1e-4,
-- threshold_mode = "rel", cooldown = 0, min_lr = 0, eps = 1e-8 (a change
-- smaller than eps is not made).
local ReduceLROnPlateau = {}
ReduceLROnPlateau.__index = ReduceLROnPlateau

function optim.ReduceLROnPlateau(opt, opts)
  local who = "optim.ReduceLROnPlateau"
  check_optimizer(who, opt)
  opts = util.check_options(opts, { "mode", "factor", "patience", "threshold", "threshold_mode",
                                    "cooldown", "min_lr", "eps" }, who)
  local mode, tmode = opts.mode or "min", opts.threshold_mode or "rel"
  if mode ~= "min" and mode ~= "max" then fail(("%s: mode must be \"min\" or \"max\", got %s"):format(who, tostring(mode))) end
  if tmode ~= "rel" and tmode ~= "abs" then
    fail(("%s: threshold_mode must be \"rel\" or \"abs\", got %s"):format(who, tostring(tmode)))
  end
  return setmetatable({
    opt = opt, mode = mode, threshold_mode = tmode,
    factor = check_number(who, "factor", opts.factor or 0.1, 0, 1, false, true),
    patience = util.check_int(opts.patience or 10, "patience", { min = 0, who = who }),
    threshold = check_number(who, "threshold", opts.threshold or 1e-4, 0),
    cooldown = util.check_int(opts.cooldown or 0, "cooldown", { min = 0, who = who }),
    min_lr = check_number(who, "min_lr", opts.min_lr or 0, 0),
    eps = check_number(who, "eps", opts.eps or 1e-8, 0),
    best = nil, bad_epochs = 0, cooldown_left = 0,
  }, ReduceLROnPlateau)
end

function ReduceLROnPlateau:is_better(m)
  if self.best == nil then return true end
  local b, th = self.best, self.threshold
  if self.mode == "min" then
    return self.threshold_mode == "rel" and m < b * (1 - th) or self.threshold_mode == "abs" and m < b - th
  end
  return self.threshold_mode == "rel" and m > b * (1 + th) or self.threshold_mode == "abs" and m > b + th
end

--- sched:step(metric) → the lr now.
function ReduceLROnPlateau:step(metric)
  if type(metric) ~= "number" or metric ~= metric then
    fail("optim.ReduceLROnPlateau: step expects the metric (a number, not NaN), got " .. tostring(metric))
  end
  if self:is_better(metric) then
    self.best, self.bad_epochs = metric, 0
  else
    self.bad_epochs = self.bad_epochs + 1
  end
  if self.cooldown_left > 0 then
    self.cooldown_left = self.cooldown_left - 1
    self.bad_epochs = 0
  end
  if self.bad_epochs > self.patience then
    local old = self.opt.lr
    local new = math.max(old * self.factor, self.min_lr)
    if old - new > self.eps then self.opt.lr = new end
    self.cooldown_left, self.bad_epochs = self.cooldown, 0
  end
  return self.opt.lr
end

function ReduceLROnPlateau:state_dict()
  return { best = self.best, bad_epochs = self.bad_epochs, cooldown_left = self.cooldown_left, lr = self.opt.lr }
end

function ReduceLROnPlateau:load_state_dict(sd)
  local who = "optim.ReduceLROnPlateau: load_state_dict"
  if type(sd) ~= "table" then fail(("%s: expected a table, got %s"):format(who, type(sd))) end
  local bad = util.check_int(sd.bad_epochs, "bad_epochs", { min = 0, who = who })
  local cool = util.check_int(sd.cooldown_left, "cooldown_left", { min = 0, who = who })
  if sd.best ~= nil and type(sd.best) ~= "number" then fail(who .. ": best must be a number or nil") end
  local lr = check_number(who, "lr", sd.lr, 0)
  self.best, self.bad_epochs, self.cooldown_left, self.opt.lr = sd.best, bad, cool, lr
end

return optim
