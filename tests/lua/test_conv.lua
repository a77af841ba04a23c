-- The convolutional layers from Lua: nn.Conv2d against a direct loop, the
-- pooling and batch norm modules (running statistics saved and loaded),
-- nn.SparseConv2d against the dense convolution of its kept weights (values
-- and gradients), sparsify and prune.GMP turning Conv2d layers into V:N:M
-- ones, and bad input. The ops themselves are checked in tests/c/test_conv.c.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local prune = require "venom.prune"
local sparse = require "venom.sparse"

venom.manual_seed(5)
local max_diff = testutil.max_diff
local function shape_of(t) return table.concat(t:shape(), "x") end

-- nn.Conv2d against the definition, written as loops over Lua tables ----------------
do
  local conv = nn.Conv2d(2, 3, { 3, 2 }, { stride = { 2, 1 }, padding = { 1, 0 }, dilation = { 1, 2 } })
  local x = venom.randn(2, 2, 5, 6)
  local y = conv(x)
  tap.is(shape_of(y), "2x3x3x4", "Conv2d: output size from stride, padding and dilation")
  local xs, w, b, ys = x:totable(), conv.weight:totable(), conv.bias:totable(), y:totable()
  local worst = 0
  for n = 1, 2 do for o = 1, 3 do for i = 1, 3 do for j = 1, 4 do
    local s = b[o]
    for c = 1, 2 do for p = 1, 3 do for q = 1, 2 do
      local iy, ix = (i - 1) * 2 - 1 + (p - 1), (j - 1) + (q - 1) * 2
      if iy >= 0 and iy < 5 and ix >= 0 and ix < 6 then
        s = s + w[o][c][p][q] * xs[n][c][iy + 1][ix + 1]
      end
    end end end
    worst = math.max(worst, math.abs(s - ys[n][o][i][j]))
  end end end end
  tap.ok(worst < 1e-5, "Conv2d: equals the direct loop (max diff " .. worst .. ")")
  local bound = 1 / math.sqrt(2 * 3 * 2)
  tap.ok(conv.weight:abs():max():item() <= bound, "Conv2d: weights within 1/sqrt(fan_in)")
  local dw = nn.Conv2d(4, 4, 3, { groups = 4, padding = 1, bias = false })
  tap.is(shape_of(dw.weight), "4x1x3x3", "depthwise Conv2d: weight (C, 1, kh, kw)")
  tap.is(shape_of(dw(venom.randn(1, 4, 5, 5))), "1x4x5x5", "depthwise Conv2d: same size with padding")
end

-- pooling, flatten ------------------------------------------------------------------
do
  local x = venom.arange(32):float():reshape(1, 2, 4, 4)
  local mp = nn.MaxPool2d(2)(x)
  tap.is(max_diff(mp:totable(), { { { { 5, 7 }, { 13, 15 } }, { { 21, 23 }, { 29, 31 } } } }), 0,
    "MaxPool2d(2): the maximum of each 2×2 window")
  local ap = nn.AvgPool2d(2)(x)
  tap.is(max_diff(ap:totable(), { { { { 2.5, 4.5 }, { 10.5, 12.5 } }, { { 18.5, 20.5 }, { 26.5, 28.5 } } } }), 0,
    "AvgPool2d(2): the mean of each 2×2 window")
  local g = nn.AdaptiveAvgPool2d(1)(x)
  tap.is(max_diff(g:totable(), { { { { 7.5 } }, { { 23.5 } } } }), 0, "AdaptiveAvgPool2d(1): the plane means")
  tap.is(shape_of(nn.Flatten()(x)), "1x32", "Flatten(): (B, C·H·W)")
  tap.is(shape_of(nn.Flatten(1, 2)(x)), "2x4x4", "Flatten(1, 2): the first two dims")
  -- the backward of max pooling goes to the maxima only
  local xg = x:clone():requires_grad_(true)
  nn.MaxPool2d(2)(xg):sum():backward()
  tap.is(xg.grad:sum():item(), 8, "MaxPool2d: one gradient per window")
  tap.is(xg.grad:get(1, 1, 2, 2), 1, "MaxPool2d: the gradient sits on the maximum")
end

-- batch norm: running statistics, eval mode, state_dict round trip ------------------------
do
  local bn = nn.BatchNorm2d(3, { momentum = 0.5 })
  local x = venom.randn(4, 3, 2, 2) * 2 + 1
  local y = bn(x)
  local m = y:mean():item()
  tap.ok(math.abs(m) < 1e-5, "BatchNorm2d (training): output mean 0")
  -- running_mean = 0.5·0 + 0.5·batch mean (channel 1)
  local xt = x:totable()
  local s, n = 0, 0
  for b = 1, 4 do for i = 1, 2 do for j = 1, 2 do s = s + xt[b][1][i][j]; n = n + 1 end end end
  tap.ok(math.abs(bn.running_mean:get(1) - 0.5 * s / n) < 1e-5, "BatchNorm2d: running_mean updated with momentum")
  local sd = bn:state_dict()
  tap.ok(sd.running_mean ~= nil and sd.running_var ~= nil, "BatchNorm2d: running stats in state_dict")
  local dir = testutil.tmpdir()
  venom.save(dir .. "/bn.safetensors", sd)
  local bn2 = nn.BatchNorm2d(3)
  bn2:load_state_dict(venom.load(dir .. "/bn.safetensors"))
  tap.is(max_diff(bn2.running_var:totable(), bn.running_var:totable()), 0,
    "BatchNorm2d: running_var saved and loaded exactly")
  bn:eval(); bn2:eval()
  tap.is(max_diff(bn(x):totable(), bn2(x):totable()), 0, "BatchNorm2d: eval outputs equal after the round trip")
  local before = bn.running_mean:totable()
  bn(x)
  tap.is(max_diff(bn.running_mean:totable(), before), 0, "BatchNorm2d (eval): running stats untouched")
  local b1 = nn.BatchNorm1d(5)
  tap.is(shape_of(b1(venom.randn(8, 5))), "8x5", "BatchNorm1d: (B, C)")
  tap.error_like(function() b1(venom.randn(8, 4)) end, "nn.BatchNorm1d: input has 4 channels",
    "BatchNorm1d: wrong channel count")
  tap.error_like(function() nn.BatchNorm2d(3)(venom.randn(1, 3, 1, 1)) end,
    "more than 1", "BatchNorm2d: one value per channel in training")
  tap.error_like(function() bn2:load_state_dict({ weight = bn.weight, bias = bn.bias,
    running_mean = venom.zeros(4), running_var = bn.running_var }) end,
    "running_mean must be a tensor of shape %(3%)", "BatchNorm2d: a wrong running_mean is refused")
  tap.is(bn2.running_mean:numel(), 3, "BatchNorm2d: a failed load changes nothing")
  os.execute("rm -rf '" .. dir .. "'")
end

-- SparseConv2d: the dense conv of its kept weights, and the gradient at kept places --------
do
  local conv = nn.Conv2d(5, 16, 3, { stride = 2, padding = 1 })
  local sc = sparse.from_layer(conv, { V = 8, M = 8 })
  tap.is(getmetatable(sc), nn.SparseConv2d, "from_layer: a Conv2d becomes a SparseConv2d")
  local x = venom.randn(3, 5, 7, 6)
  local y = sc(x)
  local w = sc:_dense_state().weight:clone():requires_grad_(true)
  local ref = venom.conv2d(x, w, sc.bias, 2, 1)
  tap.ok(max_diff(y:totable(), ref:totable()) < 1e-5, "SparseConv2d: equals conv2d with the kept weights")
  local r = venom.randn(y:shape())
  ;(y * r):sum():backward()
  ;(ref * r):sum():backward()
  local m = sc.matrix
  local got = venom.core.vnm_from_pattern(16, 45, 8, 2, 8, m:columns(), m:indices(),
    sc.values.grad:contiguous()):to_dense()
  local want = w.grad:reshape(16, 45) * sc:mask():float()
  tap.ok(max_diff(got:totable(), want:totable()) < 1e-4,
    "SparseConv2d: the values' gradient is the dense one at the kept weights")
  tap.near(sc:stats().sparsity, 1 - 2 * 6 / 45, 1e-12,
    "SparseConv2d 8:2:8: 2 of each group of 8 of the 45 columns (6 groups, the last short)")

  -- sparsify: Conv2d (groups 1) and Linear become V:N:M; grouped convs stay dense
  local model = nn.Sequential(nn.Conv2d(4, 8, 3), nn.Conv2d(8, 8, 3, { groups = 2 }), nn.Flatten(),
    nn.Linear(8 * 3 * 3, 4))
  local _, names = sparse.sparsify(model, { V = 4, M = 8 })
  tap.is(table.concat(names, ","), "1,4", "sparsify: the Conv2d and the Linear, not the grouped conv")
  tap.is(shape_of(model(venom.randn(2, 4, 7, 7))), "2x4", "sparsify: the model still runs")
end

-- prune.GMP with Conv2d: stages 2:4 → 2:8, the output follows the pruned weights ------------
do
  local model = nn.Sequential(nn.Conv2d(3, 8, 3, { padding = 1 }), nn.ReLU(), nn.Conv2d(8, 8, 3),
    nn.Flatten(), nn.Linear(8 * 4 * 4, 6), nn.Linear(6, 2))
  local opt = optim.SGD(model:parameters(), { lr = 0.01 })
  local gmp = prune.GMP(model, { optimizer = opt, pattern = "8:2:8", n = 3, dt = 1 })
  local x, t = venom.randn(4, 3, 6, 6), venom.tensor({ 1, 2, 2, 1 }):long()
  local first
  for _ = 1, 5 do
    opt:zero_grad()
    local loss = venom.cross_entropy(model(x), t)
    first = first or loss:item()
    loss:backward()
    opt:step()
    gmp:step()
  end
  tap.is(getmetatable(model[1]), nn.SparseConv2d, "GMP: Conv2d 1 is a SparseConv2d")
  -- In the dense shadow (mid-schedule) a Conv2d computes with W ⊙ mask.
  local sm = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8 * 4 * 4, 2))
  local sopt = optim.SGD(sm:parameters(), { lr = 0.01 })
  local sg = prune.GMP(sm, { optimizer = sopt, pattern = "8:2:8", n = 3, dt = 1 })
  sopt:step()
  sg:step() -- the second of 3 events: a middle stage, in the shadow
  local c = sm[1]
  local pruned = rawget(c, "_gmp_pruned")
  tap.ok(pruned ~= nil and shape_of(pruned) == "8x3x3x3", "GMP shadow: a Conv2d's mask has the weight's shape")
  local xs = venom.randn(2, 3, 6, 6)
  local want = venom.conv2d(xs, c.weight:detach() * (pruned * -1 + 1), c.bias:detach())
  tap.ok((c(xs):detach() - want):abs():max():item() < 1e-5,
    "GMP shadow: a Conv2d's forward is the convolution by W ⊙ mask")
  tap.is(getmetatable(model[3]), nn.SparseConv2d, "GMP: Conv2d 3 is a SparseConv2d")
  tap.is(getmetatable(model[6]), nn.Linear, "GMP: the classifier stays dense")
  local rep = gmp:report()
  tap.is(rep[2].pattern, "8:2:8", "GMP: the conv reached 8:2:8")
  tap.ok(rep[2].sparsity >= 0.75, "GMP: the conv is at least 75% sparse")
  local sc = model[3]
  local dense = venom.conv2d(venom.randn(1, 8, 5, 5), sc:_dense_state().weight, sc.bias)
  tap.is(shape_of(dense), "1x8x3x3", "GMP: the pruned conv's dense weight has the conv's shape")
  local cm = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Linear(4, 2))
  tap.error_like(function() prune.GMP(cm, { optimizer = optim.SGD(cm:parameters(), { lr = 0.1 }),
      mode = "nm", pattern = "2:4", n = 1 }) end,
    "is a Conv2d; mode \"nm\" prunes nn.Linear layers only", "GMP: masked modes refuse Conv2d")
  tap.error_like(function() prune.GMP(nn.Sequential(nn.Conv2d(4, 4, 3, { groups = 2 })),
      { optimizer = opt, pattern = "8:2:8", n = 1, layers = { "1" } }) end,
    "only nn.Linear, nn.BitLinear and nn.Conv2d %(groups = 1%)", "GMP: a grouped conv is refused")
end

-- bad input ----------------------------------------------------------------------------
do
  local x = venom.randn(1, 3, 5, 5)
  tap.error_like(function() nn.Conv2d(3, 4, 7)(x) end, "7×7 kernel.*does not fit.*%(1, 3, 5, 5%)",
    "a kernel larger than the padded input")
  -- Padding and dilation count: 5 + 2·1 = 7 fits a 7×7 kernel (one output
  -- pixel) but not an 8×8 one, nor a 3×3 kernel dilated by 4 (extent 9).
  tap.is(shape_of(nn.Conv2d(3, 4, 7, { padding = 1 })(x)), "1x4x1x1", "a kernel as large as the padded input")
  tap.error_like(function() nn.Conv2d(3, 4, 8, { padding = 1 })(x) end,
    "8×8 kernel.*does not fit.*%(1, 3, 5, 5%) padded by %(1, 1%) to 7×7", "a kernel one larger than the padded input")
  tap.error_like(function() nn.Conv2d(3, 4, 3, { padding = 1, dilation = 4 })(x) end,
    "3×3 kernel %(dilation 4×4%) does not fit", "a dilated kernel larger than the padded input")
  tap.error_like(function() nn.SparseConv2d(3, 8, 8, { padding = 1, V = 8 })(x) end,
    "8×8 kernel.*does not fit.*padded by %(1, 1%) to 7×7", "SparseConv2d: a kernel larger than the padded input")
  tap.error_like(function() nn.MaxPool2d(6)(x) end, "max_pool2d: a 6×6 kernel.*does not fit",
    "a pooling window larger than the input")
  tap.error_like(function() nn.Conv2d(3, 4, 3, { stride = 0 }) end,
    "nn.Conv2d: stride must be an integer >= 1", "stride 0 (module)")
  tap.error_like(function() venom.conv2d(x, venom.randn(4, 3, 3, 3), nil, 0) end,
    "conv2d: stride is %(0, 0%)", "stride 0 (op)")
  tap.error_like(function() nn.Conv2d(3, 4, 3, { groups = 2 }) end,
    "must both be divisible by groups %(2%)", "channels not divisible by groups")
  tap.error_like(function() venom.conv2d(x, venom.randn(4, 3, 3, 3), nil, "two") end,
    "stride must be an integer or a {height, width} pair, found string", "a stride that is a string")
  tap.error_like(function() nn.Conv2d(3, 4, 3)(venom.randn(3, 5, 5)) end,
    "expected an input of shape %(B, 3, H, W%), got %(3, 5, 5%)", "a 3-d input")
  tap.error_like(function() nn.MaxPool2d(3, { padding = 2 })(x) end, "more than half the kernel",
    "pool padding over half the kernel")
  tap.error_like(function() nn.MaxPool2d({ 2 }) end, "kernel_size must be an integer >= 1 or a pair",
    "a kernel size that is not a pair")
  tap.error_like(function() nn.SparseConv2d(3, 8, 3, { weight = venom.randn(8, 3, 2, 2) }) end,
    "weight must be a tensor of shape %(8, 3, 3, 3%)", "SparseConv2d: a weight of the wrong shape")
  tap.error_like(function() nn.Conv2d(1, 4, 3, { bias = "no" }) end,
    "nn.Conv2d: bias must be true or false, got string \"no\"", "bias = \"no\" is refused")
  tap.error_like(function() nn.Conv2d(1, 4, 3, { bias = 0 }) end,
    "nn.Conv2d: bias must be true or false, got 0", "bias = 0 is refused")
  tap.ok(nn.Conv2d(1, 4, 3, { bias = false }).bias == nil, "bias = false: no bias")
end

tap.done()
