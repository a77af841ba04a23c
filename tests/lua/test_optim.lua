-- venom.optim: SGD, Adam and AdamW against plain-Lua references over several
-- steps; argument checks; learning-rate schedules against their formulas.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local optim = require "venom.optim"

-- The loss L(p) = Σ c·p + ½ Σ p² has gradient c + p, which changes with every
-- step, so the references below must track p exactly as the optimizer does.
local P0 = { 0.5, -1.25, 2.0, 0.0, -0.3, 1.1 }
local C = { 0.1, 0.7, -0.4, 1.5, -2.0, 0.05 }

local function make_param()
  local p = venom.tensor(P0)
  p:requires_grad_(true)
  return p
end

local c_tensor = venom.tensor(C)
local function backward(p)
  local loss = (c_tensor * p):sum() + (p * p):sum() * 0.5
  loss:backward()
end

local function max_diff(a, b)
  local m = 0
  for i = 1, #b do m = math.max(m, math.abs(a[i] - b[i])) end
  return m
end

local function copy(t)
  local out = {}
  for i, v in ipairs(t) do out[i] = v end
  return out
end

-- PyTorch's SGD, written out.
local function ref_sgd(steps, h)
  local p, buf = copy(P0), nil
  for _ = 1, steps do
    local bnew = {}
    for i = 1, #p do
      local g = C[i] + p[i] + h.wd * p[i]
      if h.mu ~= 0 then
        bnew[i] = buf and h.mu * buf[i] + (1 - h.damp) * g or g
        g = h.nesterov and g + h.mu * bnew[i] or bnew[i]
      end
      p[i] = p[i] - h.lr * g
    end
    buf = bnew
  end
  return p
end

-- Adam / AdamW as in Kingma & Ba 2015 and Loshchilov & Hutter 2019.
local function ref_adam(steps, h)
  local p, m, v = copy(P0), {}, {}
  for i = 1, #p do m[i], v[i] = 0, 0 end
  for t = 1, steps do
    for i = 1, #p do
      local g = C[i] + p[i]
      if h.decoupled then
        p[i] = p[i] * (1 - h.lr * h.wd)
      else
        g = g + h.wd * p[i]
      end
      m[i] = h.b1 * m[i] + (1 - h.b1) * g
      v[i] = h.b2 * v[i] + (1 - h.b2) * g * g
      local mhat = m[i] / (1 - h.b1 ^ t)
      local vhat = v[i] / (1 - h.b2 ^ t)
      p[i] = p[i] - h.lr * mhat / (math.sqrt(vhat) + h.eps)
    end
  end
  return p
end

local function run(make_opt, steps)
  local p = make_param()
  local opt = make_opt({ p })
  for _ = 1, steps do
    opt:zero_grad()
    backward(p)
    opt:step()
  end
  return p:totable(), opt, p
end

local sgd_cases = {
  { "plain", { lr = 0.1 }, { lr = 0.1, mu = 0, damp = 0, wd = 0 } },
  { "momentum", { lr = 0.05, momentum = 0.9 }, { lr = 0.05, mu = 0.9, damp = 0, wd = 0 } },
  { "momentum+dampening+wd", { lr = 0.05, momentum = 0.8, dampening = 0.3, weight_decay = 0.1 },
    { lr = 0.05, mu = 0.8, damp = 0.3, wd = 0.1 } },
  { "nesterov", { lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 0.01 },
    { lr = 0.05, mu = 0.9, damp = 0, wd = 0.01, nesterov = true } },
}
for _, case in ipairs(sgd_cases) do
  local name, opts, h = case[1], case[2], case[3]
  for _, steps in ipairs({ 1, 5 }) do
    local got = run(function(ps) return optim.SGD(ps, opts) end, steps)
    tap.ok(max_diff(got, ref_sgd(steps, h)) < 1e-5,
      ("SGD %s: %d step(s) match the reference"):format(name, steps))
  end
end

local adam_cases = {
  { "Adam", optim.Adam, { lr = 0.01 }, { lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0 } },
  { "Adam+L2", optim.Adam, { lr = 0.02, betas = { 0.8, 0.99 }, weight_decay = 0.1, eps = 1e-6 },
    { lr = 0.02, b1 = 0.8, b2 = 0.99, eps = 1e-6, wd = 0.1 } },
  { "AdamW", optim.AdamW, { lr = 0.01 },
    { lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01, decoupled = true } },
  { "AdamW wd=0.5", optim.AdamW, { lr = 0.03, weight_decay = 0.5 },
    { lr = 0.03, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.5, decoupled = true } },
}
for _, case in ipairs(adam_cases) do
  local name, ctor, opts, h = case[1], case[2], case[3], case[4]
  for _, steps in ipairs({ 1, 7 }) do
    local got, opt, p = run(function(ps) return ctor(ps, opts) end, steps)
    tap.ok(max_diff(got, ref_adam(steps, h)) < 1e-5,
      ("%s: %d step(s) match the reference"):format(name, steps))
    if steps == 7 then
      tap.is(opt.state[p].step, 7, name .. ": state counts steps")
    end
  end
end

-- Defaults, skipping, zero_grad, a settable lr -------------------------------------------
do
  local a = optim.Adam({ make_param() })
  tap.is(a.lr, 1e-3, "Adam default lr")
  tap.is(a.weight_decay, 0, "Adam default weight_decay")
  tap.is(optim.AdamW({ make_param() }).weight_decay, 0.01, "AdamW default weight_decay")

  local used, unused = make_param(), make_param()
  local before = unused:totable()
  local opt = optim.Adam({ used, unused }, { lr = 0.1 })
  backward(used)
  opt:step()
  tap.ok(max_diff(unused:totable(), before) == 0, "a parameter without a gradient is skipped")
  tap.ok(opt.state[unused] == nil, "no state is created for a skipped parameter")
  tap.ok(max_diff(used:totable(), P0) > 0.05, "a parameter with a gradient moves")
  opt:zero_grad()
  tap.ok(used.grad == nil, "opt:zero_grad drops gradients")

  local p = make_param()
  local p_before = p:totable()
  local sgd = optim.SGD({ p }, { lr = 0.1 })
  sgd.lr = 0
  backward(p)
  sgd:step()
  tap.ok(max_diff(p:totable(), p_before) == 0, "opt.lr is settable (lr = 0 leaves p unchanged)")
end

-- Bad hyperparameters -----------------------------------------------------------------
local p = make_param()
tap.error_like(function() optim.SGD({ p }, {}) end, "optim%.SGD: lr is required", "SGD without lr")
tap.error_like(function() optim.SGD({ p }, { lr = -1 }) end,
  "optim%.SGD: lr must be a number in %[0, inf%], got %-1", "SGD: negative lr")
tap.error_like(function() optim.SGD({ p }, { lr = 0.1, nesterov = true }) end,
  "nesterov requires momentum > 0 and dampening = 0", "SGD: nesterov without momentum")
tap.error_like(function() optim.Adam({ p }, { betas = { 1.0, 0.999 } }) end,
  "optim%.Adam: betas%[1%] must be a number in %[0, 1%), got 1", "Adam: beta1 = 1")
tap.error_like(function() optim.AdamW({ p }, { eps = "small" }) end,
  "optim%.AdamW: eps must be a number", "AdamW: eps not a number")
tap.error_like(function() optim.Adam(p) end, "params must be a list of tensors", "params not a list")
tap.error_like(function() optim.Adam({}) end, "params is an empty list", "empty params")
tap.error_like(function() optim.Adam({ p, 3 }) end, "params%[2%] is a number, expected a tensor",
  "a number among params")
tap.error_like(function() optim.Adam({ p, p }) end, "params%[2%] appears twice", "duplicate param")
tap.error_like(function() optim.Adam({ venom.zeros(3) }) end, "does not require a gradient",
  "param without requires_grad")

-- Schedules ------------------------------------------------------------------------------
do
  local opt = optim.SGD({ make_param() }, { lr = 0.1 })
  local sched = optim.StepLR(opt, { step_size = 3, gamma = 0.5 })
  local want = { [1] = 0.1, [2] = 0.1, [3] = 0.05, [5] = 0.05, [6] = 0.025, [7] = 0.025, [9] = 0.0125 }
  local all = true
  for t = 1, 9 do
    sched:step()
    if want[t] and math.abs(opt.lr - want[t]) > 1e-15 then all = false end
    if opt.lr ~= sched:get_lr() then all = false end
  end
  tap.ok(all, "StepLR: lr = 0.1·0.5^⌊t/3⌋ at t = 1, 2, 3, 5, 6, 7, 9")
  tap.error_like(function() optim.StepLR(opt, { step_size = 0 }) end,
    "step_size must be a positive integer, got 0", "StepLR: bad step_size")
end

do
  local base, min_lr, W, T = 1e-3, 1e-5, 10, 110
  local opt = optim.AdamW({ make_param() }, { lr = base })
  local sched = optim.CosineWarmup(opt, { warmup_steps = W, total_steps = T, min_lr = min_lr })
  tap.is(opt.lr, 0, "CosineWarmup: lr starts at 0")
  local at = { [0] = 0 }
  for t = 1, 120 do
    sched:step()
    at[t] = opt.lr
  end
  tap.near(at[5], base * 5 / W, 1e-15, "CosineWarmup: halfway through warm-up is base/2")
  tap.near(at[W], base, 1e-15, "CosineWarmup: base lr at the end of warm-up")
  tap.near(at[60], min_lr + (base - min_lr) / 2, 1e-15, "CosineWarmup: midpoint of the cosine")
  local c = 0.5 * (1 + math.cos(math.pi * (35 - W) / (T - W)))
  tap.near(at[35], min_lr + (base - min_lr) * c, 1e-15, "CosineWarmup: t = 35 follows the formula")
  tap.near(at[T], min_lr, 1e-15, "CosineWarmup: min_lr at total_steps")
  tap.is(at[120], min_lr, "CosineWarmup: min_lr after total_steps")
  local mono = true
  for t = W + 1, T do
    if at[t] > at[t - 1] then mono = false end
  end
  tap.ok(mono, "CosineWarmup: non-increasing after warm-up")
  tap.is(sched:get_lr(), opt.lr, "get_lr returns the current lr")
  tap.error_like(function() optim.CosineWarmup(opt, { warmup_steps = 10, total_steps = 10 }) end,
    "total_steps must be an integer greater than warmup_steps %(10%), got 10",
    "CosineWarmup: total_steps ≤ warmup_steps")
end

-- optim.rewind_options: the restart after the last pruning event, never
-- inside the warm-up, none when the event is the last step or rewind is 0.
do
  local o, S = optim.rewind_options{ total_steps = 100, warmup_steps = 5, last_event = 60,
                                     rewind = 0.5, lr = 2e-3 }
  tap.ok(S == 60 and o.restart_step == 60 and o.restart_lr == 1e-3 and o.total_steps == 100
         and o.warmup_steps == 5, "rewind_options: a restart at 0.5·lr after the last event")
  o, S = optim.rewind_options{ total_steps = 100, warmup_steps = 5, last_event = 2, rewind = 1, lr = 1 }
  tap.is(S, 5, "rewind_options: an event inside the warm-up restarts at its end")
  local why
  o, S, why = optim.rewind_options{ total_steps = 100, warmup_steps = 5, last_event = 100, rewind = 1, lr = 1 }
  tap.ok(S == nil and o.restart_step == nil, "rewind_options: nothing to restart after the last step")
  tap.is(why, "restarts the cosine after the last pruning event and the warm-up (step 100), "
    .. "which leaves nothing to restart in 100 steps", "rewind_options: says why there is no restart")
  o, S, why = optim.rewind_options{ total_steps = 100, warmup_steps = 100 - 1, last_event = 3, rewind = 1, lr = 1 }
  tap.ok(S == 99 and why == nil, "rewind_options: a restart at the warm-up's end, one step before the last")
  o, S, why = optim.rewind_options{ total_steps = 100, warmup_steps = 5, last_event = 60, rewind = 0, lr = 1 }
  tap.ok(S == nil and o.restart_lr == nil and why == nil, "rewind_options: rewind 0 is no restart, and no reason")
  tap.error_like(function() optim.rewind_options{ total_steps = 100, restart = 3 } end, "restart",
    "rewind_options: an unknown option is refused")
  -- Values out of range are named (a NaN or negative rewind was taken as no
  -- restart; a missing one was a Lua error about comparing nil).
  local function with(k, v)
    local t = { total_steps = 100, warmup_steps = 5, last_event = 60, rewind = 0.5, lr = 1 }
    t[k] = v
    return function() optim.rewind_options(t) end
  end
  tap.error_like(with("rewind", 0 / 0), "rewind must be a number in %[0, 1%], got %-?nan",
    "rewind_options: rewind NaN")
  tap.error_like(with("rewind", -1), "rewind must be a number in %[0, 1%], got %-1", "rewind_options: rewind < 0")
  tap.error_like(with("rewind", nil), "rewind must be a number in %[0, 1%], got nil",
    "rewind_options: rewind missing")
  tap.error_like(with("lr", -1), "lr must be a number in %(0, inf%), got %-1", "rewind_options: lr < 0")
  tap.error_like(with("last_event", 2.5), "last_event must be a non%-negative integer, got 2.5",
    "rewind_options: last_event not an integer")
  tap.error_like(with("total_steps", 5), "total_steps must be an integer greater than warmup_steps %(5%)",
    "rewind_options: total_steps within the warm-up")
end

-- A warm restart (learning-rate rewinding): the first cosine until S, then a
-- new one from restart_lr that also ends at min_lr at T.
do
  local base, min_lr, W, T, S, L = 1e-3, 1e-5, 10, 110, 70, 6e-4
  local opt = optim.AdamW({ make_param() }, { lr = base })
  local sched = optim.CosineWarmup(opt, { warmup_steps = W, total_steps = T, min_lr = min_lr,
                                          restart_step = S, restart_lr = L })
  local plain = optim.CosineWarmup(optim.AdamW({ make_param() }, { lr = base }),
    { warmup_steps = W, total_steps = T, min_lr = min_lr })
  local at, same = {}, true
  for t = 1, 120 do
    sched:step()
    plain:step()
    at[t] = opt.lr
    if t < S and opt.lr ~= plain.opt.lr then same = false end
  end
  tap.ok(same, "CosineWarmup restart: the plain schedule before restart_step")
  tap.ok(at[S - 1] < L * 0.9, "CosineWarmup restart: the lr jumps up at restart_step")
  tap.near(at[S], L, 1e-15, "CosineWarmup restart: restart_lr at restart_step")
  local c = 0.5 * (1 + math.cos(math.pi * (95 - S) / (T - S)))
  tap.near(at[95], min_lr + (L - min_lr) * c, 1e-15, "CosineWarmup restart: t = 95 follows the formula")
  tap.near(at[T], min_lr, 1e-15, "CosineWarmup restart: min_lr at total_steps")
  tap.is(at[120], min_lr, "CosineWarmup restart: min_lr after total_steps")
  -- a resumed schedule (state_dict: t) gives the same lr
  local opt2 = optim.AdamW({ make_param() }, { lr = base })
  local again = optim.CosineWarmup(opt2, { warmup_steps = W, total_steps = T, min_lr = min_lr,
                                           restart_step = S, restart_lr = L })
  again:load_state_dict({ t = 80, base_lr = base })
  tap.is(opt2.lr, at[80], "CosineWarmup restart: loading t = 80 sets lr(80)")
  tap.error_like(function() optim.CosineWarmup(opt, { warmup_steps = W, total_steps = T,
      restart_step = S }) end, "give restart_step and restart_lr together",
    "CosineWarmup: restart_step without restart_lr")
  tap.error_like(function() optim.CosineWarmup(opt, { warmup_steps = W, total_steps = T,
      restart_step = T, restart_lr = L }) end,
    "restart_step must be an integer in %[warmup_steps, total_steps%) = %[10, 110%), got 110",
    "CosineWarmup: restart_step at total_steps")
  tap.error_like(function() optim.CosineWarmup(opt, { warmup_steps = W, total_steps = T,
      restart_step = S, restart_lr = -1 }) end, "restart_lr must be a number in",
    "CosineWarmup: negative restart_lr")
end

-- add_parameter / remove_parameter (an expert migrating between ranks):
-- the state travels with the parameter, and a step updates the added one
-- exactly as it would have in the optimizer it came from.
do
  local a = venom.tensor({ 1, 2 }):requires_grad_(true)
  local b = venom.tensor({ 3, 4 }):requires_grad_(true)
  local c = venom.tensor({ 3, 4 }):requires_grad_(true)
  local one = optim.AdamW({ a, b }, { lr = 0.1 })
  local other = optim.AdamW({ a }, { lr = 0.1 })
  for _ = 1, 2 do
    one:zero_grad(); (a * a + b * b):sum():backward(); one:step()
  end
  local st = one:remove_parameter(b)
  tap.ok(#one.params == 1 and one.state[b] == nil and st.step == 2,
    "remove_parameter drops the parameter and returns its state (step 2)")
  venom.no_grad(function() c:copy_(b) end)
  other:add_parameter(c, st)
  local ref = optim.AdamW({ b }, { lr = 0.1 })
  ref.state[b] = { step = st.step, exp_avg = st.exp_avg:clone(), exp_avg_sq = st.exp_avg_sq:clone() }
  other:zero_grad(); (c * c):sum():backward(); other:step()
  ref:zero_grad(); (b * b):sum():backward(); ref:step()
  tap.ok((c - b):abs():max():item() == 0, "the added parameter steps with the state it brought")
  tap.error_like(function() other:add_parameter(c) end, "already one of this optimizer's parameters",
    "add_parameter of a parameter it has")
  tap.error_like(function() other:add_parameter(venom.zeros(2)) end,
    "must be a leaf tensor that requires a gradient", "add_parameter of a tensor without grad")
  tap.error_like(function() one:remove_parameter(b) end, "not one of this optimizer's parameters",
    "remove_parameter of a stranger")
end

tap.done()
