-- venom.nn: module API, layers against plain-Lua references, bad input, and
-- an end-to-end smoke test (a small MLP learns a synthetic problem).
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"

venom.manual_seed(1)

local max_diff = testutil.max_diff

-- Plain-Lua y = x·Wᵀ + b on tables.
local function ref_linear(x, w, b)
  local y = {}
  for n = 1, #x do
    y[n] = {}
    for o = 1, #w do
      local s = b and b[o] or 0
      for i = 1, #x[n] do s = s + x[n][i] * w[o][i] end
      y[n][o] = s
    end
  end
  return y
end

local function names(list)
  local out = {}
  for i, np in ipairs(list) do out[i] = np[1] end
  return table.concat(out, " ")
end

-- Linear ----------------------------------------------------------------------------
do
  local l = nn.Linear(4, 3)
  local ps = l:parameters()
  tap.is(#ps, 2, "Linear: two parameters")
  tap.is(table.concat(ps[1]:shape(), "x"), "3x4", "Linear: weight is (out, in)")
  tap.is(table.concat(ps[2]:shape(), "x"), "3", "Linear: bias is (out)")
  tap.ok(ps[1]:requires_grad() and ps[2]:requires_grad(), "Linear: parameters require grad")
  tap.is(l:num_parameters(), 15, "Linear: num_parameters")
  tap.is(#nn.Linear(4, 3, { bias = false }):parameters(), 1, "Linear{bias=false}: weight only")

  local x = venom.randn(5, 4)
  local y = l(x)
  local want = ref_linear(x:totable(), l.weight:totable(), l.bias:totable())
  tap.ok(max_diff(y:totable(), want) < 1e-5, "Linear: forward equals x·Wᵀ + b")

  local nb = nn.Linear(4, 3, { bias = false })
  tap.ok(max_diff(nb(x):totable(), ref_linear(x:totable(), nb.weight:totable())) < 1e-5,
    "Linear{bias=false}: forward equals x·Wᵀ")

  -- Init: U(−1/√in, 1/√in). With 100·50 draws the extremes come close to the bound.
  local big = nn.Linear(100, 50)
  local wmax = big.weight:abs():max():item()
  local bmax = big.bias:abs():max():item()
  tap.ok(wmax <= 0.1 + 1e-7 and wmax > 0.099, "Linear init: |W| ≤ 1/√in and reaches near it")
  tap.ok(bmax <= 0.1 + 1e-7, "Linear init: |b| ≤ 1/√in")
  tap.ok(math.abs(big.weight:mean():item()) < 0.005, "Linear init: mean near 0")
end

-- Module tree: names, sharing, train/eval ----------------------------------------------
do
  local seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
  tap.is(names(seq:named_parameters()), "1.weight 1.bias 3.weight 3.bias",
    "Sequential: named_parameters in order")
  tap.is(#seq:children(), 3, "Sequential: children")
  tap.ok(seq[1] == seq:children()[1], "Sequential: model[1] is the first child")

  local Net = nn.Module:extend("Net")
  function Net:__init()
    nn.Module.__init(self)
    self:add_module("layers", nn.Sequential(nn.Linear(2, 2), nn.Tanh()))
    self:add_module("head", nn.Linear(2, 1, { bias = false }))
    self:register_parameter("scale", venom.ones(1))
  end
  function Net:forward(x) return self.head(self.layers(x)) * self.scale end
  local net = Net()
  tap.is(names(net:named_parameters()), "scale layers.1.weight layers.1.bias head.weight",
    "custom module: own parameters first, then children, dotted names")
  tap.is(net:num_parameters(), 1 + 4 + 2 + 2, "custom module: num_parameters")
  local s = tostring(net)
  tap.ok(s:find("Net(", 1, true) and s:find("(layers): Sequential(", 1, true)
    and s:find("    (1): Linear(in_features=2, out_features=2, bias=true)", 1, true)
    and s:find("(head): Linear(in_features=2, out_features=1, bias=false)", 1, true),
    "tostring shows the module tree")
  local out = net(venom.randn(3, 2))
  tap.is(table.concat(out:shape(), "x"), "3x1", "custom module: __call runs forward")

  -- A weight shared by two layers is one parameter; its gradient is the sum
  -- of both uses.
  local a, b = nn.Linear(3, 3), nn.Linear(3, 3)
  b:register_parameter("weight", a.weight)
  local shared = nn.Sequential(a, b)
  tap.is(#shared:parameters(), 3, "shared weight appears once in parameters()")
  tap.is(names(shared:named_parameters()), "1.weight 1.bias 2.bias",
    "shared weight named once, under its first name")
  local x = venom.randn(2, 3)
  local one = a(x):sum()
  one:backward()
  local g1 = a.weight.grad:totable()
  a:zero_grad()
  tap.ok(a.weight.grad == nil, "zero_grad drops the gradient")
  local two = a(x):sum() + b(x):sum()
  two:backward()
  local g2 = a.weight.grad:totable()
  local doubled = {}
  for i, row in ipairs(g1) do
    doubled[i] = {}
    for j, v in ipairs(row) do doubled[i][j] = 2 * v end
  end
  tap.ok(max_diff(g2, doubled) < 1e-5, "shared weight accumulates the gradient of both uses")
  shared:zero_grad()

  -- train()/eval() reach every descendant and switch Dropout.
  local dm = nn.Sequential(nn.Linear(8, 8), nn.Sequential(nn.Dropout(0.5)))
  tap.ok(dm.training and dm[2][1].training, "modules start in training mode")
  tap.ok(dm:eval() == dm, "eval returns the module")
  tap.ok(not dm.training and not dm[2].training and not dm[2][1].training,
    "eval reaches nested modules")
  local ones = venom.ones(64, 64)
  local drop = dm[2][1]
  tap.ok(max_diff(drop(ones):totable(), ones:totable()) == 0, "Dropout in eval mode is the identity")
  dm:train()
  tap.ok(dm[2][1].training, "train() switches back")
  local d = drop(ones)
  local zeros = d:eq(venom.zeros(64, 64)):sum():item()
  local twos = d:eq(ones * 2):sum():item()
  tap.is(zeros + twos, 64 * 64, "Dropout(0.5) in train mode: every element is 0 or 1/(1−p)")
  tap.ok(zeros > 1800 and zeros < 2300, "Dropout(0.5): about half are zeroed (" .. zeros .. ")")
  dm:train(false)
  tap.ok(not drop.training, "train(false) is eval")
end

-- Sequential equals manual composition; activations and losses --------------------------
do
  local l1, l2 = nn.Linear(5, 7), nn.Linear(7, 2)
  local seq = nn.Sequential(l1, nn.GELU(), l2, nn.Sigmoid())
  local x = venom.randn(4, 5)
  local manual = l2(l1(x):gelu()):sigmoid()
  tap.ok(max_diff(seq(x):totable(), manual:totable()) < 1e-6, "Sequential forward equals composition")
  local s2 = nn.Sequential():add(nn.Tanh()):add(nn.ReLU())
  tap.ok(max_diff(s2(x):totable(), x:tanh():relu():totable()) == 0, "Sequential:add appends")

  local logits = venom.tensor({ { 1, 2, 3 }, { 0.5, -1, 0 } })
  local target = venom.tensor({ 3, 1 }, "i64")
  local function ce(row, k)
    local m, s = -math.huge, 0
    for _, v in ipairs(row) do m = math.max(m, v) end
    for _, v in ipairs(row) do s = s + math.exp(v - m) end
    return -(row[k] - m - math.log(s))
  end
  local l = logits:totable()
  local per = { ce(l[1], 3), ce(l[2], 1) }
  tap.near(nn.CrossEntropyLoss()(logits, target):item(), (per[1] + per[2]) / 2, 1e-6,
    "CrossEntropyLoss: mean of −log softmax at 1-based targets")
  tap.near(nn.CrossEntropyLoss({ reduction = "sum" })(logits, target):item(), per[1] + per[2],
    1e-6, "CrossEntropyLoss{reduction='sum'}")
  local a, b = venom.tensor({ 1, 2, 3 }), venom.tensor({ 1.5, 2, 1 })
  tap.near(nn.MSELoss()(a, b):item(), (0.25 + 0 + 4) / 3, 1e-6, "MSELoss: mean of squares")
  tap.ok(tostring(nn.CrossEntropyLoss()):find("reduction=mean", 1, true), "loss tostring")
end

-- nn.mlp: Linear layers with a ReLU between two of them ------------------------------------
do
  local m = nn.mlp({ 6, 5, 4, 3 })
  local kinds = {}
  for i, c in ipairs(m:children()) do kinds[i] = getmetatable(c).__name end
  tap.is(table.concat(kinds, " "), "Linear ReLU Linear ReLU Linear", "mlp: the layers in order")
  tap.ok(m[3].in_features == 5 and m[3].out_features == 4, "mlp: the widths")
  tap.error_like(function() nn.mlp({ 6 }) end, "nn%.mlp: sizes must be a list of at least two",
    "mlp: one width is refused")
  tap.error_like(function() nn.mlp({ 6, 0 }) end, "out_features must be a positive integer, got 0",
    "mlp: a bad width is named")
end

-- Bad input ---------------------------------------------------------------------------------
tap.error_like(function() nn.Linear(-3, 2) end,
  "nn%.Linear: in_features must be a positive integer, got %-3", "Linear: negative in_features")
tap.error_like(function() nn.Linear(2, 2.5) end,
  "out_features must be a positive integer, got 2%.5", "Linear: fractional out_features")
tap.error_like(function() nn.Linear("4", 2) end,
  "in_features must be a positive integer, got string \"4\"", "Linear: string in_features")
local line = debug.getinfo(1, "l").currentline + 1
tap.error_like(function() nn.Linear(-3, 2) end, "test_nn%.lua:" .. line .. ": nn%.Linear",
  "constructor errors point at the caller's line")
tap.error_like(function() nn.Linear(4, 3)(venom.randn(2, 5)) end,
  "nn%.Linear: input last dimension is 5 but in_features is 4 %(input shape %(2, 5%)%)",
  "Linear: wrong input width names both widths")
tap.error_like(function() nn.Linear(4, 3)(42) end, "expected a tensor input, got number",
  "Linear: a number instead of a tensor")
tap.error_like(function() nn.Dropout(1.5) end, "nn%.Dropout: p must be a number in %[0, 1%), got 1%.5",
  "Dropout: p out of range")
tap.error_like(function() nn.Sequential(nn.ReLU(), 5) end,
  "nn%.Sequential: argument 2 is not a module %(got number%)", "Sequential: non-module argument")
tap.error_like(function() nn.CrossEntropyLoss({ reduction = "avg" }) end,
  "reduction must be 'mean', 'sum' or 'none', got avg", "loss: bad reduction")
tap.error_like(function() nn.Module():forward() end, "Module: this module has no forward",
  "base Module has no forward")

-- End to end: an MLP learns four Gaussian blobs ---------------------------------------------
do
  venom.manual_seed(0)
  local N, D, C = 256, 16, 4
  -- Class k's points sit around centre k (a random direction of length 3).
  local centres = venom.randn(C, D) * 0.75
  local labels = {}
  for i = 1, N do labels[i] = (i - 1) % C + 1 end
  local y = venom.tensor(labels, "i64")
  local x = centres:index_select(1, y) + venom.randn(N, D)
  local model = nn.Sequential(nn.Linear(D, 32), nn.ReLU(), nn.Linear(32, C))
  local crit = nn.CrossEntropyLoss()
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2 })
  local first, last
  for step = 1, 40 do
    local loss = crit(model(x), y)
    opt:zero_grad()
    loss:backward()
    opt:step()
    if step == 1 then first = loss:item() end
    last = loss:item()
  end
  local acc = model(x):argmax(2):eq(y):sum():item() / N
  tap.ok(last < 0.4 * first, ("smoke test: loss falls from %.3f to %.3f in 40 steps"):format(first, last))
  tap.ok(acc > 0.9, ("smoke test: training accuracy %.3f > 0.9"):format(acc))
end

tap.done()
