--- venom.nn — neural-network modules in the style of torch.nn.
--
-- A module is a Lua table whose metatable is its class. It owns parameters
-- (tensors that require a gradient) and child modules, both kept in
-- registration order so that `parameters()` and `named_parameters()` are
-- deterministic. Calling a module runs its `forward`:
--
--     local nn = require "venom.nn"
--     local model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
--     local logits = model(x)                 -- x: (batch, 784) f32
--
-- New modules subclass nn.Module with `extend`:
--
--     local MLP = nn.Module:extend("MLP")
--     function MLP:__init(d)
--       nn.Module.__init(self)
--       self.fc = nn.Linear(d, d)            -- the same as self:add_module("fc", ...)
--     end
--     function MLP:forward(x) return self.fc(x):relu() end
--
-- Fields register themselves, as in PyTorch: assigning a module to a field
-- adds it as a child (add_module), and assigning a leaf tensor that requires
-- a gradient adds it as a parameter (register_parameter), in the order of
-- assignment. Reassigning a registered field replaces it in place (same
-- position); assigning nil removes a child (a parameter set to nil stays as
-- an absent one, like a bias of false). Other values (numbers, strings,
-- tables, tensors that do not require a gradient) stay plain fields.
local venom = require "venom"
local util = require "venom.util"
local fail = util.fail

local nn = {}

local is_tensor = venom.is_tensor
local fmt_shape = util.format_shape

local function check_positive_int(who, what, v)
  util.check_int(v, what, { min = 1, who = who })
end

local check_opts = util.check_options -- (opts, known names, who)

-- Module --------------------------------------------------------------------

--- Base class of every module.
local Module = { __name = "Module" }
Module.__index = Module
nn.Module = Module

--- True when `x` is a module: an instance of nn.Module or of a class made
-- with extend (its class chain leads to nn.Module; a class is not a module).
function nn.is_module(x)
  local cls, seen = type(x) == "table" and getmetatable(x), {}
  while type(cls) == "table" and not seen[cls] do -- (a metatable may be its own __index)
    if cls == Module then return true end
    seen[cls] = true
    local mt = getmetatable(cls)
    cls = type(mt) == "table" and rawget(mt, "__index")
  end
  return false
end

-- Metamethods are looked up with rawget, so every class carries its own copy.
local function module_call(self, ...) return self:forward(...) end

-- A subclass's __init must run Module.__init(self) before anything else
-- touches the module; say so rather than fail later inside ipairs.
local function check_init(self, who)
  if rawget(self, "_params") == nil then
    local name = getmetatable(self).__name
    fail(("%s: this %s is not initialised: %s:__init must call nn.Module.__init(self) first")
      :format(who, name, name))
  end
end

local function class_new(cls, ...)
  local obj = setmetatable({}, cls)
  obj:__init(...)
  check_init(obj, cls.__name)
  return obj
end

--- A subclass of this class named `name`; `Sub(...)` builds an instance and
-- runs `Sub.__init(self, ...)`.
function Module:extend(name)
  local cls = { __name = name }
  cls.__index = cls
  cls.__call = module_call
  cls.__tostring = Module.__tostring
  cls.__newindex = Module.__newindex
  return setmetatable(cls, { __index = self, __call = class_new })
end

function Module:__init()
  rawset(self, "training", true)
  rawset(self, "_params", {})  -- ordered names
  rawset(self, "_modules", {}) -- ordered names
end

function Module:forward()
  fail(getmetatable(self).__name .. ": this module has no forward (a subclass must define one)")
end

-- Appends name to the ordered list unless it is there already.
local function add_name(list, name)
  for _, n in ipairs(list) do
    if n == name then return end
  end
  list[#list + 1] = name
end

local function remove_name(list, name)
  for i, n in ipairs(list) do
    if n == name then return table.remove(list, i) end
  end
end

local function has_name(list, name)
  for _, n in ipairs(list) do
    if n == name then return true end
  end
  return false
end

--- Adds parameter `t` (an f32 tensor, marked as requiring a gradient) under
-- `name`, reachable as `self[name]`. A nil `t` records an absent parameter
-- (e.g. no bias) without adding it. `self[name] = t` does the same for a
-- leaf tensor that requires a gradient.
function Module:register_parameter(name, t)
  if type(name) ~= "string" then
    fail("register_parameter: name must be a string, got " .. type(name))
  end
  if t ~= nil and not is_tensor(t) then
    fail(("register_parameter(%q): expected a tensor, got %s"):format(name, type(t)))
  end
  check_init(self, "register_parameter")
  remove_name(self._modules, name)
  add_name(self._params, name)
  if t ~= nil and not t:requires_grad() then
    t:requires_grad_(true)
  end
  rawset(self, name, t)
  return t
end

--- Adds child module `m` under `name` (a string or an integer position),
-- reachable as `self[name]`. `self[name] = m` does the same.
function Module:add_module(name, m)
  if type(name) ~= "string" and type(name) ~= "number" then
    fail("add_module: name must be a string or a number, got " .. type(name))
  end
  if not nn.is_module(m) then
    fail(("add_module(%s): expected a module, got %s"):format(tostring(name), type(m)))
  end
  check_init(self, "add_module")
  remove_name(self._params, name)
  add_name(self._modules, name)
  rawset(self, name, m)
  return m
end

-- What a field's value makes it: a child module, a parameter (a leaf
-- tensor that requires a gradient: one made to be trained, not the output
-- of an op), or nil for a plain field.
-- The closures pcall runs are file-level functions: a closure made inside
-- a loop (FNEW) is not compiled by LuaJIT, and model:eval() / model:train()
-- run sync() below over every module (GPT:generate calls both).
local function trainable(v) return v:requires_grad() and v:is_leaf() end

local function field_kind(v)
  if nn.is_module(v) then return "module" end
  if is_tensor(v) then
    -- (a freed tensor answers with an error: it is a plain field)
    local ok, yes = pcall(trainable, v)
    if ok and yes then return "param" end
  end
end

-- Lua calls __newindex only for a field the table does not hold yet: a new
-- field, or a registered one set to nil before. Registered fields that are
-- reassigned (a raw write, no metamethod) are seen by sync() below.
function Module:__newindex(k, v)
  local kind = field_kind(v)
  if kind == "module" or (type(k) == "string" and (kind == "param"
      or (is_tensor(v) and rawget(self, "_params") and has_name(self._params, k)))) then
    check_init(self, ("assigning %s to field '%s'"):format(kind and "a " .. kind or "a tensor",
      tostring(k)))
    if kind == "module" then return Module.add_module(self, k, v) end
    return Module.register_parameter(self, k, v)
  end
  rawset(self, k, v)
end

-- Brings the ordered name lists of m up to date with its fields, for the
-- writes __newindex does not see (a field that exists already is written
-- raw): a child set to nil or to anything but a module is removed; a
-- parameter's name that now holds a module moves to the children (at the
-- end), one that holds a plain non-tensor value is removed; a tensor put
-- under a parameter's name is that parameter, marked as requiring a
-- gradient as register_parameter does; a plain field that now holds a
-- module or a parameter is registered at the end (several in sorted
-- order). The lists keep their identity.
local function mark_trainable(v)
  if v:is_leaf() and not v:requires_grad() then v:requires_grad_(true) end
end

local function by_name(a, b) return tostring(a) < tostring(b) end

local function sync(m)
  if rawget(m, "_params") == nil then return end
  local mods, params, known = m._modules, m._params, {}
  for i = #mods, 1, -1 do
    if nn.is_module(rawget(m, mods[i])) then
      known[mods[i]] = true
    else
      table.remove(mods, i)
    end
  end
  for i = #params, 1, -1 do
    local name = params[i]
    local v = rawget(m, name)
    if nn.is_module(v) then
      table.remove(params, i)
      mods[#mods + 1], known[name] = name, true
    elseif v ~= nil and not is_tensor(v) then
      table.remove(params, i)
    else
      known[name] = true
      if v ~= nil then pcall(mark_trainable, v) end -- (a freed tensor stays as it is)
    end
  end
  local late = {}
  for k, v in pairs(m) do
    local kind = not known[k] and field_kind(v)
    if kind == "module" and type(k) == "number" or type(k) == "string" and kind then
      late[#late + 1] = k
    end
  end
  table.sort(late, by_name)
  for _, k in ipairs(late) do
    local v = rawget(m, k)
    if nn.is_module(v) then Module.add_module(m, k, v) else Module.register_parameter(m, k, v) end
  end
end

--- The direct children as an ordered list of {name, module} pairs.
function Module:named_children()
  check_init(self, "named_children")
  sync(self)
  local out = {}
  for i, name in ipairs(self._modules) do
    out[i] = { name, self[name] }
  end
  return out
end

--- Direct child modules, in order.
function Module:children()
  local out = {}
  for i, nc in ipairs(self:named_children()) do
    out[i] = nc[2]
  end
  return out
end

-- named_parameters() of root, with the modules in `staged` (module → the
-- staged copy load_state_dict checks before it writes) read in place of
-- the real ones.
local function collect_parameters(root, staged)
  local out, seen = {}, {}
  local function walk(m, prefix)
    m = staged and staged[m] or m
    sync(m)
    for _, name in ipairs(m._params) do
      local t = m[name]
      if t ~= nil and not seen[t] then
        seen[t] = true
        out[#out + 1] = { prefix .. name, t }
      end
    end
    for _, name in ipairs(m._modules) do
      walk(m[name], prefix .. tostring(name) .. ".")
    end
  end
  walk(root, "")
  return out
end

--- Ordered list of {name, tensor} pairs with dotted names such as
-- "layers.1.weight". A tensor shared by several modules appears once, under
-- the first name it was reached by.
function Module:named_parameters()
  return collect_parameters(self)
end

--- Moves every parameter to `device` ("cpu" or "cuda") in place and returns
-- the module: each parameter is replaced by a copy on that device (a new
-- leaf that requires a gradient; its old gradient is dropped), so create the
-- optimizer after moving the model, as in PyTorch. A tensor shared by
-- several modules (tied weights) stays shared. Errors when the device is
-- unknown or CUDA is not available (the message says why).
function Module:to(device)
  if device ~= "cpu" and device ~= "cuda" then
    fail(("to: expected 'cpu' or 'cuda', got %s"):format(tostring(device)))
  end
  local moved = {}
  local function walk(m)
    sync(m)
    for _, name in ipairs(m._params) do
      local t = m[name]
      if t ~= nil and t:device() ~= device then
        if not moved[t] then
          local c = venom.no_grad(function() return t:to(device) end)
          c:requires_grad_(true)
          moved[t] = c
        end
        rawset(m, name, moved[t])
      end
    end
    if m._to_device then m:_to_device(device) end
    for _, name in ipairs(m._modules) do walk(m[name]) end
  end
  walk(self)
  return self
end

--- Shorthands for to("cuda") and to("cpu").
function Module:cuda() return self:to("cuda") end
function Module:cpu() return self:to("cpu") end

--- List of parameter tensors (each once), in the order of named_parameters().
function Module:parameters()
  local out = {}
  for i, np in ipairs(self:named_parameters()) do
    out[i] = np[2]
  end
  return out
end

--- Total number of scalar parameters.
function Module:num_parameters()
  local n = 0
  for _, p in ipairs(self:parameters()) do
    n = n + p:numel()
  end
  return n
end

--- Sets training mode (default true) on this module and all descendants.
function Module:train(mode)
  if mode == nil then mode = true end
  self.training = mode and true or false
  sync(self)
  for _, name in ipairs(self._modules) do
    self[name]:train(mode)
  end
  return self
end

function Module:eval()
  return self:train(false)
end

--- Drops the gradient of every parameter.
function Module:zero_grad()
  for _, p in ipairs(self:parameters()) do
    p:zero_grad()
  end
end

-- State dicts ------------------------------------------------------------------
--
-- A state dict is a flat table from dotted names ("layers.1.weight") to
-- tensors, plus, for modules with extra state, strings and numbers;
-- venom.checkpoint and venom.save write it to a safetensors file (the
-- numbers and strings go to the file's metadata under their own names, and
-- venom.load's tensors table reads them back, as strings). A module
-- class may define three hooks to store more than its parameters (a sparse
-- layer stores its compressed arrays and V, N, M this way):
--   m:_extra_state()           → {name = tensor | string | number, ...}, saved
--                                 under the module's prefix;
--   m:_load_extra_state(state) ← the same names, read back (values from a
--                                 file arrive as strings); called before the
--                                 parameters are checked, so it may reshape
--                                 them, on a staged copy of the module that
--                                 replaces it once the whole load is checked:
--                                 it must set fields and register parameters,
--                                 never write into tensors it shares with m;
--   m:_dense_state()           → {name = tensor}: plain dense weights that
--                                 replace the module's own parameters in
--                                 dense_state_dict().

-- Calls fn(module, prefix) on m and every descendant, parents first.
local function each_module(m, prefix, fn)
  sync(m)
  fn(m, prefix)
  for _, name in ipairs(m._modules) do
    each_module(m[name], prefix .. tostring(name) .. ".", fn)
  end
end

--- Flat table of the model's state: every parameter under its dotted name
-- (a detached tensor sharing the parameter's storage), plus the entries of
-- modules that define _extra_state(). venom.save(path, model:state_dict())
-- writes it whole (numbers and strings to the metadata).
function Module:state_dict()
  local sd = {}
  for _, np in ipairs(self:named_parameters()) do
    sd[np[1]] = np[2]:detach()
  end
  each_module(self, "", function(m, prefix)
    if m._extra_state then
      for k, v in pairs(m:_extra_state()) do sd[prefix .. k] = v end
    end
  end)
  return venom._state_dict(sd)
end

--- Plain dense weights: like state_dict(), but a module that defines
-- _dense_state() contributes those tensors instead of its parameters, and
-- there is no extra state. For other tools (--export-dense).
function Module:dense_state_dict()
  local sd, covered = {}, {}
  each_module(self, "", function(m, prefix)
    if m._dense_state then
      for _, name in ipairs(m._params) do
        if m[name] ~= nil then covered[m[name]] = true end
      end
      for k, v in pairs(m:_dense_state()) do sd[prefix .. k] = v end
    end
  end)
  for _, np in ipairs(self:named_parameters()) do
    if not covered[np[2]] then sd[np[1]] = np[2]:detach() end
  end
  return venom._state_dict(sd)
end


-- A copy of module m to load extra state into: the same fields (tensors and
-- child modules shared, not copied) and its own lists of names, so that the
-- hook may replace fields and register parameters without touching m.
local function stage(m)
  local s = {}
  for k, v in pairs(m) do s[k] = v end
  s._params, s._modules = { unpack(m._params) }, { unpack(m._modules) }
  return setmetatable(s, getmetatable(m))
end

local FLOAT = { f32 = true, bf16 = true, f16 = true }

--- Copies a state dict (from state_dict() or venom.load) into this model's
-- parameters, in place. opts.strict (default true): every name the model has
-- must be present and no other; otherwise missing and unexpected names are
-- skipped. Returns the lists of missing and unexpected names. Errors name the
-- tensor: a value that is not a tensor, a shape that differs from the
-- parameter's (both shapes are given), an integer tensor for a float
-- parameter (or the reverse). The load is planned and checked whole before
-- anything is written, so a load that fails changes nothing. Entries that
-- venom.load's tensors table reads from the file's metadata (a sparse
-- layer's V, N, M) count as present; model:load_state_dict(venom.load(path))
-- works (the metadata table that comes second is not taken for opts).
function Module:load_state_dict(sd, opts)
  local who = "load_state_dict"
  if type(sd) ~= "table" then
    fail(("%s: expected a state dict (a table of name → tensor), got %s"):format(who, type(sd)))
  end
  local mt = getmetatable(sd)
  if opts ~= nil and type(mt) == "table" and rawequal(opts, mt.__metadata) then opts = nil end
  opts = check_opts(opts, { "strict" }, who)
  local strict = opts.strict ~= false

  -- 1. Names: every name the model wants, extra state first, then parameters.
  local extra, wanted = {}, {}
  each_module(self, "", function(m, prefix)
    if m._extra_state and m._load_extra_state then
      local keys = {}
      for k in pairs(m:_extra_state()) do
        keys[#keys + 1] = k
        wanted[prefix .. k] = true
      end
      extra[#extra + 1] = { module = m, prefix = prefix, keys = keys }
    end
  end)
  for _, np in ipairs(self:named_parameters()) do wanted[np[1]] = true end
  local missing, unexpected = {}, {}
  for name in pairs(wanted) do
    if sd[name] == nil then missing[name] = true end
  end
  for name in pairs(sd) do
    if not wanted[name] then unexpected[name] = true end
  end
  missing, unexpected = util.sorted_keys(missing), util.sorted_keys(unexpected)
  if strict and (#missing > 0 or #unexpected > 0) then
    local parts = {}
    if #missing > 0 then parts[#parts + 1] = "missing: " .. table.concat(missing, ", ") end
    if #unexpected > 0 then parts[#parts + 1] = "unexpected: " .. table.concat(unexpected, ", ") end
    fail(("%s: the state dict does not match the model (%s)"):format(who, table.concat(parts, "; ")))
  end

  -- 2. Extra state, loaded into staged copies of its modules (it may rebuild
  -- a module, e.g. a sparse layer's pattern, and reshape its parameters).
  local staged, order = {}, {}
  for _, e in ipairs(extra) do
    local m, prefix = e.module, e.prefix
    -- The extra state and the module's parameters go together (a pattern
    -- without its values would put old numbers in new places): all of
    -- them, or none (strict = false) and the module is left alone.
    local names, absent = {}, {}
    for _, k in ipairs(e.keys) do names[#names + 1] = prefix .. k end
    for _, k in ipairs(m._params) do
      if m[k] ~= nil then names[#names + 1] = prefix .. k end
    end
    for _, name in ipairs(names) do
      if sd[name] == nil then absent[#absent + 1] = name end
    end
    table.sort(absent)
    if #absent > 0 and #absent < #names then
      fail(("%s: the state dict has part of module '%s' but not %s; its state loads whole "
        .. "or not at all"):format(who, prefix:sub(1, -2), table.concat(absent, ", ")))
    end
    if #absent == 0 then
      local state = {}
      for _, k in ipairs(e.keys) do state[k] = sd[prefix .. k] end
      staged[m] = stage(m)
      staged[m]:_load_extra_state(state)
      order[#order + 1] = m
    end
  end

  -- 3. Parameters, as the staged modules have them.
  local copies = {}
  for _, np in ipairs(collect_parameters(self, staged)) do
    local name, p = np[1], np[2]
    local v = sd[name]
    if v ~= nil then
      if not is_tensor(v) then
        fail(("%s: '%s' is a %s, expected a tensor"):format(who, name, type(v)))
      end
      if fmt_shape(v) ~= fmt_shape(p) then
        fail(("%s: shape mismatch for '%s': the state dict has %s, the model has %s")
          :format(who, name, fmt_shape(v), fmt_shape(p)))
      end
      if FLOAT[v:dtype()] ~= FLOAT[p:dtype()] then
        fail(("%s: dtype mismatch for '%s': the state dict has %s, the model has %s")
          :format(who, name, v:dtype(), p:dtype()))
      end
      copies[#copies + 1] = { p, v }
    end
  end

  -- 4. Everything checked: the staged modules take their place, then the
  -- values are copied in.
  for _, m in ipairs(order) do
    local s = staged[m]
    for k in pairs(m) do rawset(m, k, nil) end
    for k, v in pairs(s) do rawset(m, k, v) end -- (raw: the fields are registered already)
  end
  venom.no_grad(function()
    for _, c in ipairs(copies) do c[1]:copy_(c[2]) end
  end)
  return missing, unexpected
end

--- One-line description of this module's settings (subclasses override).
function Module:extra_repr()
  return ""
end

function Module:__tostring()
  sync(self)
  local head = getmetatable(self).__name .. "(" .. self:extra_repr()
  if #self._modules == 0 then
    return head .. ")"
  end
  local lines = { head }
  for _, name in ipairs(self._modules) do
    local sub = tostring(self[name]):gsub("\n", "\n  ")
    lines[#lines + 1] = ("  (%s): %s"):format(tostring(name), sub)
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end

Module.__call = module_call
setmetatable(Module, { __call = class_new })
-- (Module.__newindex, defined above, serves Module's own instances too.)

-- Linear ----------------------------------------------------------------------

--- y = x·Wᵀ + b with W (out_features, in_features) and b (out_features).
-- Both are drawn from U(−1/√in, 1/√in) on the engine RNG, as PyTorch does.
local Linear = Module:extend("Linear")
nn.Linear = Linear

function Linear:__init(in_features, out_features, opts)
  Module.__init(self)
  check_positive_int("nn.Linear", "in_features", in_features)
  check_positive_int("nn.Linear", "out_features", out_features)
  opts = check_opts(opts, { "bias" }, "nn.Linear")
  local bias = opts.bias
  if bias == nil then bias = true end
  self.in_features, self.out_features = in_features, out_features
  local bound = 1 / math.sqrt(in_features)
  local function uniform(...)
    local u = venom.rand(...)
    local t = u * (2 * bound) - bound
    u:free()
    return t
  end
  self:register_parameter("weight", uniform(out_features, in_features))
  self:register_parameter("bias", bias and uniform(out_features) or nil)
end

function Linear:forward(x)
  if not is_tensor(x) then
    fail("nn.Linear: expected a tensor input, got " .. type(x))
  end
  local nd = x:dim()
  if nd == 0 then
    fail(("nn.Linear: expected an input of shape (..., %d), got a 0-d tensor")
      :format(self.in_features))
  end
  local width = x:size(nd)
  if width ~= self.in_features then
    fail(("nn.Linear: input last dimension is %s but in_features is %d (input shape %s)")
      :format(tostring(width), self.in_features, fmt_shape(x)))
  end
  return venom.linear(x, self.weight, self.bias)
end

function Linear:extra_repr()
  return ("in_features=%d, out_features=%d, bias=%s")
    :format(self.in_features, self.out_features, tostring(self.bias ~= nil))
end

-- Activations -------------------------------------------------------------------

local function activation(name, method)
  local cls = Module:extend(name)
  cls.forward = function(_, x)
    if not is_tensor(x) then
      fail(("nn.%s: expected a tensor input, got %s"):format(name, type(x)))
    end
    return x[method](x)
  end
  nn[name] = cls
end
activation("ReLU", "relu")
activation("GELU", "gelu") -- tanh approximation (Hendrycks & Gimpel 2016)
activation("Tanh", "tanh")
activation("Sigmoid", "sigmoid")

--- Inverted dropout (Srivastava et al. 2014): in training mode zeroes each
-- element with probability p and scales the rest by 1/(1−p); the identity in
-- eval mode.
local Dropout = Module:extend("Dropout")
nn.Dropout = Dropout

function Dropout:__init(p)
  Module.__init(self)
  if p == nil then p = 0.5 end
  if type(p) ~= "number" or p < 0 or p >= 1 then
    fail("nn.Dropout: p must be a number in [0, 1), got " .. tostring(p))
  end
  self.p = p
end

function Dropout:forward(x)
  return venom.dropout(x, self.p, self.training)
end

function Dropout:extra_repr()
  return "p=" .. self.p
end

-- Sequential ----------------------------------------------------------------------

--- Runs its children in order; they are named 1, 2, ... (model[1] is the first).
local Sequential = Module:extend("Sequential")
nn.Sequential = Sequential

function Sequential:__init(...)
  Module.__init(self)
  for i = 1, select("#", ...) do
    local m = select(i, ...)
    if not nn.is_module(m) then
      fail(("nn.Sequential: argument %d is not a module (got %s)"):format(i, type(m)))
    end
    self:add_module(i, m)
  end
end

--- Appends a module; returns self.
function Sequential:add(m)
  self:add_module(#self._modules + 1, m)
  return self
end

function Sequential:forward(x)
  sync(self) -- (a child replaced or removed by assignment)
  for _, name in ipairs(self._modules) do
    x = self[name](x)
  end
  return x
end

--- A multilayer perceptron: nn.Sequential of nn.Linear(sizes[i], sizes[i + 1])
-- layers with an nn.ReLU between two of them, so {784, 256, 256, 10} gives
-- the children 1 to 5 (Linear, ReLU, Linear, ReLU, Linear): logits out.
function nn.mlp(sizes)
  if type(sizes) ~= "table" or #sizes < 2 then
    fail("nn.mlp: sizes must be a list of at least two layer widths, e.g. {784, 256, 10}")
  end
  local model = Sequential()
  for i = 1, #sizes - 1 do
    if i > 1 then model:add(nn.ReLU()) end
    model:add(nn.Linear(sizes[i], sizes[i + 1]))
  end
  return model
end

-- Losses --------------------------------------------------------------------------

local REDUCTIONS = { mean = true, sum = true, none = true }

local function loss_init(who)
  return function(self, opts)
    Module.__init(self)
    opts = check_opts(opts, { "reduction" }, who)
    local r = opts.reduction or "mean"
    if not REDUCTIONS[r] then
      fail(("%s: reduction must be 'mean', 'sum' or 'none', got %s"):format(who, tostring(r)))
    end
    self.reduction = r
  end
end

local function loss_repr(self)
  return "reduction=" .. self.reduction
end

--- Cross-entropy of logits (N, C) against 1-based class targets (N), i64.
local CrossEntropyLoss = Module:extend("CrossEntropyLoss")
nn.CrossEntropyLoss = CrossEntropyLoss
CrossEntropyLoss.__init = loss_init("nn.CrossEntropyLoss")
CrossEntropyLoss.extra_repr = loss_repr

function CrossEntropyLoss:forward(logits, target)
  return venom.cross_entropy(logits, target, self.reduction)
end

--- Mean squared error (a − b)² of two tensors of the same shape.
local MSELoss = Module:extend("MSELoss")
nn.MSELoss = MSELoss
MSELoss.__init = loss_init("nn.MSELoss")
MSELoss.extra_repr = loss_repr

function MSELoss:forward(a, b)
  return venom.mse_loss(a, b, self.reduction)
end

-- nn.SparseLinear lives in venom.sparse; other families of layers in their
-- own files, each loaded on first use.
local CONV_LAYERS = { Conv2d = true, MaxPool2d = true, AvgPool2d = true, AdaptiveAvgPool2d = true,
                      BatchNorm1d = true, BatchNorm2d = true, Flatten = true }
setmetatable(nn, {
  __index = function(_, k)
    if k == "SparseLinear" then return require("venom.sparse").SparseLinear end
    -- nn.init (lua/venom/nn_init.lua) and nn.utils (nn_utils.lua), loaded on first use
    if k == "init" or k == "utils" then return require("venom.nn_" .. k) end
    -- the graph layers (lua/venom/nn_graph.lua), loaded on first use
    if k == "GCNConv" or k == "SAGEConv" or k == "GATConv" then return require("venom.nn_graph")[k] end
    -- the transformer layers (lua/venom/nn_transformer.lua), loaded on first use
    if k == "Embedding" or k == "LayerNorm" then return require("venom.nn_transformer")[k] end
    -- the Mixture-of-Experts layer (lua/venom/nn_moe.lua), loaded on first use
    if k == "MoE" then return require("venom.nn_moe").MoE end
    -- dynamic activation sparsity (lua/venom/nn_dynamic.lua), loaded on first use
    if k == "SparseInputLinear" then return require("venom.nn_dynamic")[k] end
    -- the BitNet b1.58 layers (lua/venom/nn_quant.lua), loaded on first use
    if k == "RMSNorm" or k == "BitLinear" or k == "SparseBitLinear" then return require("venom.nn_quant")[k] end
    -- the convolutional layers (lua/venom/nn_conv.lua) and the V:N:M conv (venom.sparse)
    if k == "SparseConv2d" then return require("venom.sparse").SparseConv2d end
    if CONV_LAYERS[k] then return require("venom.nn_conv")[k] end
  end,
})

return nn
