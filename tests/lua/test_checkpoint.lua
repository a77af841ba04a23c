-- Checkpoints: venom.save / venom.load round trips (every dtype, 0-d and
-- empty tensors, byte for byte), metadata, RNG state, model / optimizer /
-- schedule state dicts with their errors, module extra-state hooks, and
-- resume equality: a run restored from a checkpoint computes the same losses,
-- bit for bit, as the run that never stopped.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local data = require "venom.data"
local checkpoint = require "venom.checkpoint"

local dir = testutil.tmpdir()
local function path(name) return dir .. "/" .. name end

local slurp = testutil.slurp

local function shape(t) return table.concat(t:shape(), "x") end

-- Exact equality of two (nested) tables of numbers; NaN equals NaN.
local function same(a, b)
  if type(a) ~= "table" then return a == b or (a ~= a and b ~= b) end
  if type(b) ~= "table" or #a ~= #b then return false end
  for i = 1, #a do
    if not same(a[i], b[i]) then return false end
  end
  return true
end

local function same_tensor(a, b)
  return venom.is_tensor(b) and a:dtype() == b:dtype() and shape(a) == shape(b)
    and same(a:totable(), b:totable())
end

-- venom.save / venom.load ---------------------------------------------------------
do
  local ts = {
    f32 = venom.tensor({ { 1.5, -0.0, math.huge }, { 0 / 0, 1e-45, -3.25e38 } }),
    i32 = venom.tensor({ -2147483648, -1, 0, 2147483647 }, "i32"),
    i64 = venom.tensor({ { -2 ^ 53, -2 }, { 1, 2 ^ 53 } }, "i64"),
    u8 = venom.tensor({ 0, 1, 127, 128, 255 }, "u8"),
    scalar = venom.full({}, 42),
    empty = venom.zeros({ 0, 3 }, { dtype = "i64" }),
    ["layers.1.weight_t"] = venom.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }):t(),
  }
  local meta = { epoch = 3, lr = 0.1, third = 1 / 3, tiny = 1e-300, big = 2 ^ 53,
                 flag = true, note = "café ünïcode" }
  venom.save(path("all.st"), ts, meta)
  local got, m = venom.load(path("all.st"))
  local n = 0
  for name, t in pairs(ts) do
    n = n + 1
    tap.ok(same_tensor(t, got[name]), "round trip of '" .. name .. "' (" .. t:dtype() .. " "
      .. shape(t) .. ")")
  end
  local count = 0
  for _ in pairs(got) do count = count + 1 end
  tap.is(count, n, "load returns exactly the tensors saved")
  tap.is(got.scalar:dim(), 0, "a 0-d tensor stays 0-d")
  tap.is(shape(got.empty), "0x3", "an empty tensor keeps its shape")
  tap.is(m.epoch, "3", "metadata: an integer")
  tap.is(tonumber(m.lr), 0.1, "metadata: 0.1 reads back exactly")
  tap.is(m.lr, "0.1", "metadata: 0.1 is written as 0.1")
  tap.is(tonumber(m.third), 1 / 3, "metadata: 1/3 reads back exactly")
  tap.is(tonumber(m.tiny), 1e-300, "metadata: 1e-300 reads back exactly")
  tap.is(tonumber(m.big), 2 ^ 53, "metadata: 2^53 reads back exactly")
  tap.is(m.flag, "true", "metadata: a boolean")
  tap.is(m.note, "café ünïcode", "metadata: a UTF-8 string")

  venom.save(path("again.st"), got, m)
  tap.ok(slurp(path("all.st")) == slurp(path("again.st")),
    "saving what was loaded gives the same file, byte for byte")
  venom.save(path("order.st"), ts, meta)
  tap.ok(slurp(path("all.st")) == slurp(path("order.st")), "the same tables give the same bytes")
end

-- bad arguments and bad files -------------------------------------------------------
do
  local t = venom.ones(2)
  tap.error_like(function() venom.save(path("x.st"), { t }) end,
    "keys must be names %(strings%), found a number key", "save: a list is refused")
  tap.error_like(function() venom.save(path("x.st"), { w = 3 }) end,
    "tensors%['w'%] is a number, expected a tensor", "save: a non-tensor value")
  local gone = venom.ones(2)
  gone:free()
  tap.error_like(function() venom.save(path("x.st"), { w = gone }) end,
    "tensors%['w'%] was freed", "save: a freed tensor")
  tap.error_like(function() venom.save(path("x.st"), { w = t }, { k = {} }) end,
    "metadata%['k'%] is a table, expected a string, number or boolean", "save: a table in metadata")
  tap.error_like(function() venom.save(path("x.st"), { ["a\0b"] = t }) end,
    "contains a NUL byte", "save: a name with a NUL byte")
  tap.error_like(function() venom.save(path("x.st"), { __metadata__ = t }) end,
    "__metadata__\" is reserved", "save: the reserved name")
  tap.error_like(function() venom.save(dir .. "/no/such/x.st", { w = t }) end,
    "no/such/x.st", "save: an unwritable path names it")
  tap.error_like(function() venom.load(path("missing.st")) end,
    "missing.st': cannot open", "load: a missing file names it")
  local f = assert(io.open(path("bad.st"), "wb"))
  f:write("\17\0\0\0\0\0\0\0{\"w\":{\"dtype\":1}}")
  f:close()
  tap.error_like(function() venom.load(path("bad.st")) end,
    "tensor 'w': dtype must be a string", "load: a malformed file is a Lua error naming the tensor")
end

-- RNG state -------------------------------------------------------------------------
do
  venom.manual_seed(11)
  local s = venom.get_rng_state()
  tap.is(s:dtype() .. " " .. shape(s), "i64 4", "get_rng_state: an i64 tensor of 4")
  local a = venom.rand(5):totable()
  venom.rand(3)
  venom.set_rng_state(s)
  tap.ok(same(venom.rand(5):totable(), a), "set_rng_state replays the same draws")
  tap.error_like(function() venom.set_rng_state(venom.zeros(4)) end,
    "expected the i64 tensor of 4 elements", "set_rng_state: wrong dtype")
  tap.error_like(function() venom.set_rng_state(venom.zeros({ 4 }, { dtype = "i64" })) end,
    "all zeros", "set_rng_state: the all-zero state")
end

-- model state dicts -----------------------------------------------------------------
local Net = nn.Module:extend("Net")
function Net:__init(width)
  nn.Module.__init(self)
  self:add_module("layers", nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 3)))
  self:register_parameter("scale", venom.ones(3))
end
function Net:forward(x) return self.layers(x) * self.scale end

local function names_of(sd)
  local out = {}
  for k in pairs(sd) do out[#out + 1] = k end
  table.sort(out)
  return table.concat(out, " ")
end

do
  venom.manual_seed(1)
  local a = Net(5)
  local sd = a:state_dict()
  tap.is(names_of(sd), "layers.1.bias layers.1.weight layers.3.bias layers.3.weight scale",
    "state_dict: dotted names")
  tap.ok(not sd.scale:requires_grad(), "state_dict: detached tensors")

  venom.save(path("net.st"), sd)
  local b = Net(5)
  tap.ok(not same_tensor(a.layers[1].weight, b.layers[1].weight), "a second model starts different")
  local loaded = venom.load(path("net.st"))
  local missing, unexpected = b:load_state_dict(loaded)
  tap.is(#missing + #unexpected, 0, "load_state_dict: nothing missing or unexpected")
  local all = true
  for name, t in pairs(b:state_dict()) do all = all and same_tensor(sd[name], t) end
  tap.ok(all, "load_state_dict: every parameter equals the saved one")
  tap.ok(b.layers[1].weight:requires_grad(), "parameters still require grad after loading")

  local c = Net(5)
  local before = c.scale:totable()
  local partial = b:state_dict()
  partial["layers.3.bias"] = nil
  partial["extra.thing"] = venom.ones(1)
  tap.error_like(function() c:load_state_dict(partial) end,
    "missing: layers.3.bias; unexpected: extra.thing", "strict: missing and unexpected names")
  tap.ok(same(c.scale:totable(), before), "strict: a refused load changes nothing")
  missing, unexpected = c:load_state_dict(partial, { strict = false })
  tap.is(table.concat(missing, " ") .. "|" .. table.concat(unexpected, " "),
    "layers.3.bias|extra.thing", "non-strict: returns the missing and unexpected names")
  tap.ok(same_tensor(c.layers[1].weight, b.layers[1].weight), "non-strict: the rest is loaded")

  tap.error_like(function() Net(6):load_state_dict(sd) end,
    "shape mismatch for 'layers.1.weight': the state dict has %(5, 4%), the model has %(6, 4%)",
    "shape mismatch names the tensor and both shapes")
  local wrong = b:state_dict()
  wrong.scale = "1"
  tap.error_like(function() c:load_state_dict(wrong) end, "'scale' is a string, expected a tensor",
    "a non-tensor value is named")
  tap.error_like(function() c:load_state_dict(42) end, "expected a state dict", "not a table")
end

-- extra state and dense export hooks ---------------------------------------------------
local Masked = nn.Module:extend("Masked")
function Masked:__init(M)
  nn.Module.__init(self)
  self:register_parameter("values", venom.randn(2, M / 2))
  self.mask = venom.randn(M):gt(venom.zeros(M))
  self.M = M
end
function Masked:_extra_state() return { mask = self.mask, M = self.M } end
function Masked:_load_extra_state(st)
  self.mask, self.M = st.mask:clone(), tonumber(st.M)
  -- a layout change: the compressed values take a new shape
  self:register_parameter("values", venom.zeros(2, self.M / 2))
end
function Masked:_dense_state() return { weight = venom.ones(2, 4) * self.M } end

do
  local m = nn.Sequential(nn.Linear(2, 2), Masked(8))
  local sd = m:state_dict()
  tap.is(names_of(sd), "1.bias 1.weight 2.M 2.mask 2.values", "extra state joins the state dict")
  checkpoint.save(path("masked.st"), { model = m })
  local fresh = nn.Sequential(nn.Linear(2, 2), Masked(4))
  checkpoint.load(path("masked.st"), { model = fresh })
  tap.is(fresh[2].M, 8, "_load_extra_state receives the metadata (as read back)")
  tap.ok(same_tensor(fresh[2].mask, m[2].mask), "_load_extra_state receives the tensors")
  tap.ok(same_tensor(fresh[2].values, m[2].values),
    "parameters are copied after the extra state has reshaped them")
  local dense = m:dense_state_dict()
  tap.is(names_of(dense), "1.bias 1.weight 2.weight", "dense_state_dict: _dense_state replaces values")
  tap.ok(same(dense["2.weight"]:totable(), { { 8, 8, 8, 8 }, { 8, 8, 8, 8 } }),
    "dense_state_dict: the module's dense weight")
end

-- A failed load changes nothing, even where extra state would reshape a module first.
do
  local src = nn.Sequential(nn.Linear(2, 2), Masked(8))
  local dst = nn.Sequential(nn.Linear(2, 2), Masked(4))
  local values, mask, w = dst[2].values, dst[2].mask, dst[1].weight:totable()
  local sd = src:state_dict()
  sd["1.weight"] = venom.zeros(3, 2)
  tap.error_like(function() dst:load_state_dict(sd) end, "shape mismatch for '1%.weight'",
    "a bad parameter after a reshaping extra state is refused")
  tap.ok(dst[2].M == 4 and dst[2].values == values and dst[2].mask == mask
    and #dst[2]._params == 1 and same(dst[1].weight:totable(), w),
    "... and the reshaping module keeps its fields, parameters and values")
  sd = src:state_dict()
  sd["1.bias"] = venom.tensor({ 1, 2 }, "i64")
  tap.error_like(function() dst:load_state_dict(sd) end,
    "dtype mismatch for '1%.bias': the state dict has i64, the model has f32",
    "an integer tensor for a float parameter is refused")
  tap.ok(dst[2].M == 4 and dst[2].values == values, "... before anything is written")
  sd["1.bias"] = sd["1.bias"]:float()
  dst:load_state_dict(sd)
  tap.ok(dst[2].M == 8 and same_tensor(dst[2].values, src[2].values)
    and same(dst[1].bias:totable(), { 1, 2 }), "the corrected state dict loads whole")
end

-- optimizer and schedule state -----------------------------------------------------------
local function quad_step(p, opt, sched)
  local loss = (p * p):sum() + p:sum()
  opt:zero_grad()
  loss:backward()
  opt:step()
  if sched then sched:step() end
end

for _, kind in ipairs({ "AdamW", "SGD" }) do
  local function make(p)
    if kind == "AdamW" then return optim.AdamW({ p }, { lr = 0.05 }) end
    return optim.SGD({ p }, { lr = 0.05, momentum = 0.9 })
  end
  local p = venom.tensor({ 1, -2, 3 }):requires_grad_(true)
  local opt = make(p)
  local sched = optim.StepLR(opt, { step_size = 2, gamma = 0.5 })
  for _ = 1, 3 do quad_step(p, opt, sched) end
  checkpoint.save(path("opt.st"), { optim = opt, sched = sched })

  local q = p:detach():clone():requires_grad_(true)
  local opt2 = make(q)
  local sched2 = optim.StepLR(opt2, { step_size = 2, gamma = 0.5 })
  checkpoint.load(path("opt.st"), { optim = opt2, sched = sched2 })
  tap.is(opt2.lr, opt.lr, kind .. ": the lr is restored")
  tap.is(sched2.t, 3, kind .. ": the schedule's step count is restored")
  for _ = 1, 3 do
    quad_step(p, opt, sched)
    quad_step(q, opt2, sched2)
  end
  tap.ok(same(p:totable(), q:totable()), kind .. ": three more steps match the original exactly")

  local sd = opt:state_dict()
  sd["state.2.exp_avg"] = venom.zeros(3)
  tap.error_like(function() make(q):load_state_dict(sd) end, "unexpected entry 'state.2.exp_avg'",
    kind .. ": an unknown entry is refused")
end

do
  local p = venom.zeros(3):requires_grad_(true)
  local opt = optim.Adam({ p })
  quad_step(p, opt)
  local sd = opt:state_dict()
  sd["state.1.exp_avg"] = venom.zeros(4)
  tap.error_like(function() opt:load_state_dict(sd) end,
    "'state.1.exp_avg' must be an f32 tensor of parameter 1's shape %(3%), got f32 %(4%)",
    "optimizer: a moment of the wrong shape")
  sd = opt:state_dict()
  sd["state.1.exp_avg_sq"] = nil
  tap.error_like(function() opt:load_state_dict(sd) end,
    "parameter 1 has state but no 'state.1.exp_avg_sq'", "optimizer: an incomplete state")
  for _, bad in ipairs({ 0.5, -1, 2 ^ 60 }) do
    sd = opt:state_dict()
    sd["state.1.step"] = bad
    tap.error_like(function() opt:load_state_dict(sd) end,
      "'state.1.step' must be a non%-negative integer", "optimizer: step count " .. bad)
  end
  tap.error_like(function() optim.CosineWarmup(opt, { total_steps = 5, warmup_steps = 1 })
    :load_state_dict({ t = -1, base_lr = 1 }) end, "'t' must be a non%-negative integer",
    "schedule: a bad step count")
end

-- checkpoint.load errors ---------------------------------------------------------------------
do
  local m = nn.Linear(2, 2)
  local opt = optim.SGD(m:parameters(), { lr = 0.1 })
  checkpoint.save(path("ck.st"), { model = m, optim = opt }, { epoch = 1 })
  tap.error_like(function() checkpoint.load(path("ck.st"), { model = m }) end,
    "holds 'optim.lr', but no part named 'optim' was given", "load: a part left out")
  tap.error_like(function() checkpoint.load(path("ck.st"), { model = m, optim = opt, sched =
    optim.StepLR(opt, { step_size = 1 }) }) end, "holds nothing for part 'sched'",
    "load: a part the file lacks")
  tap.error_like(function() checkpoint.load(path("net.st"), { model = Net(5) }) end,
    "has no 'rng_state'", "load: a plain weights file is not a checkpoint")
  tap.error_like(function() checkpoint.save(path("ck.st"), { ["a.b"] = m }) end,
    "part names must be non%-empty strings without dots", "save: a dotted part name")
  tap.error_like(function() checkpoint.save(path("ck.st"), { model = m }, { ["x.y"] = 1 }) end,
    "meta keys must be strings without dots", "save: a dotted meta key")
end

-- A script's options in the metadata: a resume that changes one is named.
do
  local m = nn.Linear(2, 2)
  local opts = { lr = 0.001, batch_size = 128, sparse = "", save = "a.st" }
  local names = { "lr", "batch_size", "sparse" }
  checkpoint.save(path("opts.st"), { model = m }, { options = checkpoint.options_meta(opts, names) })
  local meta = checkpoint.load(path("opts.st"), { model = m })
  tap.is(checkpoint.check_options(meta, { lr = 0.001, batch_size = 128, sparse = "", save = "b.st" },
    "opts.st"), nil, "check_options: the same options (an output file left out may differ)")
  tap.is(checkpoint.check_options(meta, { lr = 0.01, batch_size = 128, sparse = "64:2:8" }, "opts.st"),
    "opts.st: the run that wrote it had --lr 0.001 --sparse ''; this one has --lr 0.01 "
      .. "--sparse 64:2:8 (resume with the same options)", "check_options names each difference")
  tap.is(checkpoint.check_options({ epoch = "1" }, { lr = 1 }, "old.st"), nil,
    "check_options: a checkpoint without recorded options is not checked")
end

-- A refused checkpoint.load changes nothing: not the parts loaded before the
-- refusal (the model, a pruning scheduler that rebuilt layers), nor the RNG.
do
  local prune = require "venom.prune"
  local function mlp() return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)) end
  local function weights(m)
    local out = {}
    for name, t in pairs(m:state_dict()) do out[name] = venom.is_tensor(t) and t:totable() or t end
    return out
  end
  local function same_weights(a, b)
    for name, t in pairs(a) do
      if not same(t, b[name]) then return false end
    end
    return true
  end

  -- An AdamW checkpoint loaded into an SGD optimizer.
  local src = mlp()
  local adam = optim.AdamW(src:parameters(), { lr = 0.1 })
  src(venom.randn(4, 8)):sum():backward()
  adam:step()
  checkpoint.save(path("adam.st"), { model = src, optim = adam }, { epoch = 1 })
  local dst = mlp()
  local sgd = optim.SGD(dst:parameters(), { lr = 0.5, momentum = 0.9 })
  local before, rng = weights(dst), venom.get_rng_state():totable()
  tap.error_like(function() checkpoint.load(path("adam.st"), { model = dst, optim = sgd }) end,
    "unexpected entry 'state%.%d+%.", "an AdamW checkpoint into SGD is refused")
  tap.ok(same_weights(before, weights(dst)), "... and the model keeps its own weights")
  tap.ok(sgd.lr == 0.5 and next(sgd.state) == nil, "... the optimizer its own state")
  tap.ok(same(rng, venom.get_rng_state():totable()), "... and the RNG its state")

  -- A bad RNG state, the last thing loaded.
  local ts, meta = venom.load(path("adam.st"))
  ts.rng_state = venom.zeros(3)
  venom.save(path("badrng.st"), ts, meta)
  local adam2 = optim.AdamW(dst:parameters(), { lr = 0.5 })
  tap.error_like(function() checkpoint.load(path("badrng.st"), { model = dst, optim = adam2 }) end,
    "set_rng_state", "a checkpoint with a bad RNG state is refused")
  tap.ok(same_weights(before, weights(dst)) and adam2.lr == 0.5 and next(adam2.state) == nil,
    "... after the model and optimizer loaded: both are put back")

  -- A pruning scheduler that turned layer 1 into a SparseLinear, loaded
  -- into a run whose optimizer is SGD: the layer is a Linear again, in the
  -- model and in the optimizer.
  local sparse_src = mlp()
  local opt_src = optim.AdamW(sparse_src:parameters(), { lr = 0.1 })
  local g_src = prune.GMP(sparse_src, { optimizer = opt_src, pattern = "4:2:8", t0 = 0, n = 1 })
  sparse_src(venom.randn(4, 8)):sum():backward()
  opt_src:step()
  g_src:step()
  checkpoint.save(path("gmp.st"), { model = sparse_src, optim = opt_src, gmp = g_src })
  local run = mlp()
  local w1 = run[1].weight
  local opt_run = optim.SGD(run:parameters(), { lr = 0.5 })
  local g_run = prune.GMP(run, { optimizer = opt_run, pattern = "4:2:8", t0 = 0, n = 1 })
  before = weights(run)
  tap.error_like(function()
    checkpoint.load(path("gmp.st"), { model = run, optim = opt_run, gmp = g_run })
  end, "unexpected entry 'state%.%d+%.", "a GMP checkpoint with AdamW state into SGD is refused")
  tap.ok(getmetatable(run[1]) == nn.Linear and run[1].weight == w1 and opt_run.params[1] == w1,
    "... layer 1 is the same Linear in the model and the optimizer")
  tap.ok(same_weights(before, weights(run)), "... with its own weights")
  tap.ok(g_run.t == 0 and g_run:sparsity() == 0 and g_run:report()[1].pattern == "dense",
    "... and the scheduler is back at step 0, dense")
  g_run:step()
  tap.is(g_run:report()[1].pattern, "4:2:8", "... from where it prunes as before")
end

-- resume equality --------------------------------------------------------------------------
-- A small classifier with dropout, a shuffling loader, AdamW and a cosine
-- schedule: every piece of state matters. Train 2 epochs, checkpoint, train
-- 2 more; then rebuild everything from another seed, load the checkpoint and
-- train the same 2 epochs: every loss must be equal, not merely close.
venom.manual_seed(123)
local X = venom.randn(60, 8)
local Y = (X:narrow(2, 1, 1):squeeze(2):gt(venom.zeros(60)):long() + 1)
local loader = data.DataLoader({ X, Y }, { batch_size = 16, shuffle = true })

local function build(seed)
  venom.manual_seed(seed)
  local model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 2))
  local opt = optim.AdamW(model:parameters(), { lr = 0.02 })
  local sched = optim.CosineWarmup(opt, { warmup_steps = 3, total_steps = 4 * #loader })
  return { model = model, optim = opt, sched = sched }
end

local function train_epoch(parts, losses)
  for xb, yb in loader:iter() do
    local loss = venom.cross_entropy(parts.model(xb), yb)
    parts.optim:zero_grad()
    loss:backward()
    parts.optim:step()
    parts.sched:step()
    losses[#losses + 1] = loss:item()
  end
end

do
  local run = build(7)
  local first = {}
  train_epoch(run, first)
  train_epoch(run, first)
  checkpoint.save(path("resume.st"), run, { epoch = 2 })
  local want = {}
  train_epoch(run, want)
  train_epoch(run, want)

  local resumed = build(99)
  local meta = checkpoint.load(path("resume.st"), resumed)
  tap.is(meta.epoch, "2", "resume: the epoch comes back in the metadata")
  local got = {}
  train_epoch(resumed, got)
  train_epoch(resumed, got)
  tap.is(#got, 2 * #loader, "resume: two more epochs of steps")
  local equal = #got == #want
  for i = 1, #want do equal = equal and got[i] == want[i] end
  tap.ok(equal, ("resume: the %d losses after the checkpoint equal the uninterrupted run's, bit for bit")
    :format(#want))
  if not equal then tap.diag("want %s\ngot  %s", table.concat(want, " "), table.concat(got, " ")) end
  tap.ok(same_tensor(resumed.model[4].weight, run.model[4].weight), "resume: same final weights")

  -- The same without the RNG state (reseeded after loading): the shuffles
  -- and dropout masks differ, and so do the losses. The check above can fail.
  local unseeded = build(99)
  checkpoint.load(path("resume.st"), unseeded)
  venom.manual_seed(5)
  local other = {}
  train_epoch(unseeded, other)
  tap.ok(other[1] ~= want[1] or other[2] ~= want[2], "resume without the RNG state diverges")
end

os.execute("rm -rf '" .. dir .. "'")
tap.done()
