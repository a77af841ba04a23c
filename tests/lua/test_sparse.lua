-- venom.sparse: V:N:M matrices from Lua, nn.SparseLinear against a dense
-- reference (values and gradients), training with SGD/Adam/AdamW keeps the
-- pattern and lowers the loss, sparsify, and bad input.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local sparse = require "venom.sparse"

venom.manual_seed(3)

local max_diff = testutil.max_diff

local function shape_of(t) return table.concat(t:shape(), "x") end

-- The matrix ------------------------------------------------------------------------
do
  local R, K, V, M = 10, 21, 4, 8 -- neither divides evenly
  local W = venom.randn(R, K)
  local S = sparse.from_dense(W, { V = V, M = M })
  local w, mask, dense = W:totable(), S:mask():totable(), S:to_dense():totable()
  local exact, per_group, shared = true, true, true
  for r = 1, R do
    for c = 1, K do
      local want = mask[r][c] == 1 and w[r][c] or 0
      exact = exact and dense[r][c] == want
    end
    for g0 = 1, K, M do
      local kept, real = 0, math.min(M, K - g0 + 1)
      for c = g0, g0 + real - 1 do kept = kept + mask[r][c] end
      per_group = per_group and kept == math.min(2, real)
    end
  end
  for r0 = 1, R, V do
    for g0 = 1, K, M do
      local cols = 0
      for c = g0, math.min(K, g0 + M - 1) do
        local used = false
        for r = r0, math.min(R, r0 + V - 1) do used = used or mask[r][c] == 1 end
        if used then cols = cols + 1 end
      end
      shared = shared and cols <= 4
    end
  end
  tap.ok(exact, "to_dense is W masked, exactly")
  tap.ok(per_group, "every row keeps 2 of each group of M (fewer only where the group is short)")
  tap.ok(shared, "the rows of a block share at most 4 columns per group")

  local st = S:stats()
  local nnz = 0
  for r = 1, R do for c = 1, K do nnz = nnz + mask[r][c] end end
  tap.is(st.nnz, nnz, "stats: nnz counts the mask")
  tap.ok(st.V == V and st.N == 2 and st.M == M and st.rows == R and st.cols == K,
    "stats: V, N, M and the shape")
  tap.near(st.sparsity, 1 - nnz / (R * K), 1e-12, "stats: sparsity")
  tap.is(st.bytes, st.value_bytes + st.index_bytes + st.column_bytes, "stats: bytes add up")
  tap.is(st.value_bytes, R * 2 * 3 * 4, "stats: value bytes, 2 per group of 3 groups")
  tap.is(shape_of(S:values()), "10x6", "values are (R, 2·⌈K/M⌉)")
  tap.ok(tostring(S):find("4:2:8", 1, true) ~= nil, "tostring names V:N:M")
end

-- SparseLinear against a dense reference ----------------------------------------------
-- The reference is nn.Linear with the decompressed weight: same outputs, and
-- the dense weight gradient sampled at the kept positions is the values'.
local function kept_columns(mask, r, g, M, K)
  local cols = {}
  for c = (g - 1) * M + 1, math.min(K, g * M) do
    if mask[r][c] == 1 then cols[#cols + 1] = c end
  end
  return cols
end

do
  local IN, OUT, V, M = 37, 19, 8, 16
  local layer = nn.SparseLinear(IN, OUT, { V = V, M = M })
  local names = {}
  for i, np in ipairs(layer:named_parameters()) do names[i] = np[1] end
  tap.is(table.concat(names, " "), "values bias", "SparseLinear: parameters values and bias")
  tap.is(shape_of(layer.values), "19x6", "SparseLinear: values (out, 2·⌈in/M⌉)")

  local ref = nn.Linear(IN, OUT)
  venom.no_grad(function()
    ref.weight:copy_(layer:to_dense())
    ref.bias:copy_(layer.bias)
  end)
  local x = venom.randn(3, 5, IN) -- a 3-D input: leading dims are batch
  local y, yr = layer(x), ref(x)
  tap.is(shape_of(y), "3x5x19", "SparseLinear: output shape")
  tap.ok(max_diff(y:totable(), yr:totable()) < 1e-5, "SparseLinear: forward equals the dense masked layer")

  local xs, xr = x:clone():requires_grad_(true), x:clone():requires_grad_(true)
  local t = venom.randn(3, 5, OUT)
  local l1 = (layer(xs) * t):sum()
  local l2 = (ref(xr) * t):sum()
  l1:backward()
  l2:backward()
  tap.ok(max_diff(xs.grad:totable(), xr.grad:totable()) < 1e-5, "SparseLinear: dX equals the dense one")
  tap.ok(max_diff(layer.bias.grad:totable(), ref.bias.grad:totable()) < 1e-5,
    "SparseLinear: db equals the dense one")
  local mask, gv, gw = layer:mask():totable(), layer.values.grad:totable(), ref.weight.grad:totable()
  local worst = 0
  for r = 1, OUT do
    for g = 1, math.ceil(IN / M) do
      local cols = kept_columns(mask, r, g, M, IN)
      for slot = 1, 2 do
        local want = cols[slot] and gw[r][cols[slot]] or 0 -- 0: a value in padding
        worst = math.max(worst, math.abs(gv[r][2 * (g - 1) + slot] - want))
      end
    end
  end
  tap.ok(worst < 1e-4, "SparseLinear: dvalues are the dense dW at the kept positions")

  tap.error_like(function() return layer(venom.randn(2, 36)) end,
    "input last dimension is 36 but in_features is 37", "SparseLinear: wrong input width")
  tap.ok(nn.SparseLinear(8, 4, { bias = false }).bias == nil, "SparseLinear{bias=false}: no bias")

  -- Values that start to require a gradient after the forward (which then
  -- kept no X for them) still get theirs, as a dense matmul's weight does.
  local S = venom.vnm_from_dense(venom.randn(8, 16), 4, 2, 8)
  local v, xg = S:values():clone(), venom.randn(3, 16):requires_grad_(true)
  local yl = venom.vnm_linear(xg, S, v)
  v:requires_grad_(true)
  yl:sum():backward()
  local ones = venom.ones(3, 8)
  tap.ok(v.grad ~= nil and max_diff(v.grad:totable(), venom.vnm_sddmm(S, ones, xg:detach()):totable()) < 1e-6,
    "vnm_linear: values made trainable after the forward get dYᵀ·X at the kept positions")
  local want = venom.vnm_spmm_t(S, v:detach(), ones)
  tap.ok(max_diff(xg.grad:totable(), want:totable()) < 1e-6, "... and x gets dY·W")
end

-- Training keeps the pattern and lowers the loss, with each optimizer -------------------
local function train(make_opt, name)
  venom.manual_seed(11)
  local model = nn.Sequential(nn.SparseLinear(24, 32, { V = 8, M = 8 }), nn.ReLU(),
                              nn.Linear(32, 3))
  local x = venom.randn(64, 24)
  local target = x:narrow(2, 1, 3):argmax(2) -- a learnable rule
  local crit = nn.CrossEntropyLoss()
  local opt = make_opt(model:parameters())
  local mask0 = model[1]:mask():totable()
  local first, last
  for step = 1, 30 do
    local loss = crit(model(x), target)
    opt:zero_grad()
    loss:backward()
    opt:step()
    if step == 1 then first = loss:item() end
    last = loss:item()
  end
  tap.ok(last < 0.8 * first, ("%s: the loss goes down (%.3f → %.3f)"):format(name, first, last))
  tap.ok(max_diff(model[1]:mask():totable(), mask0) == 0, name .. ": the pattern is unchanged")
  local dense, mask = model[1]:to_dense():totable(), mask0
  local zeros = true
  for r = 1, 32 do for c = 1, 24 do
    if mask[r][c] == 0 then zeros = zeros and dense[r][c] == 0 end
  end end
  tap.ok(zeros, name .. ": pruned weights stay zero")
  return opt, model
end

do
  train(function(p) return optim.SGD(p, { lr = 0.1, momentum = 0.9 }) end, "SGD")
  local adam, model = train(function(p) return optim.Adam(p, { lr = 0.01 }) end, "Adam")
  local st = adam.state[model[1].values]
  tap.ok(st and shape_of(st.exp_avg) == shape_of(model[1].values)
    and shape_of(st.exp_avg_sq) == "32x6", "Adam: state has the values' shape")
  train(function(p) return optim.AdamW(p, { lr = 0.01 }) end, "AdamW")
end

-- sparsify ---------------------------------------------------------------------------------
do
  local model = nn.Sequential(nn.Linear(20, 16), nn.ReLU(),
                              nn.Sequential(nn.Linear(16, 16), nn.Tanh()), nn.Linear(16, 4))
  local w1, b1 = model[1].weight, model[1].bias
  local want = sparse.from_dense(w1, { V = 4, M = 4 }):to_dense():totable()
  local _, replaced = sparse.sparsify(model, { V = 4, M = 4, skip = { "4" } })
  tap.is(table.concat(replaced, " "), "1 3.1", "sparsify: replaces nested Linear modules, skips '4'")
  tap.is(getmetatable(model[1]).__name, "SparseLinear", "sparsify: model[1] is a SparseLinear")
  tap.is(getmetatable(model[4]).__name, "Linear", "sparsify: the skipped layer stays dense")
  tap.ok(max_diff(model[1]:to_dense():totable(), want) == 0, "sparsify: initialised by magnitude")
  tap.ok(model[1].bias == b1, "sparsify: keeps the bias tensor")
  tap.is(model[3][1].M, 4, "sparsify: options reach nested layers")
  tap.error_like(function() sparse.sparsify(model, { skip = { "7" } }) end,
    "skip names '7'", "sparsify: an unknown skip name")
end

-- A failing sparsify leaves the model as it was and names the layer.
do
  local m = nn.Sequential(nn.Linear(8, 8), nn.Linear(3, 8))
  tap.error_like(function() sparse.sparsify(m, { V = 4, M = 4 }) end, "layer '2'",
    "sparsify names the layer it cannot convert")
  tap.ok(getmetatable(m[1]) == nn.Linear and getmetatable(m[2]) == nn.Linear,
    "a failed sparsify changes no layer")
  local tied = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
  tied[3].weight = tied[1].weight
  tap.error_like(function() sparse.sparsify(tied, { V = 4, M = 4 }) end,
    "layers '1' and '3' share one weight", "sparsify refuses tied weights (they would untie)")
  tap.ok(getmetatable(tied[1]) == nn.Linear, "... and leaves them dense")
  tap.ok(sparse.cuda_layout_error(64, 8) == nil and sparse.cuda_layout_error(128, 128) == nil
    and sparse.cuda_layout_error(256, 8) == nil,
    "cuda_layout_error: 64:2:8, 128:2:128 and 256:2:8 train on CUDA")
  tap.ok(sparse.cuda_layout_error(8, 8) and sparse.cuda_layout_error(48 + 1, 8) and
    sparse.cuda_layout_error(64, 256), "cuda_layout_error: V=8, V=49 and M=256 do not")
  tap.error_like(function() nn.SparseLinear.from_linear(nil) end,
    "from_linear: expected an nn.Linear, got nil", "from_linear(nil)")
  tap.error_like(function() sparse.sparsify(m, { M = "8" }) end,
    "M must be an integer, got string \"8\"", "a string M names its type")
end

-- Saving and loading: the pattern travels with the values ------------------------------------
-- A model built with another seed picks another pattern; loading a state
-- dict (in memory, and through a checkpoint file) must give back the saved
-- matrix exactly, on the same values tensor the optimizer holds.
do
  local function make(seed)
    venom.manual_seed(seed)
    return nn.Sequential(nn.SparseLinear(30, 20, { V = 4, M = 8 }), nn.ReLU(), nn.Linear(20, 2))
  end
  local a, b = make(21), make(22)
  tap.ok(max_diff(a[1]:mask():totable(), b[1]:mask():totable()) > 0, "two seeds, two patterns")
  local sd = a:state_dict()
  tap.ok(venom.is_tensor(sd["1.columns"]) and venom.is_tensor(sd["1.indices"]) and sd["1.M"] == 8,
    "state_dict holds the pattern and V, N, M")
  local opt = optim.Adam(b:parameters(), { lr = 0.01 })
  local values = b[1].values
  b:load_state_dict(sd)
  tap.ok(b[1].values == values, "load_state_dict keeps the values tensor the optimizer holds")
  tap.ok(max_diff(b[1]:to_dense():totable(), a[1]:to_dense():totable()) == 0,
    "load_state_dict restores the saved matrix exactly")
  local x = venom.randn(3, 30)
  tap.ok(max_diff(b(x):totable(), a(x):totable()) == 0, "the loaded model computes the same outputs")
  local loss = b(x):sum()
  opt:zero_grad(); loss:backward(); opt:step()
  tap.ok(max_diff(b[1]:mask():totable(), a[1]:mask():totable()) == 0,
    "an optimizer step after loading keeps the loaded pattern")

  local path = os.tmpname()
  local c = make(23)
  venom.checkpoint.save(path, { model = a })
  venom.checkpoint.load(path, { model = c })
  os.remove(path)
  tap.ok(max_diff(c[1]:to_dense():totable(), a[1]:to_dense():totable()) == 0,
    "a checkpoint file restores the sparse layer exactly")

  local other = a:state_dict()
  other["1.M"] = 16
  tap.error_like(function() make(24):load_state_dict(other) end,
    "checkpoint holds a 4:2:16 layer but this one is 4:2:8",
    "a checkpoint of another layout is refused (an optimizer would lose the layer)")
  local bad = a:state_dict()
  bad["1.columns"] = bad["1.columns"]:narrow(1, 1, 2)
  tap.error_like(function() make(24):load_state_dict(bad) end, "columns of shape",
    "a state dict whose arrays do not match its layout is refused")

  -- A load that fails at a later layer leaves the earlier ones as they were
  -- (their pattern would otherwise be the file's, their values their own).
  local function two(seed, V3)
    venom.manual_seed(seed)
    return nn.Sequential(nn.SparseLinear(32, 16, { V = 8, M = 8 }), nn.ReLU(),
      nn.SparseLinear(16, 8, { V = V3, M = 8 }))
  end
  local src, dst = two(31, 8), two(32, 4)
  local mask, dense = dst[1]:mask(), dst[1]:to_dense()
  tap.error_like(function() dst:load_state_dict(src:state_dict()) end,
    "holds a 8:2:8 layer but this one is 4:2:8", "a layout mismatch in layer 3 is refused")
  tap.ok(max_diff(dst[1]:mask():totable(), mask:totable()) == 0 and
    max_diff(dst[1]:to_dense():totable(), dense:totable()) == 0,
    "... and layer 1 keeps its own pattern and weights")
  local wrong = src:state_dict()
  wrong["3.values"] = venom.zeros(8, 3)
  local src2 = two(33, 8)
  mask = src2[1]:mask()
  tap.error_like(function() src2:load_state_dict(wrong) end, "shape mismatch for '3.values'",
    "values of the wrong shape are refused")
  tap.ok(max_diff(src2[1]:mask():totable(), mask:totable()) == 0,
    "... after the patterns were read, yet no layer changed")
  local partial = a:state_dict()
  partial["1.values"] = nil
  local keep = make(25)
  mask = keep[1]:mask()
  tap.error_like(function() keep:load_state_dict(partial, { strict = false }) end,
    "has part of module '1' but not 1.values",
    "strict = false: a pattern without its values is refused (old numbers, new places)")
  tap.ok(max_diff(keep[1]:mask():totable(), mask:totable()) == 0, "... and the layer is unchanged")
  local none = a:state_dict()
  for _, k in ipairs({ "1.values", "1.bias", "1.columns", "1.indices", "1.V", "1.N", "1.M" }) do
    none[k] = nil
  end
  keep:load_state_dict(none, { strict = false })
  tap.ok(max_diff(keep[1]:mask():totable(), mask:totable()) == 0 and
    max_diff(keep[3].weight:totable(), a[3].weight:totable()) == 0,
    "strict = false without any of layer 1: layer 1 stays, the others load")
  local bad_v = a:state_dict()
  bad_v["1.V"] = 4.5
  tap.error_like(function() make(24):load_state_dict(bad_v) end,
    "V, N and M must be integers, got 4.5, 2, 8", "a fractional V in a state dict")
end

-- Bad input ---------------------------------------------------------------------------------
do
  local W = venom.randn(8, 16)
  tap.error_like(function() sparse.from_dense(W, { M = 3 }) end, "M must be >= 4, got M=3", "M < 4")
  tap.error_like(function() sparse.from_dense(W, { V = 0 }) end, "V must be >= 1, got V=0", "V < 1")
  tap.error_like(function() sparse.from_dense(W, { N = 1 }) end, "N must be 2.*got N=1", "N ~= 2")
  tap.error_like(function() sparse.from_dense(W, { M = 32 }) end,
    "16 columns, fewer than M=32", "fewer columns than M")
  tap.error_like(function() sparse.from_dense(W, { M = 2.5 }) end, "M must be an integer", "M not an integer")
  tap.error_like(function() sparse.from_dense(W, 8) end, "options must be a table", "options not a table")
  local bad = W:clone()
  bad:set(2, 5, 0 / 0)
  tap.error_like(function() sparse.from_dense(bad) end, "weight %(2, 5%) is nan", "NaN weight: its 1-based position")
  bad:set(2, 5, math.huge)
  tap.error_like(function() sparse.from_dense(bad) end, "weight %(2, 5%) is inf", "Inf weight")
  tap.error_like(function() nn.SparseLinear(3, 4, { M = 8 }) end, "3 columns, fewer than M=8",
    "SparseLinear narrower than M")
  tap.error_like(function() nn.SparseLinear(16, 4, { weight = venom.randn(4, 15) }) end,
    "weight must be a tensor of shape %(4, 16%)", "SparseLinear: weight of the wrong shape")
  local S = sparse.from_dense(W)
  tap.error_like(function() venom.vnm_linear(venom.randn(2, 16), W, S:values()) end,
    "expected a V:N:M sparse matrix", "vnm_linear: a tensor where the matrix goes")
  tap.error_like(function() venom.vnm_linear(venom.randn(2, 16), S, venom.randn(8, 3)) end,
    "values of shape %(8, 3%), expected %(8, 4%)", "vnm_linear: values of the wrong shape")
  tap.error_like(function() venom.vnm_linear(venom.randn(2, 12), S, S:values()) end,
    "has 12 features", "vnm_linear: input of the wrong width")
end

-- The main job with --sparse ------------------------------------------------------------------
-- On a slice of Fashion-MNIST (skipped without the dataset package): the run
-- reports its sparse layers, and one stopped after epoch 1 and resumed from
-- its checkpoint ends with the same checkpoint, byte for byte, as one that
-- ran both epochs (values, pattern and AdamW state of the values' shape).
do
  local data = require "venom.data"
  local f = io.open(data.FASHION_MNIST_ROOT .. "/train-labels-idx1-ubyte.gz", "rb")
  if not f then
    tap.skip("dataset-fashion-mnist is not installed", 4)
  else
    f:close()
    local exe = os.getenv("VENOM_EXE") or arg[-1]
    local function tutorial(args)
      local p = io.popen(("'%s' tutorials/01-fashion-mnist.lua --limit 600 --hidden 32 "
        .. "--no-cosine --batch-size 100 %s 2>&1; echo \"rc=$?\""):format(exe, args))
      local out = p:read("*a")
      p:close()
      return out, tonumber(out:match("rc=(%d+)\n$"))
    end
    local slurp = require("testutil").slurp
    local a, b = os.tmpname(), os.tmpname()
    local out, rc = tutorial("--epochs 2 --sparse 8:2:8 --save " .. a)
    tap.ok(rc == 0 and out:find("layer 3: 32 × 32, 256 of 1024 weights kept (25.0%)", 1, true)
      and out:find("sparse 8:2:8: test accuracy", 1, true), "tutorial --sparse: trains and reports")
    local _, rc1 = tutorial("--epochs 1 --sparse 8:2:8 --save " .. b)
    local _, rc2 = tutorial("--epochs 2 --sparse 8:2:8 --resume " .. b .. " --save " .. b)
    local full, resumed = slurp(a), slurp(b)
    tap.ok(rc1 == 0 and rc2 == 0 and full and full == resumed,
      "tutorial --sparse: a resumed run ends with the same checkpoint")
    os.remove(a)
    os.remove(b)
    local err, rc3 = tutorial("--epochs 1 --sparse 64:3:8")
    tap.ok(rc3 == 2 and err:find("--sparse must be V:2:M", 1, true), "tutorial --sparse 64:3:8: a usage error")
    local _, rc4 = tutorial("--epochs 1 --sparse 8:2:64")
    tap.is(rc4, 1, "tutorial --sparse with M wider than a layer: an error, not a crash")
  end
end

-- The forward's and dX's precision (venom.set_vnm_precision) -------------------------
do
  tap.is(venom.vnm_precision(), "f32", "vnm_precision: f32 by default")
  tap.error_like(function() venom.set_vnm_precision("fp16") end,
    'precision must be "f32" or "bf16", found "fp16"', "set_vnm_precision: a bad string names both")
  tap.error_like(function() venom.set_vnm_precision() end,
    'precision must be "f32" or "bf16", found no value', "set_vnm_precision: no argument")
  tap.error_like(function() venom.set_vnm_precision({}) end,
    'precision must be "f32" or "bf16", found table', "set_vnm_precision: a table names both")
  tap.error_like(function() venom.set_vnm_precision("bf16\0x") end, "precision must be",
    "set_vnm_precision: a string with a NUL after bf16 is not bf16")
  tap.is(venom.vnm_precision(), "f32", "set_vnm_precision: a refused call changes nothing")
  local layer = nn.SparseLinear(96, 40, { V = 8, M = 8 })
  local x = venom.randn(70, 96)
  local y32 = layer(x)
  local function dx_of() -- the input gradient of sum(layer(x))
    local xg = x:clone():requires_grad_(true)
    layer(xg):sum():backward()
    return xg.grad
  end
  local dx32 = dx_of()
  if pcall(venom.set_vnm_precision, "bf16") then
    tap.is(venom.vnm_precision(), "bf16", "vnm_precision: bf16 once set")
    local y16 = layer(x)
    venom.set_vnm_precision("f32")
    -- |y| ~ 5 here; bf16 rounds each operand to 2^-8 relative
    local d = max_diff(y16, y32)
    tap.ok(d > 0 and d < 0.15, ("bf16 forward near f32 (max diff %g)"):format(d))
    tap.is(max_diff(layer(x), y32), 0, "back to f32: the same outputs bit for bit")
    venom.set_vnm_precision("bf16")
    local dx16 = dx_of()
    venom.set_vnm_precision("f32")
    -- dY is all ones here (exact in bf16); the values round to 2^-8 relative
    local dd, scale = max_diff(dx16, dx32), max_diff(dx32, dx32 * 0)
    tap.ok(dd > 0 and dd < 0.02 * scale, ("bf16 dX near f32 (max diff %g, max |dx| %g)"):format(dd, scale))
    tap.is(max_diff(dx_of(), dx32), 0, "back to f32: the same dX bit for bit")
  else
    tap.error_like(function() venom.set_vnm_precision("bf16") end, "avx512_bf16",
      "set_vnm_precision('bf16') without avx512_bf16: an error that says so")
    tap.skip("no avx512_bf16 on this CPU", 4)
  end
  tap.is(venom.vnm_precision(), "f32", "vnm_precision: f32 again")
end

-- How dX runs on CUDA (venom.set_vnm_cuda_dx): only the setting is checked
-- here; tests/gpu/test_vnm.lua runs both paths against the CPU.
do
  tap.is(venom.vnm_cuda_dx(), "auto", "vnm_cuda_dx: auto by default")
  tap.error_like(function() venom.set_vnm_cuda_dx("cublas") end,
    'path must be "auto", "sparse" or "dense", found "cublas"', "set_vnm_cuda_dx: a bad string names all three")
  tap.error_like(function() venom.set_vnm_cuda_dx("dense\0x") end, "path must be",
    "set_vnm_cuda_dx: a string with a NUL after dense is not dense")
  tap.is(venom.vnm_cuda_dx(), "auto", "set_vnm_cuda_dx: a refused call changes nothing")
  local layer = nn.SparseLinear(96, 40, { V = 8, M = 4 })
  local function dx()
    local x = venom.randn(7, 96):requires_grad_(true)
    layer(x):sum():backward()
    return x.grad
  end
  venom.manual_seed(5)
  local want = dx()
  venom.set_vnm_cuda_dx("dense")
  tap.is(venom.vnm_cuda_dx(), "dense", "vnm_cuda_dx: dense once set")
  venom.manual_seed(5)
  tap.is(max_diff(dx(), want), 0, "set_vnm_cuda_dx: the CPU's dx is the same bit for bit")
  venom.set_vnm_cuda_dx("auto")
  tap.is(venom.vnm_cuda_dx(), "auto", "vnm_cuda_dx: auto again")
end

tap.done()
