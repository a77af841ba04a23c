--- venom.nn.init — initialise parameters in place, with PyTorch's rules
-- (torch.nn.init), drawing from the engine RNG (venom.manual_seed makes them
-- repeatable). Each function writes under no_grad, keeps the tensor's
-- shape, dtype (f32) and device, and returns the tensor.
--
--     nn.init.kaiming_uniform_(layer.weight, {nonlinearity = "relu"})
--     nn.init.zeros_(layer.bias)
--
-- Fans of a weight of shape (out, in, k1, k2, ...): fan_in = in·k1·k2·…,
-- fan_out = out·k1·k2·… (a Linear's (out, in) weight and a convolution's
-- (C_out, C_in, kh, kw) alike); tensors with fewer than 2 dims have no fans
-- and xavier/kaiming refuse them.
local venom = require "venom"
local util = require "venom.util"
local fail = util.fail

local init = {}

local function check_tensor(who, t)
  if not venom.is_tensor(t) then fail(("nn.init.%s: expected a tensor, got a %s"):format(who, type(t))) end
  if t:dtype() ~= "f32" then fail(("nn.init.%s: expected an f32 tensor, got %s"):format(who, t:dtype())) end
end

local function check_number(who, name, v)
  if type(v) ~= "number" or v ~= v or v == math.huge or v == -math.huge then
    fail(("nn.init.%s: %s must be a finite number, got %s"):format(who, name, tostring(v)))
  end
  return v
end

-- t ← src, without recording (t may be a parameter that requires grad).
local function assign(t, src)
  venom.no_grad(function() t:copy_(src) end)
  src:free()
  return t
end

--- fan_in, fan_out of a tensor with at least 2 dims (see above).
function init.calculate_fans(t)
  if not venom.is_tensor(t) then fail("nn.init.calculate_fans: expected a tensor, got a " .. type(t)) end
  local shape = t:shape()
  if #shape < 2 then
    fail(("nn.init: fan in and fan out need a tensor of at least 2 dims, got %d"):format(#shape))
  end
  local receptive = 1
  for d = 3, #shape do receptive = receptive * shape[d] end
  return shape[2] * receptive, shape[1] * receptive
end

--- The recommended gain for a nonlinearity (PyTorch's table): linear,
-- conv*, sigmoid → 1; tanh → 5/3; relu → √2; leaky_relu → √(2/(1+a²)) with
-- a = param (default 0.01); selu → 3/4.
function init.calculate_gain(nonlinearity, param)
  local ones = { linear = true, conv1d = true, conv2d = true, conv3d = true, sigmoid = true }
  if ones[nonlinearity] then return 1 end
  if nonlinearity == "tanh" then return 5 / 3 end
  if nonlinearity == "relu" then return math.sqrt(2) end
  if nonlinearity == "selu" then return 3 / 4 end
  if nonlinearity == "leaky_relu" then
    local a = param == nil and 0.01 or check_number("calculate_gain", "param", param)
    return math.sqrt(2 / (1 + a * a))
  end
  fail(("nn.init.calculate_gain: unknown nonlinearity %s (expected linear, conv1d, conv2d, conv3d, "
    .. "sigmoid, tanh, relu, leaky_relu or selu)"):format(tostring(nonlinearity)))
end

local function rand_like(t, normal)
  local f = normal and venom.randn or venom.rand
  return f(t:shape(), { device = t:device() })
end

--- t ~ U(a, b) (defaults 0, 1).
function init.uniform_(t, a, b)
  check_tensor("uniform_", t)
  a = check_number("uniform_", "a", a or 0)
  b = check_number("uniform_", "b", b or 1)
  if b < a then fail(("nn.init.uniform_: expected a <= b, got a = %g, b = %g"):format(a, b)) end
  local u = rand_like(t, false)
  local v = u * (b - a) + a
  u:free()
  return assign(t, v)
end

--- t ~ N(mean, std²) (defaults 0, 1).
function init.normal_(t, mean, std)
  check_tensor("normal_", t)
  mean = check_number("normal_", "mean", mean or 0)
  std = check_number("normal_", "std", std or 1)
  if std < 0 then fail(("nn.init.normal_: std must be >= 0, got %g"):format(std)) end
  local n = rand_like(t, true)
  local v = n * std + mean
  n:free()
  return assign(t, v)
end

--- t ← value everywhere.
function init.constant_(t, value)
  check_tensor("constant_", t)
  check_number("constant_", "value", value)
  venom.no_grad(function() t:fill_(value) end)
  return t
end
function init.zeros_(t) check_tensor("zeros_", t); return init.constant_(t, 0) end
function init.ones_(t) check_tensor("ones_", t); return init.constant_(t, 1) end

--- Xavier/Glorot (Glorot & Bengio 2010): U(−a, a) with
-- a = gain·√(6 / (fan_in + fan_out)).
function init.xavier_uniform_(t, gain)
  check_tensor("xavier_uniform_", t)
  local fan_in, fan_out = init.calculate_fans(t)
  local a = check_number("xavier_uniform_", "gain", gain or 1) * math.sqrt(6 / (fan_in + fan_out))
  return init.uniform_(t, -a, a)
end

--- Xavier/Glorot normal: N(0, σ²) with σ = gain·√(2 / (fan_in + fan_out)).
function init.xavier_normal_(t, gain)
  check_tensor("xavier_normal_", t)
  local fan_in, fan_out = init.calculate_fans(t)
  return init.normal_(t, 0, check_number("xavier_normal_", "gain", gain or 1) * math.sqrt(2 / (fan_in + fan_out)))
end

-- σ of Kaiming init: gain / √fan, fan by mode, gain by nonlinearity and a.
local function kaiming_std(who, t, opts)
  check_tensor(who, t)
  opts = util.check_options(opts, { "a", "mode", "nonlinearity" }, "nn.init." .. who)
  local mode = opts.mode or "fan_in"
  if mode ~= "fan_in" and mode ~= "fan_out" then
    fail(("nn.init.%s: mode must be \"fan_in\" or \"fan_out\", got %s"):format(who, tostring(mode)))
  end
  local fan_in, fan_out = init.calculate_fans(t)
  local fan = mode == "fan_in" and fan_in or fan_out
  if fan == 0 then fail(("nn.init.%s: %s is 0 (an empty tensor)"):format(who, mode)) end
  return init.calculate_gain(opts.nonlinearity or "leaky_relu", opts.a or 0) / math.sqrt(fan)
end

--- Kaiming/He (He et al. 2015): U(−b, b) with b = √3·gain/√fan.
-- opts: a (leaky_relu slope, 0), mode ("fan_in" or "fan_out"),
-- nonlinearity ("leaky_relu" by default, as in PyTorch; "relu", ...).
function init.kaiming_uniform_(t, opts)
  local b = math.sqrt(3) * kaiming_std("kaiming_uniform_", t, opts)
  return init.uniform_(t, -b, b)
end

--- Kaiming/He normal: N(0, σ²) with σ = gain/√fan; opts as kaiming_uniform_.
function init.kaiming_normal_(t, opts)
  return init.normal_(t, 0, kaiming_std("kaiming_normal_", t, opts))
end

return init
