-- nn.SparseInputLinear (dynamic activation sparsity): the output and every
-- gradient equal those of the plain ops (Linear of relu(x) or relu(x)²) for
-- clustered zeros, the condensed and the dense path; the running stats
-- against a count; bad options and inputs.
package.path = "tests/lua/?.lua;" .. package.path
local T = require "tap"
local U = require "testutil"
local venom = require "venom"
local nn = require "venom.nn"

venom.manual_seed(3)
T.plan(26)

-- x (70, 48): rows 1-32 only use columns 1-8, rows 33-70 random signs.
local function make_x()
  local x = venom.randn(70, 48)
  local keep = venom.zeros(70, 48)
  keep:narrow(1, 1, 32):narrow(2, 1, 8):fill_(1)
  keep:narrow(1, 33, 38):fill_(1)
  return (x * keep - (1 - keep)):detach()
end

for _, case in ipairs({ { "relu", 1 }, { "relu2", 1 }, { "relu", 0 } }) do
  local act, dense_above = case[1], case[2]
  local layer = nn.SparseInputLinear(48, 24, { activation = act, tile_rows = 16, dense_above = dense_above })
  local x = make_x():requires_grad_(true)
  local y = layer(x)
  local gy = venom.randn(70, 24)
  y:backward(gy)
  -- the same with the plain ops, on copies of the parameters
  local w = layer.weight:detach():clone():requires_grad_(true)
  local b = layer.bias:detach():clone():requires_grad_(true)
  local x2 = x:detach():clone():requires_grad_(true)
  local h = x2:relu()
  if act == "relu2" then h = h * h end
  local y2 = venom.linear(h, w, b)
  y2:backward(gy)
  local tag = ("%s, dense_above %g"):format(act, dense_above)
  T.ok(U.max_diff(y, y2) < 1e-4, tag .. ": output equals Linear(act(x))")
  T.ok(U.max_diff(x.grad, x2.grad) < 1e-4 and U.max_diff(layer.weight.grad, w.grad) < 1e-4 and
       U.max_diff(layer.bias.grad, b.grad) < 1e-4, tag .. ": dx, dW, db equal the plain ops'")
  T.is(layer.last_stats.dense, dense_above == 0, tag .. ": the path taken")
end

-- Stats: density is the share of positive x; tile_density counted by hand.
local layer = nn.SparseInputLinear(48, 4, { tile_rows = 16 })
local x = make_x()
layer(x)
layer(x)
local s = layer:activation_stats()
T.is(s.calls, 2, "activation_stats: calls")
T.near(s.density, x:gt(0):float():sum():item() / (70 * 48), 1e-9, "activation_stats: density")
-- rows 1-32 (2 tiles) keep at most 8 columns; count the kept pairs by hand
local kept = 0
for t = 0, 4 do
  local rows = math.min(16, 70 - 16 * t)
  local any = x:narrow(1, 16 * t + 1, rows):gt(0):float():sum(1)
  kept = kept + any:gt(0):float():sum():item()
end
T.near(s.tile_density, kept / (5 * 48), 1e-9, "activation_stats: tile_density")
layer:reset_stats()
T.is(layer:activation_stats().calls, 0, "reset_stats")

-- Bad input.
T.error_like(function() nn.SparseInputLinear(4, 2, { activation = "gelu" }) end,
  'activation gelu, expected "relu" or "relu2"', "activation checked")
T.error_like(function() nn.SparseInputLinear(4, 2, { dense_above = 2 }) end,
  "dense_above 2, expected a number in %[0, 1%]", "dense_above checked")
T.error_like(function() nn.SparseInputLinear(4, 2, { tile_rows = 0 }) end, "tile_rows", "tile_rows checked")
T.error_like(function() nn.SparseInputLinear(4, 2, { tile = 3 }) end, "tile", "unknown option")
T.error_like(function() nn.SparseInputLinear(4, 2)(venom.zeros(3, 5)) end,
  "expected an input of shape %(..., 4%), got %(3, 5%)", "wrong input width")
T.error_like(function() venom.act_sparse_linear(venom.zeros(3, 4), venom.zeros(2, 4), nil, "tanh") end,
  'activation "tanh"', "core: activation name checked")

-- The GPT's MLP with relu2: the fused op equals the same modules in steps,
-- activation_stats has one entry per block, a bad activation is refused.
package.path = "./?.lua;" .. package.path
local GPT = require "models.gpt"
local gpt = GPT({ vocab_size = 32, block_size = 16, n_layer = 2, n_head = 2, n_embd = 16,
                  activation = "relu2" })
local mlp = gpt.blocks[1].mlp
local hx = venom.randn(2, 16, 16)
local fused = mlp(hx)
local h = mlp.fc(hx):relu()
local steps = mlp.proj(h * h)
T.ok(U.max_diff(fused, steps) < 1e-5, "GPT relu2 MLP: the fused op equals fc, relu², proj")
local idx = venom.randint(1, 33, { 2, 16 }, "i64")
gpt:loss(idx, idx):backward()
local st = gpt:activation_stats({ reset = true })
T.is(#st, 2, "activation_stats: one entry per block")
T.ok(st[2].calls == 1 and st[2].density > 0 and st[2].density <= st[2].tile_density,
  "activation_stats: a call counted, density <= tile share")
T.is(gpt:activation_stats()[1].calls, 0, "activation_stats: reset")
T.error_like(function() GPT({ activation = "tanh" }) end, 'activation tanh, expected "gelu", "relu" or "relu2"',
  "GPT: activation checked")

-- A variable-length batch: the mask's real rows equal the unmasked op's,
-- the padding rows are exactly 0, and no gradient comes from them.
local vx = venom.randn(3, 5, 8)
local vw1, vb1, vw2, vb2 = venom.randn(24, 8), venom.randn(24), venom.randn(6, 24), venom.randn(6)
local vmask = venom.tensor({ { 1, 1, 1, 0, 0 }, { 1, 1, 1, 1, 1 }, { 1, 0, 0, 0, 0 } }, "u8")
local vin = vx:clone():requires_grad_(true)
local ym = venom.act_sparse_mlp(vin, vw1, vb1, vw2, vb2, "relu2", 2, nil, vmask)
local yall = venom.act_sparse_mlp(vx, vw1, vb1, vw2, vb2, "relu2", 2)
local m3 = vmask:float():reshape(3, 5, 1)
ym:backward(venom.ones(3, 5, 6))
T.ok(U.max_diff(ym, yall * m3) < 1e-5 and U.max_diff(ym * (1 - m3), venom.zeros(3, 5, 6)) == 0
     and U.max_diff(vin.grad * (1 - m3), venom.zeros(3, 5, 8)) == 0,
  "act_sparse_mlp mask: real rows as unmasked, padding rows (y and dx) exactly 0")
T.error_like(function() venom.act_sparse_mlp(vx, vw1, vb1, vw2, vb2, "relu", nil, nil, venom.zeros({ 3, 4 }, "u8")) end,
  "mask %(3, 4%) must have the input's leading dims %(input %(3, 5, 8%)%)", "act_sparse_mlp: mask shape checked")
