-- venom.vnm_mlp (the fused V:N:M MLP, engine/sparse/vnm_linear.c) against
-- the three ops it replaces, nn.SparseLinear → GELU → nn.SparseLinear: the
-- output, the input's gradient and proj's gradients bit for bit, fc's
-- (its values' gradient always by dot products here, where the ops may
-- take the SDDMM by rows; its bias's summed lane by lane) to float
-- rounding; on shapes where the batch, the columns and the rows do
-- not fill the kernels' panels, groups and blocks; y under the bf16
-- forward where the CPU has it; bad arguments raise
-- errors that name the layer and the shapes.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local nn = require "venom.nn"

local function maxdiff(a, b) return (a - b):abs():max():item() end

venom.manual_seed(11)
-- { leading dims of x, in, hidden, out, V, M, biases }
local cases = {
  { { 3, 37 }, 20, 36, 20, 16, 8, true }, -- 111 rows; K 20 and hidden 36 pad their groups (M 8)
  { { 130 }, 64, 256, 64, 64, 8, true },  -- three panels, the last of 2 rows
  { { 2, 5 }, 16, 48, 24, 32, 4, false }, -- no biases; V 32 over 48 rows: a partial block
}
for _, c in ipairs(cases) do
  local lead, IN, HID, OUT, V, M, bias = c[1], c[2], c[3], c[4], c[5], c[6], c[7]
  local what = ("vnm_mlp x (%s, %d), %d → %d → %d, %d:2:%d%s"):format(table.concat(lead, ", "), IN,
    IN, HID, OUT, V, M, bias and "" or ", no biases")
  local fc = nn.SparseLinear(IN, HID, { V = V, M = M, bias = bias })
  local proj = nn.SparseLinear(HID, OUT, { V = V, M = M, bias = bias })
  if bias then -- nonzero biases, so that a bias misplaced in the panels shows
    venom.no_grad(function()
      fc.bias:copy_(venom.randn(HID) * 0.5)
      proj.bias:copy_(venom.randn(OUT) * 0.5)
    end)
  end
  local shape = { unpack(lead) }
  shape[#shape + 1] = IN
  local x0 = venom.randn(unpack(shape))
  local xa, xb = x0:clone():requires_grad_(true), x0:clone():requires_grad_(true)
  local ya = venom.vnm_mlp(xa, fc.matrix, fc.values, fc.bias, proj.matrix, proj.values, proj.bias)
  local yb = proj(nn.GELU()(fc(xb)))
  local want_shape = { unpack(lead) }
  want_shape[#want_shape + 1] = OUT
  tap.is(table.concat(ya:shape(), ","), table.concat(want_shape, ","), what .. ": shape")
  tap.is(maxdiff(ya, yb), 0, what .. ": y bit for bit")
  local w = venom.randn(unpack(want_shape))
  local function grads(y, x)
    for _, p in ipairs({ fc.values, proj.values, fc.bias, proj.bias }) do
      if p then p.grad = nil end
    end
    ;(y * w):sum():backward()
    local g = { x = x.grad:clone(), v1 = fc.values.grad:clone(), v2 = proj.values.grad:clone() }
    if bias then g.b1, g.b2 = fc.bias.grad:clone(), proj.bias.grad:clone() end
    return g
  end
  local ga, gb = grads(ya, xa), grads(yb, xb)
  tap.is(maxdiff(ga.x, gb.x), 0, what .. ": dx bit for bit")
  tap.is(maxdiff(ga.v2, gb.v2), 0, what .. ": proj's dvalues bit for bit")
  local scale = gb.v1:abs():max():item()
  tap.ok(scale > 0 and maxdiff(ga.v1, gb.v1) <= 1e-5 * scale,
    ("%s: fc's dvalues within 1e-5 of the ops' (%.3g, scale %.3g)"):format(what,
      maxdiff(ga.v1, gb.v1), scale))
  if bias then
    local bs = gb.b1:abs():max():item()
    tap.ok(bs > 0 and maxdiff(ga.b1, gb.b1) <= 1e-5 * bs,
      ("%s: fc's dbias within 1e-5 of the ops' (%.3g, scale %.3g)"):format(what,
        maxdiff(ga.b1, gb.b1), bs))
    tap.is(maxdiff(ga.b2, gb.b2), 0, what .. ": proj's dbias bit for bit")
  end
  -- without a gradient anywhere: the same y, no graph
  local yn = venom.no_grad(function()
    return venom.vnm_mlp(x0, fc.matrix, fc.values, fc.bias, proj.matrix, proj.values, proj.bias)
  end)
  tap.is(maxdiff(yn, yb), 0, what .. ": under no_grad the same y")
end

-- under the bf16 forward (where the CPU has it) the fused op's panel output
-- goes through the bf16 tile kernel: the same y as the three ops
if pcall(venom.set_vnm_precision, "bf16") then
  local fc = nn.SparseLinear(64, 256, { V = 64, M = 8 })
  local proj = nn.SparseLinear(256, 64, { V = 64, M = 8 })
  local x = venom.randn(130, 64)
  local ya = venom.vnm_mlp(x, fc.matrix, fc.values, fc.bias, proj.matrix, proj.values, proj.bias)
  local yb = proj(nn.GELU()(fc(x)))
  venom.set_vnm_precision("f32")
  local yf = proj(nn.GELU()(fc(x)))
  tap.is(maxdiff(ya, yb), 0, "vnm_mlp under set_vnm_precision('bf16'): the three ops' y bit for bit")
  tap.ok(maxdiff(ya, yf) > 0, "vnm_mlp under bf16: not the f32 y (the bf16 kernel ran)")
else
  tap.skip("no avx512_bf16 here: the bf16 forward is not available", 2)
end

-- bad arguments
local fc = nn.SparseLinear(16, 32, { V = 16, M = 8 })
local proj = nn.SparseLinear(32, 16, { V = 16, M = 8 })
local other = nn.SparseLinear(24, 16, { V = 16, M = 8 })
local x = venom.randn(4, 16)
tap.error_like(function()
  venom.vnm_mlp(x, fc.matrix, fc.values, fc.bias, other.matrix, other.values, other.bias)
end, "vnm_mlp: proj has 24 in features, expected fc's 32 out features", "proj's K not fc's R")
tap.error_like(function()
  venom.vnm_mlp(venom.randn(4, 12), fc.matrix, fc.values, fc.bias, proj.matrix, proj.values, proj.bias)
end, "vnm_mlp: input of shape %(4, 12%) has 12 features.*expected 16", "x's width")
tap.error_like(function()
  venom.vnm_mlp(x, fc.matrix, fc.values, venom.zeros(31), proj.matrix, proj.values, proj.bias)
end, "vnm_mlp: fc: bias of shape %(31,%), expected %(32,%)", "fc's bias shape")
tap.error_like(function()
  venom.vnm_mlp(x, fc.matrix, proj.values, fc.bias, proj.matrix, proj.values, proj.bias)
end, "vnm_mlp: fc: values of shape %(16, 8%), expected %(32, 4%)", "fc's values shape")
tap.error_like(function()
  venom.vnm_mlp(x, fc.matrix, fc.values, fc.bias, "proj", proj.values, proj.bias)
end, "V:N:M sparse matrix", "proj not a matrix")
tap.done()
