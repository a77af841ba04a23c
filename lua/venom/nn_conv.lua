--- venom.nn's convolutional layers (nn.Conv2d, nn.MaxPool2d, nn.AvgPool2d,
-- nn.AdaptiveAvgPool2d, nn.BatchNorm1d, nn.BatchNorm2d, nn.Flatten), loaded
-- on first use through nn's lazy fields. Images are NCHW: (B, C, H, W) f32.
-- A size (kernel_size, stride, padding, dilation) is a number n, meaning
-- {n, n}, or a pair {height, width}. The V:N:M convolution is
-- nn.SparseConv2d (venom.sparse). The layers run on the CPU or on CUDA
-- (model:cuda() moves the running statistics too).
local venom = require "venom"
local util = require "venom.util"
local nn = require "venom.nn"
local fail = util.fail

local Module = nn.Module
local is_tensor = venom.is_tensor
local fmt_shape = util.format_shape
local check_opts = util.check_options

local layers = {}

--- A size option as a pair {h, w}: n → {n, n}; nil → def. Errors name the
-- layer and the option and say what was found.
function layers.pair(who, name, v, def, min)
  if v == nil then v = def end
  if type(v) == "number" then v = { v, v } end
  if type(v) ~= "table" or #v ~= 2 or not util.is_int(v[1]) or not util.is_int(v[2])
      or v[1] < min or v[2] < min then
    fail(("%s: %s must be an integer >= %d or a pair {height, width} of them, got %s")
      :format(who, name, min, type(v) == "table" and "{" .. table.concat(v, ", ") .. "}"
        or tostring(v)))
  end
  return { v[1], v[2] }
end
local pair = layers.pair

local function check_input(who, x, nd, what)
  if not is_tensor(x) then fail(("%s: expected a tensor input, got %s"):format(who, type(x))) end
  if not nd[x:dim()] then
    fail(("%s: expected an input of shape %s, got %s"):format(who, what, fmt_shape(x)))
  end
end

local function uniform(bound, ...)
  local u = venom.rand(...)
  local t = u * (2 * bound) - bound
  u:free()
  return t
end

-- Conv2d ----------------------------------------------------------------------------

--- 2-d convolution y = conv2d(x, weight) + bias (venom.conv2d):
-- x (B, in_channels, H, W) → (B, out_channels, Ho, Wo). opts: stride = 1,
-- padding = 0, dilation = 1, groups = 1 (dividing both channel counts;
-- groups = in_channels = out_channels is depthwise), bias = true.
-- Parameters: weight (out_channels, in_channels/groups, kh, kw) and bias
-- (out_channels), both U(−1/√fan_in, 1/√fan_in), fan_in = in/groups·kh·kw
-- (PyTorch's default). The weight seen as (out_channels, in/groups·kh·kw) is
-- the matrix venom.sparse and prune.GMP make V:N:M (groups = 1).
local Conv2d = Module:extend("Conv2d")
layers.Conv2d = Conv2d

--- The geometry options shared by nn.Conv2d and nn.SparseConv2d, checked:
-- fills self.in_channels, out_channels, kernel_size, stride, padding,
-- dilation (pairs).
function layers.conv_geometry(self, who, in_channels, out_channels, kernel_size, opts)
  util.check_int(in_channels, "in_channels", { min = 1, who = who })
  util.check_int(out_channels, "out_channels", { min = 1, who = who })
  self.in_channels, self.out_channels = in_channels, out_channels
  self.kernel_size = pair(who, "kernel_size", kernel_size, nil, 1)
  self.stride = pair(who, "stride", opts.stride, 1, 1)
  self.padding = pair(who, "padding", opts.padding, 0, 0)
  self.dilation = pair(who, "dilation", opts.dilation, 1, 1)
end

function Conv2d:__init(in_channels, out_channels, kernel_size, opts)
  Module.__init(self)
  local who = "nn.Conv2d"
  opts = check_opts(opts, { "stride", "padding", "dilation", "groups", "bias" }, who)
  layers.conv_geometry(self, who, in_channels, out_channels, kernel_size, opts)
  local groups = util.check_int(opts.groups or 1, "groups", { min = 1, who = who })
  if in_channels % groups ~= 0 or out_channels % groups ~= 0 then
    fail(("%s: in_channels (%d) and out_channels (%d) must both be divisible by groups (%d)")
      :format(who, in_channels, out_channels, groups))
  end
  self.groups = groups
  local k = self.kernel_size
  local bound = 1 / math.sqrt(in_channels / groups * k[1] * k[2])
  self:register_parameter("weight", uniform(bound, out_channels, in_channels / groups, k[1], k[2]))
  local bias = util.check_bool(opts.bias, "bias", who, true)
  self:register_parameter("bias", bias and uniform(bound, out_channels) or nil)
end

function Conv2d:forward(x)
  check_input("nn.Conv2d", x, { [4] = true }, ("(B, %d, H, W)"):format(self.in_channels))
  return venom.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                      self.groups)
end

--- The "k×k, stride=.., ..." part of a conv's description.
function layers.geometry_repr(m)
  local function p(v) return v[1] == v[2] and tostring(v[1]) or ("(%d, %d)"):format(v[1], v[2]) end
  return ("%d, %d, kernel_size=%s, stride=%s, padding=%s, dilation=%s"):format(m.in_channels,
    m.out_channels, p(m.kernel_size), p(m.stride), p(m.padding), p(m.dilation))
end

function Conv2d:extra_repr()
  return ("%s, groups=%d, bias=%s"):format(layers.geometry_repr(self), self.groups,
    tostring(self.bias ~= nil))
end

-- Pooling ----------------------------------------------------------------------------

local function pool_class(name, fn)
  local cls = Module:extend(name)
  local who = "nn." .. name
  cls.__init = function(self, kernel_size, opts)
    Module.__init(self)
    opts = check_opts(opts, { "stride", "padding" }, who)
    self.kernel_size = pair(who, "kernel_size", kernel_size, nil, 1)
    self.stride = pair(who, "stride", opts.stride, self.kernel_size, 1)
    self.padding = pair(who, "padding", opts.padding, 0, 0)
  end
  cls.forward = function(self, x)
    check_input(who, x, { [4] = true }, "(B, C, H, W)")
    return venom[fn](x, self.kernel_size, self.stride, self.padding)
  end
  cls.extra_repr = function(self)
    return ("kernel_size={%d, %d}, stride={%d, %d}, padding={%d, %d}"):format(self.kernel_size[1],
      self.kernel_size[2], self.stride[1], self.stride[2], self.padding[1], self.padding[2])
  end
  return cls
end

--- nn.MaxPool2d(kernel_size, {stride = kernel_size, padding = 0}): the
-- maximum of each window (venom.max_pool2d; padding at most half the kernel).
layers.MaxPool2d = pool_class("MaxPool2d", "max_pool2d")
--- nn.AvgPool2d(kernel_size, {stride = kernel_size, padding = 0}): the mean
-- of each window, zero padding counted (venom.avg_pool2d).
layers.AvgPool2d = pool_class("AvgPool2d", "avg_pool2d")

--- nn.AdaptiveAvgPool2d(output_size): (B, C, H, W) → (B, C, oh, ow), the
-- mean over windows that tile the image (venom.adaptive_avg_pool2d);
-- output_size n or {oh, ow}. AdaptiveAvgPool2d(1) is global average pooling.
local AdaptiveAvgPool2d = Module:extend("AdaptiveAvgPool2d")
layers.AdaptiveAvgPool2d = AdaptiveAvgPool2d

function AdaptiveAvgPool2d:__init(output_size)
  Module.__init(self)
  self.output_size = pair("nn.AdaptiveAvgPool2d", "output_size", output_size, nil, 1)
end

function AdaptiveAvgPool2d:forward(x)
  check_input("nn.AdaptiveAvgPool2d", x, { [4] = true }, "(B, C, H, W)")
  return venom.adaptive_avg_pool2d(x, self.output_size)
end

function AdaptiveAvgPool2d:extra_repr()
  return ("output_size={%d, %d}"):format(self.output_size[1], self.output_size[2])
end

-- Batch normalisation ------------------------------------------------------------------

local function batch_norm_class(name, nd, what)
  local cls = Module:extend(name)
  local who = "nn." .. name
  cls.__init = function(self, num_features, opts)
    Module.__init(self)
    util.check_int(num_features, "num_features", { min = 1, who = who })
    opts = check_opts(opts, { "eps", "momentum", "affine", "track_running_stats" }, who)
    local eps, momentum = opts.eps or 1e-5, opts.momentum or 0.1
    if type(eps) ~= "number" or not (eps > 0 and eps < math.huge) then
      fail(("%s: eps must be a positive number, got %s"):format(who, tostring(eps)))
    end
    if type(momentum) ~= "number" or not (momentum >= 0 and momentum <= 1) then
      fail(("%s: momentum must be a number in [0, 1], got %s"):format(who, tostring(momentum)))
    end
    self.num_features, self.eps, self.momentum = num_features, eps, momentum
    if opts.affine ~= false then
      self:register_parameter("weight", venom.ones(num_features))
      self:register_parameter("bias", venom.zeros(num_features))
    end
    if opts.track_running_stats ~= false then
      self.running_mean = venom.zeros(num_features)
      self.running_var = venom.ones(num_features)
    end
  end
  cls.forward = function(self, x)
    check_input(who, x, nd, what:format(self.num_features, self.num_features))
    if x:size(2) ~= self.num_features then
      fail(("%s: input has %d channels (dim 2 of %s), expected num_features = %d")
        :format(who, x:size(2), fmt_shape(x), self.num_features))
    end
    -- Without running statistics, eval mode normalises with the batch's own.
    local training = self.training or self.running_mean == nil
    return venom.batch_norm(x, self.weight, self.bias, self.running_mean, self.running_var,
                            training, self.momentum, self.eps)
  end
  -- The running statistics are state, not parameters: saved in state_dict()
  -- under "<name>.running_mean" / ".running_var".
  cls._extra_state = function(self)
    if not self.running_mean then return {} end
    return { running_mean = self.running_mean, running_var = self.running_var }
  end
  cls._load_extra_state = function(self, st)
    for _, k in ipairs({ "running_mean", "running_var" }) do
      local v = st[k]
      if not is_tensor(v) or fmt_shape(v) ~= fmt_shape({ self.num_features }) then
        fail(("%s: load_state_dict: %s must be a tensor of shape (%d), got %s"):format(who, k,
          self.num_features, is_tensor(v) and fmt_shape(v) or type(v)))
      end
      -- a copy of our own: the staged module must not write into shared tensors
      self[k] = v:float():to(self[k]:device()):clone()
    end
  end
  cls._to_device = function(self, device)
    if self.running_mean then
      self.running_mean = self.running_mean:to(device)
      self.running_var = self.running_var:to(device)
    end
  end
  cls.extra_repr = function(self)
    return ("%d, eps=%g, momentum=%g, affine=%s, track_running_stats=%s"):format(
      self.num_features, self.eps, self.momentum, tostring(self.weight ~= nil),
      tostring(self.running_mean ~= nil))
  end
  return cls
end

--- nn.BatchNorm1d(num_features, opts): batch normalisation (Ioffe & Szegedy
-- 2015, venom.batch_norm) of (B, C) or (B, C, L) inputs over all dims but
-- the channel. Training mode normalises with the batch's mean and (biased)
-- variance and updates running_mean/running_var with `momentum`; eval mode
-- uses the running ones. opts: eps = 1e-5, momentum = 0.1, affine = true
-- (parameters weight = 1, bias = 0), track_running_stats = true. The
-- running statistics are saved in state_dict() and checkpoints.
layers.BatchNorm1d = batch_norm_class("BatchNorm1d", { [2] = true, [3] = true }, "(B, %d) or (B, %d, L)")
--- nn.BatchNorm2d(num_features, opts): as nn.BatchNorm1d for (B, C, H, W)
-- images, per channel.
layers.BatchNorm2d = batch_norm_class("BatchNorm2d", { [4] = true }, "(B, %d, H, W)")

-- Flatten -------------------------------------------------------------------------------

--- nn.Flatten(start_dim = 2, end_dim = -1): merges dims start_dim..end_dim
-- (1-based): (B, C, H, W) → (B, C·H·W) by default; a view when possible.
local Flatten = Module:extend("Flatten")
layers.Flatten = Flatten

function Flatten:__init(start_dim, end_dim)
  Module.__init(self)
  self.start_dim = util.check_int(start_dim or 2, "start_dim", { who = "nn.Flatten" })
  self.end_dim = util.check_int(end_dim or -1, "end_dim", { who = "nn.Flatten" })
end

function Flatten:forward(x)
  if not is_tensor(x) then fail("nn.Flatten: expected a tensor input, got " .. type(x)) end
  return x:flatten(self.start_dim, self.end_dim)
end

function Flatten:extra_repr()
  return ("start_dim=%d, end_dim=%d"):format(self.start_dim, self.end_dim)
end

return layers
