-- Training aids: nn.init (PyTorch's fan and gain rules, checked against the
-- formulas on large draws), nn.utils.clip_grad_norm_ (double accumulation,
-- non-finite norms), the OneCycleLR and ReduceLROnPlateau schedules
-- (against the formulas of their papers / PyTorch's docs, step by step),
-- and help() reading the docstrings.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local nn, optim = venom.nn, venom.optim

venom.manual_seed(0)

-- ---- nn.init ----------------------------------------------------------------
do
  local init = nn.init
  local fan_in, fan_out = init.calculate_fans(venom.zeros(8, 4, 3, 3))
  tap.ok(fan_in == 36 and fan_out == 72, ("fans of (8, 4, 3, 3): in 36, out 72 (got %d, %d)"):format(fan_in, fan_out))
  tap.near(init.calculate_gain("leaky_relu", 0.2), math.sqrt(2 / 1.04), 1e-12, "leaky_relu gain")
  tap.near(init.calculate_gain("tanh"), 5 / 3, 1e-12, "tanh gain")

  local w = venom.zeros(300, 400):requires_grad_(true)
  init.kaiming_uniform_(w, { nonlinearity = "relu" })
  local bound = math.sqrt(3) * math.sqrt(2) / math.sqrt(400)
  local maxabs = w:abs():max():item()
  tap.ok(maxabs <= bound and maxabs > 0.99 * bound, ("kaiming_uniform_ fills U(-b, b), b = %.5f (max |w| %.5f)"):format(bound, maxabs))
  tap.ok(w.requires_grad == nil or w:requires_grad(), "the parameter still requires grad")
  init.kaiming_normal_(w, { mode = "fan_out" })
  local var = (w * w):mean():item()
  tap.near(var, 2 / 300, 2 / 300 * 0.03, "kaiming_normal_ fan_out: variance 2 / fan_out")
  init.xavier_uniform_(w, 2)
  local a = 2 * math.sqrt(6 / 700)
  tap.near((w * w):mean():item(), a * a / 3, a * a / 3 * 0.03, "xavier_uniform_ with gain 2: variance a^2 / 3")
  init.xavier_normal_(w)
  tap.near((w * w):mean():item(), 2 / 700, 2 / 700 * 0.03, "xavier_normal_: variance 2 / (fan_in + fan_out)")
  init.normal_(w, 3, 0.5)
  tap.near(w:mean():item(), 3, 0.01, "normal_(3, 0.5): mean 3")
  init.uniform_(w, -1, 3)
  tap.ok(w:min():item() >= -1 and w:max():item() < 3, "uniform_(-1, 3) stays in [-1, 3)")
  init.ones_(w)
  tap.is(w:sum():item(), 120000, "ones_")
  init.zeros_(w)
  tap.is(w:abs():sum():item(), 0, "zeros_")
  tap.error_like(function() init.xavier_uniform_(venom.zeros(5)) end, "at least 2 dims", "xavier on a 1-D tensor is refused")
  tap.error_like(function() init.kaiming_uniform_(w, { mode = "fan" }) end, 'mode must be "fan_in" or "fan_out"',
                 "a bad mode is refused")
  tap.error_like(function() init.uniform_(w, 2, 1) end, "a <= b", "uniform_ with a > b is refused")
  tap.error_like(function() init.calculate_gain("swish") end, "unknown nonlinearity swish", "an unknown nonlinearity is refused")
end

-- ---- clip_grad_norm_ ------------------------------------------------------------
do
  local clip = nn.utils.clip_grad_norm_
  local ps = {}
  for i = 1, 100 do
    local p = venom.zeros(1):requires_grad_(true)
    local l = (p * 1e20):sum()
    l:backward()
    ps[i] = p
  end
  local total = clip(ps, 1.0)
  tap.near(total / 1e21, 1, 1e-6, "100 gradients of 1e20: the norm is 1e21 (no f32 overflow)")
  tap.near(ps[1].grad:item(), 0.1, 1e-6, "... and each is scaled to 0.1")
  tap.near(ps[100].grad:item(), 0.1, 1e-6, "... the last one too")

  local p = venom.zeros(2, 2):requires_grad_(true)
  ;(p * venom.tensor({ { 3, 0 }, { 0, 4 } })):sum():backward()
  tap.near(clip({ p }, 10), 5, 1e-6, "a norm below max_norm is returned ...")
  tap.is(p.grad:get(2, 2), 4, "... and the gradient is left alone")
  tap.near(clip(p, 1, { norm_type = math.huge }), 4, 1e-6, "inf-norm; a lone tensor is accepted")
  tap.near(p.grad:get(2, 2), 1 / (4 + 1e-6) * 4, 1e-6, "inf-norm clipping scales by max_norm / total")
  local q = venom.zeros(2):requires_grad_(true)
  ;(q * venom.tensor({ 1 / 0, 1 })):sum():backward()
  tap.error_like(function() clip({ p, q }, 1) end, "params%[2%] has a non%-finite gradient", "a non-finite norm is an error naming the parameter")
  tap.is(q.grad:get(2), 1, "... and nothing was changed")
  tap.ok(clip({ q }, 1, { error_if_nonfinite = false }) == math.huge, "with error_if_nonfinite = false the inf norm is returned")
  tap.error_like(function() clip({ p }, -1) end, "max_norm must be a number >= 0", "a negative max_norm is refused")
end

-- ---- OneCycleLR --------------------------------------------------------------------
do
  local p = venom.zeros(1):requires_grad_(true)
  local opt = optim.SGD({ p }, { lr = 0.1, momentum = 0.9 })
  local s = optim.OneCycleLR(opt, { max_lr = 1.0, total_steps = 11, pct_start = 0.3 })
  -- PyTorch's phases: 1/25 → 1 until step 0.3·11 − 1 = 2.3, then → 1/25/1e4 at step 10.
  local function expect(t)
    local peak, lo, hi, fin = 2.3, 1 / 25, 1, 1 / 25 / 1e4
    if t <= peak then
      return hi + (lo - hi) / 2 * (math.cos(math.pi * t / peak) + 1)
    end
    return fin + (hi - fin) / 2 * (math.cos(math.pi * (t - peak) / (10 - peak)) + 1)
  end
  local worst = math.abs(opt.lr - expect(0))
  for t = 1, 10 do
    s:step()
    worst = math.max(worst, math.abs(opt.lr - expect(t)))
  end
  tap.ok(worst < 1e-12, ("OneCycleLR follows the two cosine phases (worst error %g)"):format(worst))
  tap.near(opt.lr, 1 / 25 / 1e4, 1e-15, "and ends at max_lr / div_factor / final_div_factor")
  tap.near(opt.momentum, 0.95, 1e-12, "momentum cycles back up to max_momentum")
  s:step() -- the 11th call of 11 total_steps is allowed, as in PyTorch
  tap.error_like(function() s:step() end, "past total_steps", "stepping past total_steps is an error")
  local sd = s:state_dict()
  local s2 = optim.OneCycleLR(opt, { max_lr = 1.0, total_steps = 11, pct_start = 0.3 })
  s2:load_state_dict(sd)
  tap.near(opt.lr, expect(11), 1e-12, "a loaded state puts the lr where it was")
  local plain = optim.SGD({ p }, { lr = 0.1 })
  tap.error_like(function() optim.OneCycleLR(plain, { max_lr = 1, total_steps = 5 }) end, "no momentum",
                 "cycling momentum on an optimizer without it is refused")
  tap.error_like(function() optim.OneCycleLR(opt, { max_lr = 1, total_steps = 0 }) end, "total_steps",
                 "total_steps 0 is refused")
end

-- ---- ReduceLROnPlateau -------------------------------------------------------------
do
  local p = venom.zeros(1):requires_grad_(true)
  local opt = optim.Adam({ p }, { lr = 1 })
  local s = optim.ReduceLROnPlateau(opt, { patience = 2, factor = 0.5, cooldown = 1 })
  local lrs = {}
  for i, m in ipairs({ 10, 9, 9, 9, 9, 9, 9, 9, 8, 8 }) do lrs[i] = s:step(m) end
  -- bad counts: 0 0 1 2 3→cut (cooldown 1) ; next: cooldown resets the count
  tap.is(table.concat(lrs, " "), "1 1 1 1 0.5 0.5 0.5 0.5 0.5 0.5",
         "the lr halves after patience + 1 evaluations without improvement, then cools down")
  local s2 = optim.ReduceLROnPlateau(opt, { mode = "max", factor = 0.5, patience = 0, threshold = 0.5,
                                           threshold_mode = "abs" })
  s2:step(1); s2:step(1.4)
  tap.is(opt.lr, 0.25, "mode max, threshold_mode abs: 1.4 is not better than 1 + 0.5")
  tap.error_like(function() s2:step(0 / 0) end, "not NaN", "a NaN metric is an error")
  tap.error_like(function() optim.ReduceLROnPlateau(opt, { factor = 1 }) end, "factor", "factor 1 is refused")
end

-- ---- help ---------------------------------------------------------------------------
do
  local help = venom.help
  local text = help.text(venom.matmul)
  tap.ok(text and text:find("vn_matmul") and text:find("inner dims"), "help(venom.matmul) gives the venom.h docstring")
  local x = venom.ones(2)
  tap.ok((help.text(x.sum) or ""):find("keepdim"), "help(x.sum) finds the method's doc")
  tap.ok((help.text(nn.Linear) or ""):find("out_features"), "help(nn.Linear) gives the Lua docstring")
  tap.ok((help.text("venom.topk") or ""):find("largest"), "help('venom.topk') by name")
  local tdoc, terr = help.text(require("venom.data").transforms)
  tap.ok(tdoc and tdoc:find("^venom%.data%.transforms\n") and tdoc:find("RandomHorizontalFlip", 1, true),
    "help(data.transforms) gives the table's docstring: " .. tostring(tdoc or terr))
  -- functions of the binding that venom.h does not declare, a comment over
  -- two one-line functions, and a function of a table documented whole
  for name, word in pairs({ after_backward = "next successful", no_grad = "autograd off",
                            tensor = "nested table", set_rng_state = "get_rng_state",
                            to_torch_names = "PyTorch", load_ternary = "load_ternary",
                            ["cuda.is_available"] = "CUDA device" }) do
    local doc, err = help.text("venom." .. name)
    tap.ok(doc and doc:find(word, 1, true), "help(venom." .. name .. ") has a docstring: "
      .. tostring(doc and doc:sub(1, 60) or err))
  end
  -- every function in the venom table has one (a name added without a
  -- docstring fails here, listed)
  local missing = {}
  for k, v in pairs(venom) do
    if type(v) == "function" and not help.text(v) then missing[#missing + 1] = k end
  end
  table.sort(missing)
  tap.ok(#missing == 0, "every venom.* function has a docstring; missing: " .. table.concat(missing, " "))
  tap.ok((help.text("venom.sub_") or ""):find("in place", 1, true),
    "one comment documents a run of assignments (venom.sub_ under venom.add_'s block)")
  local none, msg = help.text("venom.mtmul")
  tap.ok(none == nil and msg:find("did you mean venom.matmul"), "an unknown name gets a suggestion: " .. tostring(msg))
end

-- ---- errors point at the user's line ------------------------------------------------
do
  local layer = nn.Linear(3, 4)
  local ok, err = pcall(function() return layer(venom.ones(2, 3):long()) end)
  tap.ok(not ok and tostring(err):find("test_train_aids%.lua:%d+: linear: input: expected dtype f32") ~= nil,
         "an engine error inside nn.Linear:forward points at the caller's line, not nn.lua: " .. tostring(err))
  ok, err = pcall(function() local r = venom.ones(2):narrow("a"); return r end)
  tap.ok(not ok and tostring(err):find("test_train_aids%.lua:%d+: bad argument #1 to 'narrow'") ~= nil,
         "a bad argument names the method and the user's line: " .. tostring(err))
end

tap.done()
