-- Interop: state dicts with numbers (sparse layers' V, N, M) through
-- venom.save / venom.load and back into a model; F64 files from an
-- independent writer load as f32 (inf past f32's range); PyTorch's 0-based
-- module names to venom's 1-based ones and back.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"
local nn = require "venom.nn"

local dir = testutil.tmpdir()
local function path(name) return dir .. "/" .. name end

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return table.concat(out, " ")
end

-- A sparse model's state dict through a file -----------------------------------------------
local function sparse_model()
  return nn.Sequential(nn.SparseLinear(16, 8, { V = 4, M = 8 }), nn.ReLU(), nn.Linear(8, 3))
end

do
  venom.manual_seed(5)
  local a = sparse_model()
  local sd = a:state_dict()
  tap.is(sd["1.V"], 4, "a sparse layer's state dict holds V as a number")
  venom.save(path("sparse.st"), sd)
  local tensors, meta = venom.load(path("sparse.st"))
  tap.ok(meta["1.V"] == "4" and meta["1.N"] == "2" and meta["1.M"] == "8",
    "V, N, M are in the file's __metadata__ under their state-dict names")
  tap.is(sorted_keys(tensors), "1.bias 1.columns 1.indices 1.values 3.bias 3.weight",
    "the tensors table lists the tensors only")
  tap.is(tensors["1.V"], "4", "the tensors table reads the metadata too")

  venom.manual_seed(6)
  local b = sparse_model()
  local x = venom.randn(5, 16)
  tap.ok(testutil.max_diff(a(x):totable(), b(x):totable()) > 1e-3, "a fresh model differs")
  local missing, unexpected = b:load_state_dict(tensors)
  tap.is(#missing + #unexpected, 0, "load_state_dict(venom.load(path)): nothing missing or unexpected")
  tap.ok(testutil.max_diff(a(x):totable(), b(x):totable()) == 0, "the loaded model gives the same outputs")
  tap.ok(testutil.max_diff(b[1]:mask():totable(), a[1]:mask():totable()) == 0,
    "the loaded model has the saved sparsity pattern")

  venom.manual_seed(7)
  local c = sparse_model()
  c:load_state_dict(venom.load(path("sparse.st")))
  tap.ok(testutil.max_diff(a(x):totable(), c(x):totable()) == 0,
    "model:load_state_dict(venom.load(path)) in one call (the metadata is not taken for opts)")

  local wrong = nn.Sequential(nn.SparseLinear(16, 8, { V = 2, M = 8 }), nn.ReLU(), nn.Linear(8, 3))
  tap.error_like(function() wrong:load_state_dict(venom.load(path("sparse.st"))) end,
    "the checkpoint holds a 4:2:8 layer but this one is 2:2:8", "another layout: the metadata is read")

  -- The rule is for state dicts; a plain table of tensors still refuses numbers.
  tap.error_like(function() venom.save(path("x.st"), { w = 3 }) end,
    "tensors%['w'%] is a number, expected a tensor", "a plain table: numbers still refused")
  tap.error_like(function() venom.save(path("x.st"), sd, { ["1.V"] = 9 }) end,
    "'1.V' is both in the state dict and in the metadata", "a name in both tables is refused")
  venom.save(path("epoch.st"), sd, { epoch = 3 })
  local _, m2 = venom.load(path("epoch.st"))
  tap.ok(m2.epoch == "3" and m2["1.M"] == "8", "extra metadata joins the state dict's")
  tap.error_like(function() venom.save(path("x.st"), sd, 5) end, "bad argument #3",
    "a metadata that is not a table is still refused")
end

-- F64 from an independent writer, PyTorch's names -------------------------------------------
local python_ok = os.execute("python3 -c 'import json, struct' >/dev/null 2>&1")
if python_ok == 0 or python_ok == true then
  local file = path("torch.safetensors")
  local rc = os.execute(("python3 tests/python/write_safetensors_torch.py '%s'"):format(file))
  tap.ok(rc == 0 or rc == true, "the Python writer ran")
  local sd, meta = venom.load(file)
  tap.is(meta.format, "pt", "Python-written metadata")
  local wide = sd.wide
  tap.is(wide:dtype(), "f32", "an F64 tensor loads as f32")
  local w = wide:totable()
  local f32 = function(v) return venom.tensor({ v }):totable()[1] end -- rounded to f32
  tap.ok(w[1] == math.huge and w[2] == -math.huge, "F64 beyond f32's range becomes ±inf")
  tap.ok(w[3] == 0 and w[4] ~= w[4] and w[5] == f32(0.1), "F64 underflow → 0, NaN stays, 0.1 rounds")
  tap.is(w[6], math.huge, "F64 exactly halfway past f32's largest value rounds to inf (ties to even)")

  -- The same values as the writer's ramp(n, scale, shift).
  local function ramp(n, scale, shift)
    local out = {}
    for i = 0, n - 1 do out[i + 1] = i * scale + shift end
    return out
  end
  local function rows(flat, r, c)
    local out = {}
    for i = 1, r do
      out[i] = {}
      for j = 1, c do out[i][j] = flat[(i - 1) * c + j] end
    end
    return out
  end
  local w1, b1 = rows(ramp(12, 1 / 7, -0.75), 3, 4), ramp(3, 0.1, -0.1)
  local w2, b2 = rows(ramp(6, -0.25, 0.5), 2, 3), { 0.125, -0.375 }

  sd.wide = nil
  local named = venom.from_torch_names(sd)
  tap.is(sorted_keys(named), "1.bias 1.weight 3.bias 3.weight", "from_torch_names: 0-based → 1-based")
  local model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
  model:load_state_dict(named)
  tap.ok(testutil.max_diff(model[1].weight:totable(), venom.tensor(w1):totable()) == 0,
    "the F64 weight loaded equals the writer's values rounded to f32")
  -- Plain-Lua forward: relu(x·W1ᵀ + b1)·W2ᵀ + b2.
  local x = { { 1, -2, 0.5, 3 }, { -1, 0.25, 2, -0.5 } }
  local want = {}
  for n = 1, 2 do
    local h = {}
    for o = 1, 3 do
      local s = f32(b1[o])
      for i = 1, 4 do s = s + x[n][i] * f32(w1[o][i]) end
      h[o] = math.max(s, 0)
    end
    want[n] = {}
    for o = 1, 2 do
      local s = b2[o]
      for i = 1, 3 do s = s + h[i] * w2[o][i] end
      want[n][o] = s
    end
  end
  tap.ok(testutil.max_diff(model(venom.tensor(x)):totable(), want) < 1e-5,
    "the PyTorch-named F64 model computes the reference outputs")

  -- And back: venom's names → PyTorch's, through a file an independent reader checks.
  local back = venom.to_torch_names(model:state_dict())
  tap.is(sorted_keys(back), "0.bias 0.weight 2.bias 2.weight", "to_torch_names: 1-based → 0-based")
  venom.save(path("back.safetensors"), back)
  local p = io.popen(("python3 tests/python/check_safetensors.py '%s'"):format(path("back.safetensors")))
  local out = p:read("*a")
  p:close()
  tap.ok(out:find("^0%.bias F32 3 ") and out:find("\n2%.weight F32 2x3 0%.5 0%.25 0 "),
    "Python reads the 0-based names and the values")
else
  tap.skip("python3 is not installed", 10)
end

-- The name rule --------------------------------------------------------------------------------
do
  local t = venom.ones(1)
  local sd = { ["layers.0.attn.10.weight"] = t, ["head.bias"] = t, ["0"] = 7, ["x1.2y.3"] = t }
  local v = venom.from_torch_names(sd)
  tap.is(sorted_keys(v), "1 head.bias layers.1.attn.11.weight x1.2y.4",
    "from_torch_names: each integer component + 1, nothing else")
  tap.is(v["1"], 7, "from_torch_names: values are kept")
  tap.is(sorted_keys(venom.to_torch_names(v)), sorted_keys(sd), "to_torch_names is the inverse")
  tap.error_like(function() venom.to_torch_names({ ["0.weight"] = t }) end,
    "to_torch_names: '0.weight' has the index 0; venom's module indices count from 1",
    "to_torch_names: a 0 index is not a venom name")
  tap.error_like(function() venom.from_torch_names(5) end, "expected a state dict", "not a table")
  tap.error_like(function() venom.from_torch_names({ t }) end, "names must be strings",
    "a list is refused")
end

os.execute("rm -rf '" .. dir .. "'")
tap.done()
