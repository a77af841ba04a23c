-- venom.nn: fields register themselves as in PyTorch. A module assigned to a
-- field is a child, a leaf tensor that requires grad is a parameter, in
-- assignment order; reassigning replaces in place, nil removes; plain values
-- stay plain; the library's own modules register nothing twice.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"
local nn = require "venom.nn"
local sparse = require "venom.sparse"

venom.manual_seed(3)

local function names(list)
  local out = {}
  for i, np in ipairs(list) do out[i] = np[1] end
  return table.concat(out, " ")
end

local function child_names(m)
  local out = {}
  for i, nc in ipairs(m:named_children()) do out[i] = tostring(nc[1]) end
  return table.concat(out, " ")
end

-- A model built with plain field assignments only.
local Net = nn.Module:extend("FieldNet")
function Net:__init(d)
  nn.Module.__init(self)
  self.fc = nn.Linear(d, d)
  self.scale = venom.ones(d):requires_grad_(true)
  self.head = nn.Linear(d, 1)
  self.width = d                       -- a number: a plain field
  self.name = "net"                    -- a string: a plain field
  self.offsets = venom.zeros(d)        -- no grad: a plain field (a buffer)
  self.drop = nn.Dropout(0.5)
end
function Net:forward(x) return self.head(self.drop(self.fc(x) * self.scale)) end

do
  local net = Net(3)
  -- (own parameters first, then each child's, as in PyTorch)
  tap.is(names(net:named_parameters()), "scale fc.weight fc.bias head.weight head.bias",
    "fields: children and parameters register in assignment order")
  tap.is(child_names(net), "fc head drop", "fields: named_children in order")
  tap.is(net:num_parameters(), 3 * 3 + 3 + 3 + 3 + 1, "fields: num_parameters counts them")
  tap.is(table.concat(net._params, " "), "scale", "fields: the parameter list")
  tap.ok(net.width == 3 and net.name == "net", "fields: plain values stay plain fields")
  local sd = net:state_dict()
  tap.ok(sd.offsets == nil and sd.width == nil, "fields: a tensor without grad is not state")
  net:eval()
  tap.ok(net.fc.training == false and net.drop.training == false, "fields: eval() reaches children")
  local x = venom.randn(4, 3)
  tap.ok(testutil.max_diff(net(x):totable(), net(x):totable()) == 0,
    "fields: eval() turns the child dropout off")
  tap.ok(tostring(net):find("%(fc%): Linear") ~= nil, "fields: tostring lists the children")

  -- Reassigning replaces in place: same position, no duplicate.
  local fc2 = nn.Linear(3, 3)
  net.fc = fc2
  tap.ok(net.fc == fc2, "reassign: the field holds the new module")
  tap.is(names(net:named_parameters()), "scale fc.weight fc.bias head.weight head.bias",
    "reassign: same names, same position")
  tap.ok(net:parameters()[2] == fc2.weight, "reassign: the new module's parameters")
  local s2 = venom.full({ 3 }, 2):requires_grad_(true)
  net.scale = s2
  tap.ok(net:parameters()[1] == s2 and #net:parameters() == 5, "reassign: a parameter in place")
  local plain = venom.zeros(3)
  net.scale = plain
  tap.ok(net:parameters()[1] == plain and plain:requires_grad(),
    "reassign: a tensor under a parameter's name is that parameter (requires grad)")

  -- nil removes.
  net.head = nil
  tap.is(names(net:named_parameters()), "scale fc.weight fc.bias", "nil: removes a child")
  tap.is(child_names(net), "fc drop", "nil: the child is gone from named_children")
  net.scale = nil
  tap.is(names(net:named_parameters()), "fc.weight fc.bias", "nil: removes a parameter")
  net.head = nn.Linear(3, 2)
  tap.is(child_names(net), "fc drop head", "re-adding after nil: registered again")
  net.drop = "off"
  tap.is(child_names(net), "fc head", "a child replaced by a plain value is no child")
  net.width = nn.Tanh()
  tap.is(child_names(net), "fc head width", "a plain field that becomes a module registers")
end

-- Later assignments, integer keys, sharing ------------------------------------------
do
  local seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
  seq[3] = nn.Linear(2, 1)
  tap.is(names(seq:named_parameters()), "1.weight 1.bias 3.weight 3.bias",
    "seq[3] = m appends a child")
  tap.is(#seq:children(), 3, "seq[3] = m: three children")
  local lin = nn.Linear(2, 2)
  seq[1] = lin
  tap.ok(seq:parameters()[1] == lin.weight, "seq[1] = m replaces the first child")
  tap.is(seq(venom.randn(5, 2)):size(2), 1, "the replaced Sequential runs")
  seq[2] = nil
  tap.is(#seq:children(), 2, "seq[2] = nil removes a child")
  tap.is(seq(venom.randn(5, 2)):size(2), 1, "forward skips the removed child")

  local shared = nn.Linear(2, 2)
  local m = nn.Module()
  m.a = shared
  m.b = shared
  tap.is(names(m:named_parameters()), "a.weight a.bias", "a shared child's parameters once")
  m.w = venom.randn(2):requires_grad_(true)
  tap.is(names(m:named_parameters()), "w a.weight a.bias", "a parameter assigned after __init")

  -- A non-leaf tensor (an op's output) is a plain field, e.g. a cached activation.
  local y = m.a(venom.randn(1, 2))
  m.cache = y
  tap.is(#m:parameters(), 3, "an op's output (not a leaf) stays a plain field")
  local gone = venom.randn(2):requires_grad_(true)
  gone:free()
  m.freed = gone
  tap.is(#m:parameters(), 3, "a freed tensor stays a plain field")
end

-- Errors ------------------------------------------------------------------------------
do
  local Early = nn.Module:extend("Early")
  function Early:__init()
    self.fc = nn.Linear(2, 2) -- before nn.Module.__init
    nn.Module.__init(self)
  end
  tap.error_like(function() Early() end, "Early is not initialised: Early:__init must call "
    .. "nn.Module.__init%(self%) first", "a child assigned before Module.__init is an error")
  local m = nn.Module()
  tap.error_like(function() m[true] = nn.ReLU() end, "name must be a string or a number",
    "a module under a boolean key is refused")
end

-- The library's modules register nothing twice --------------------------------------------
do
  local l = nn.Linear(4, 3)
  tap.is(table.concat(l._params, " "), "weight bias", "Linear: two parameters, once each")
  local nb = nn.Linear(4, 3, { bias = false })
  nb.bias = nil
  tap.is(#nb:parameters(), 1, "Linear{bias=false}: weight only")
  local s = nn.SparseLinear(16, 8, { V = 4, M = 8 })
  tap.is(names(s:named_parameters()), "values bias", "SparseLinear: values and bias")
  tap.is(#s._modules, 0, "SparseLinear: no children (its matrix is a plain field)")
  local model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
  sparse.sparsify(model, { V = 4, M = 8, skip = { "3" } })
  tap.is(names(model:named_parameters()), "1.values 1.bias 3.weight 3.bias",
    "sparsify: the replaced layer in place")
  local GPT = dofile("models/gpt.lua")
  local gpt = GPT({ vocab_size = 11, block_size = 4, n_layer = 1, n_head = 2, n_embd = 8 })
  local seen, dup = {}, false
  for _, np in ipairs(gpt:named_parameters()) do
    if seen[np[1]] then dup = true end
    seen[np[1]] = true
  end
  tap.ok(not dup and seen["wte.weight"] and seen["blocks.1.attn.qkv.weight"],
    "GPT: every parameter once")
  tap.ok(gpt.positions ~= nil and seen.positions == nil, "GPT: its position ids stay plain")

  -- load_state_dict's staged copies write fields raw: nothing doubles.
  local a = nn.Sequential(nn.SparseLinear(16, 8, { V = 4, M = 8 }), nn.ReLU())
  local b = nn.Sequential(nn.SparseLinear(16, 8, { V = 4, M = 8 }), nn.ReLU())
  b:load_state_dict(a:state_dict())
  tap.is(names(b:named_parameters()), "1.values 1.bias", "load_state_dict: no double registration")
  local x = venom.randn(3, 16)
  tap.ok(testutil.max_diff(a(x):totable(), b(x):totable()) < 1e-6, "load_state_dict: same outputs")
end

tap.done()
