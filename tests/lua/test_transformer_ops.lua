-- venom.embedding, venom.layer_norm, venom.causal_attention and
-- venom.bias_gelu from Lua:
-- 1-based ids, optional affine parameters, gradients reaching every input,
-- and bad arguments raising Lua errors (never crashing).
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"

local w = venom.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 } })
w:requires_grad_(true)
local ids = venom.tensor({ { 3, 1 }, { 3, 3 } }, "i64")
local e = venom.embedding(w, ids)
local t = e:totable()
tap.ok(t[1][1][1] == 5 and t[1][2][2] == 2 and t[2][2][1] == 5, "embedding: ids are 1-based rows")
e:sum():backward()
local g = w.grad:totable()
tap.ok(g[1][1] == 1 and g[2][1] == 0 and g[3][2] == 3, "embedding: repeated ids accumulate")
tap.error_like(function() venom.embedding(w, venom.tensor({ 1, 4 }, "i64")) end,
  "ids%[2%] = 4 is out of range %(expected 1..3%)", "embedding: id past V")
tap.error_like(function() venom.embedding(w, venom.tensor({ 0 }, "i32")) end,
  "ids%[1%] = 0 is out of range", "embedding: id 0")
tap.error_like(function() venom.embedding(w, venom.tensor({ 1.5 })) end, "integer tensor",
  "embedding: float ids")
tap.error_like(function() venom.embedding(venom.zeros(3), ids) end, "%(V, D%)",
  "embedding: 1-D weight")

local x = venom.tensor({ { 1, 2, 3, 4 }, { -1, 0, 1, 5 } })
local y = venom.layer_norm(x):totable()
-- row 1: mean 2.5, variance 1.25
tap.near(y[1][1], (1 - 2.5) / math.sqrt(1.25 + 1e-5), 1e-5,
  "layer_norm: default eps 1e-5, no affine")
local gamma, beta = venom.tensor({ 2, 2, 2, 2 }), venom.tensor({ 1, 1, 1, 1 })
local ya = venom.layer_norm(x, gamma, beta, 1e-3):totable()
tap.near(ya[1][4], 2 * (4 - 2.5) / math.sqrt(1.25 + 1e-3) + 1, 1e-5, "layer_norm: gamma, beta, eps")
tap.error_like(function() venom.layer_norm(x, venom.ones(3)) end, "gamma", "layer_norm: bad gamma")
tap.error_like(function() venom.layer_norm(x, nil, nil, -1) end, "eps", "layer_norm: bad eps")

venom.manual_seed(1)
local q, k, v = venom.randn(1, 2, 3, 4), venom.randn(1, 2, 3, 4), venom.randn(1, 2, 3, 4)
for _, p in ipairs({ q, k, v }) do p:requires_grad_(true) end
local o = venom.causal_attention(q, k, v)
tap.is(table.concat(o:shape(), ","), "1,2,3,4", "causal_attention: shape")
tap.near(o:totable()[1][2][1][3], v:totable()[1][2][1][3], 1e-6,
  "causal_attention: first position copies v")
o:sum():backward()
tap.ok(q.grad and k.grad and v.grad, "causal_attention: gradients reach q, k and v")
tap.error_like(function() venom.causal_attention(q, k, venom.randn(1, 2, 4, 4)) end, "one shape",
  "causal_attention: shapes differ")
tap.error_like(function() venom.causal_attention(q, k) end, "#3.*expected a tensor",
  "causal_attention: missing v")

local xb, bb = venom.randn(3, 5), venom.randn(5)
bb:requires_grad_(true)
local fused, plain = venom.bias_gelu(xb, bb), (xb + bb):gelu()
tap.is((fused - plain):abs():max():item(), 0, "bias_gelu: gelu(x + bias) exactly")
fused:sum():backward()
tap.ok(bb.grad ~= nil, "bias_gelu: the gradient reaches the bias")
tap.error_like(function() venom.bias_gelu(xb, venom.randn(4)) end, "bias_gelu.*%(3, 5%)",
  "bias_gelu: a bias of the wrong width")
tap.error_like(function() venom.bias_gelu(xb) end, "#2.*expected a tensor", "bias_gelu: missing bias")

-- gelu far out (kernels/scalar.h, VN_GELU_FLAT): 0 below −10 and x above 10,
-- gradients 0 and 1, on the vectorized path (contiguous), the map's strided
-- path (a transposed view) and one element; the cubic overflowed there before
-- (gelu'(−1e14) was −960, gelu'(inf) NaN, gelu(−inf) −inf).
local far = { -math.huge, -2 ^ 127, -2 ^ 46, -11, 11, 2 ^ 66, math.huge }
local want_y = { 0, 0, 0, 0, 11, 2 ^ 66, math.huge }
local want_d = { 0, 0, 0, 0, 1, 1, 1 }
local function far_case(make, label)
  local ok = true
  for i, v in ipairs(far) do
    local leaf, x = make(v)
    local y = x:gelu()
    y:sum():backward()
    local yv, dv = y:reshape({ -1 }):totable()[1], leaf.grad:reshape({ -1 }):totable()[1]
    if yv ~= want_y[i] or dv ~= want_d[i] then
      ok = false
      tap.diag(("%s: x = %g gave gelu %g, gelu' %g"):format(label, v, yv, dv))
    end
  end
  tap.ok(ok, "gelu far out: 0 / x and gradients 0 / 1, " .. label)
end
far_case(function(v)
  local l = venom.full({ 3, 40 }, v):requires_grad_(true); return l, l
end, "contiguous")
far_case(function(v)
  local l = venom.full({ 40, 3 }, v):requires_grad_(true); return l, l:transpose(1, 2)
end, "strided")
far_case(function(v)
  local l = venom.full({ 1 }, v):requires_grad_(true); return l, l
end, "one element")
tap.ok(venom.tensor({ 0 / 0 }):gelu():item() ~= venom.tensor({ 0 / 0 }):gelu():item(),
  "gelu: NaN stays NaN")

do -- one element takes the vector kernels too: the same bits as a row of them
  local same = true
  for _, v in ipairs({ -9.5, -0.7, 0.3, 3 }) do
    local a = venom.tensor({ v }):requires_grad_(true)
    local ya = a:gelu(); ya:sum():backward()
    local b = venom.full({ 1, 32 }, v):requires_grad_(true)
    local yb = b:gelu(); yb:sum():backward()
    same = same and ya:item() == yb:totable()[1][1] and a.grad:item() == b.grad:totable()[1][1]
  end
  tap.ok(same, "gelu of one element and its gradient: the bits of a contiguous row")
end
do -- every layout to float accuracy against the formula in double, also where
   -- tanh u nears −1 (x/2·(1 + tanh u) in floats lost 35% at x = −5)
  local xs = { -9, -5, -3, -1, -0.25, 0.5, 2, 6 }
  local function ref(x)
    local k, c = math.sqrt(2 / math.pi), 0.044715
    local s = 1 / (1 + math.exp(-2 * k * (x + c * x ^ 3))) -- (1 + tanh u)/2, no cancelling
    return x * s, s + 2 * k * x * s * (1 - s) * (1 + 3 * c * x * x)
  end
  local worst = 0
  for _, layout in ipairs({ "contiguous", "strided", "one" }) do
    for _, v in ipairs(xs) do
      local leaf = venom.full(layout == "one" and { 1 } or { 40, 3 }, v):requires_grad_(true)
      local x = layout == "strided" and leaf:transpose(1, 2) or leaf
      local y = x:gelu(); y:sum():backward()
      local yv, dv = y:reshape({ -1 }):totable()[1], leaf.grad:reshape({ -1 }):totable()[1]
      local ry, rd = ref(v)
      local e = math.max(math.abs(yv - ry) / math.abs(ry), math.abs(dv - rd) / math.max(math.abs(rd), 1e-30))
      if e > 1e-4 then tap.diag(("%s x = %g: gelu %.9g want %.9g, grad %.9g want %.9g"):format(layout, v, yv, ry, dv, rd)) end
      worst = math.max(worst, e)
    end
  end
  tap.ok(worst < 1e-4, ("gelu and its gradient in every layout: worst relative error %.2e"):format(worst))
end
tap.done()
