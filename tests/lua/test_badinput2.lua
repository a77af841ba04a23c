-- Bad input from Lua, second round: numbers an integer tensor cannot hold,
-- tables with gaps, optimizers given computed tensors, unknown option keys,
-- the tutorial's command line, and messages that must count from 1 and
-- point at the caller's line. Each case is a Lua error naming what was
-- expected and what was found; the process carries on to the next one.
package.path = (arg[0]:match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local data = require "venom.data"
local util = require "venom.util"
local sparse = require "venom.sparse"

-- Calls are not tail calls (local r = ...), so messages carry this file's line.
local HERE = "test_badinput2%.lua:%d+: "

local function values(t) return table.concat(t:totable(), ",") end

-- 1. Optimizers refuse tensors they could not update -------------------------------
do
  local p = venom.ones(3, { requires_grad = true })
  local v = p:narrow(1, 1, 2)
  tap.error_like(function() local r = optim.SGD({ v }, { lr = 1 }) return r end,
    HERE .. "optim%.SGD: params%[1%] is not a leaf tensor %(it was computed by 'narrow'%); pass the parameter itself",
    "optim: a view of a parameter is refused")
  tap.error_like(function() local r = optim.AdamW({ p, p * 2 }) return r end,
    "optim%.AdamW: params%[2%] is not a leaf tensor %(it was computed by 'mul'%)",
    "optim: a computed tensor is refused")
  tap.error_like(function() local r = optim.Adam({ venom.ones(2) }) return r end,
    "optim%.Adam: params%[1%] does not require a gradient", "optim: a tensor without requires_grad")
  -- nn modules hand over leaves that require grad, so they pass.
  local ok = pcall(optim.SGD, nn.Linear(2, 2):parameters(), { lr = 0.1 })
  tap.ok(ok, "optim: a module's parameters are accepted")

  local q = venom.ones(2, { requires_grad = true })
  local opt = optim.SGD({ q }, { lr = 1 })
  local loss = (q * q):sum()
  loss:backward()
  q:free()
  tap.error_like(function() opt:step() end,
    HERE .. "optim%.SGD:step: params%[1%] was freed %(t:free%(%)%) and can no longer be updated",
    "optim: a freed parameter is reported at the caller's line")
  tap.error_like(function() opt:zero_grad() end, HERE .. "optim%.SGD:zero_grad: params%[1%] was freed",
    "optim: zero_grad on a freed parameter")
end

-- 2. Numbers that an integer tensor cannot hold --------------------------------------
do
  local i64 = venom.tensor({ 1, 2 }, "i64")
  local u8 = venom.tensor({ 1, 2 }, "u8")
  tap.error_like(function() local r = i64 + 0.5 return r end,
    HERE .. "add: the number 0%.5 is not representable as i64 %(i64 holds whole numbers in %-2%^63%.%.2%^63%-1; convert the tensor with :float%(%) first%)",
    "i64 + 0.5")
  tap.error_like(function() local r = u8 + 300 return r end,
    "add: the number 300 is not representable as u8 %(u8 holds whole numbers in 0%.%.255", "u8 + 300")
  tap.error_like(function() local r = u8 - (-1) return r end, "sub: the number %-1 is not representable as u8",
    "u8 - (-1)")
  tap.error_like(function() local r = i64 + 0 / 0 return r end, "add: the number nan is not representable as i64",
    "i64 + NaN")
  tap.error_like(function() local r = i64 * math.huge return r end, "mul: the number inf is not representable",
    "i64 * inf")
  tap.error_like(function() local r = 2.5 - i64 return r end, "sub: the number 2%.5", "a number on the left")
  tap.error_like(function() local r = i64:lt(1.5) return r end, "lt: the number 1%.5", "a comparison")
  tap.error_like(function() local r = venom.tensor({ 1 }, "i32") + 2 ^ 31 return r end,
    "add: the number 2147483648 is not representable as i32", "i32 + 2^31")
  tap.is(values(venom.tensor({ 0 }, "i32") + (-2 ^ 31)), "-2147483648", "i32 + -2^31 fits")
  tap.is(values(u8 + 253), "254,255", "u8 + 253 fits")
  tap.is(values(i64 * 3), "3,6", "i64 * 3 still works")

  tap.error_like(function() i64:add_(0.5) end, "add_: the number 0%.5 is not representable as i64", "add_(0.5)")
  tap.ok(venom.is_grad_enabled(), "a refused in-place op leaves grad mode on")
  tap.error_like(function() i64:fill_(0.5) end, "fill_: the number 0%.5 is not representable as i64", "fill_(0.5)")
  tap.error_like(function() i64:copy_(1e300) end, "copy_: the number 1e%+300 is not representable", "copy_(1e300)")
  tap.error_like(function() u8:set(1, 256) end, "set: the number 256 is not representable as u8", "set(i, 256)")
  tap.error_like(function() i64[2] = 1.5 end, HERE .. "t%[i%] = v: the number 1%.5 is not representable as i64",
    "t[i] = 1.5")
  local m = venom.tensor({ { 1, 2 }, { 3, 4 } }, "u8")
  tap.error_like(function() m[1] = -1 end, "t%[i%] = v: the number %-1 is not representable as u8",
    "t[i] = -1 fills a row")
  tap.is(values(i64), "1,2", "the refused writes changed nothing")
  tap.is(values(m[1]), "1,2", "the refused row fill changed nothing")
  tap.error_like(function() local r = venom.full({ 2 }, 0.5, { dtype = "i64" }) return r end,
    "full: the number 0%.5 is not representable as i64", "full with a fraction")
  tap.error_like(function() local r = venom.full({ 2 }, 256, { dtype = "u8" }) return r end,
    "full: the number 256 is not representable as u8", "full past u8")
  tap.error_like(function() local r = i64:masked_fill(venom.tensor({ 1, 0 }, "u8"), 2.5) return r end,
    "masked_fill: the number 2%.5 is not representable as i64", "masked_fill with a fraction")
  tap.error_like(function() local r = venom.where(venom.tensor({ 1, 0 }, "u8"), i64, 0.5) return r end,
    "where: the number 0%.5 is not representable as i64", "where with a fraction")
  tap.error_like(function() local r = venom.tensor({ 1.5 }, "i64") return r end,
    "tensor: value 1%.5 at %[1%] does not fit in dtype i64", "tensor() with a fraction for i64")
  i64:fill_(7)
  i64[1] = -3
  tap.is(values(i64), "-3,7", "whole numbers are still written")
end

-- 3. Tables with gaps or other keys ----------------------------------------------------
do
  tap.error_like(function() local r = venom.tensor({ 1, nil, 3 }) return r end,
    "tensor: the table has a non%-sequence key 3 %(expected keys 1%.%.1 only; a nil inside a list ends it%)",
    "{1, nil, 3}")
  tap.error_like(function() local r = venom.tensor({ [1] = 1, [3] = 3 }) return r end,
    "non%-sequence key 3", "{[1] = 1, [3] = 3}")
  local t = { 1, 2, 3 }
  t[5] = 5
  tap.error_like(function() local r = venom.tensor(t) return r end,
    "the table has a non%-sequence key 5 %(expected keys 1%.%.3 only", "t[5] = 5 after {1, 2, 3}")
  tap.error_like(function() local r = venom.tensor({ x = 1 }) return r end,
    "the table has a non%-sequence key 'x' %(expected a list of numbers or of tables%)", "{x = 1}")
  tap.error_like(function() local r = venom.tensor({ { 1, 2 }, { 3, 4, name = "row" } }) return r end,
    "the table at %[2%] has a non%-sequence key 'name'", "a named key in a row")
  tap.error_like(function() local r = venom.tensor({ { 1 }, { 2, [0] = 9 } }) return r end,
    "the table at %[2%] has a non%-sequence key 0", "key 0 in a row")
  tap.is(values(venom.tensor({ 1, 2, 3 })), "1,2,3", "a plain list still converts")
  tap.is(venom.tensor({}):numel(), 0, "{} is still an empty tensor")
end

-- 6. A dtype name as the last argument of the creation functions ------------------------
do
  local z = venom.zeros({ 2 }, "i64")
  tap.is(z:dtype() .. " " .. values(z), "i64 0,0", "zeros({2}, 'i64')")
  tap.is(venom.ones(2, 3, "u8"):dtype(), "u8", "ones(2, 3, 'u8')")
  tap.is(venom.empty(4, "i32"):dtype(), "i32", "empty(4, 'i32')")
  tap.is(values(venom.full({ 2 }, 7, "i64")), "7,7", "full({2}, 7, 'i64')")
  tap.is(venom.rand(2, "f32"):dtype(), "f32", "rand(2, 'f32')")
  tap.is(values(venom.arange(1, 4, "i64")), "1,2,3", "arange(1, 4, 'i64')")
  tap.error_like(function() local r = venom.randn(2, "i64") return r end, "random tensors are f32",
    "randn(2, 'i64') is refused")
  tap.error_like(function() local r = venom.zeros(2, "f64") return r end, "unknown dtype 'f64'",
    "an unknown trailing dtype name")
end

-- 7. Sizes past the limit are called too large ---------------------------------------
tap.error_like(function() local r = venom.zeros(2 ^ 62) return r end,
  "size 1 of the shape is too large: 4%.6116860184274e%+18 %(the limit is 1e%+15 elements along a dim%)",
  "zeros(2^62) is too large, with the limit")
tap.error_like(function() local r = venom.ones(3, math.huge) return r end, "size 2 of the shape is too large: inf",
  "an infinite size")
tap.error_like(function() local r = venom.zeros(1.5) return r end,
  "size 1 of the shape must be a non%-negative integer, found 1%.5", "a fractional size")

-- 8. Unknown option keys -----------------------------------------------------------------
do
  local p = venom.ones(2, { requires_grad = true })
  local cases = {
    { "optim.SGD", function() local r = optim.SGD({ p }, { lr = 1, momentun = 0.9 }) return r end,
      "'momentun' %(known options: dampening, lr, momentum, nesterov, weight_decay%)" },
    { "optim.Adam", function() local r = optim.Adam({ p }, { beta = { 0.9, 0.99 } }) return r end,
      "'beta' %(known options: betas, eps, lr, weight_decay%)" },
    { "optim.AdamW", function() local r = optim.AdamW({ p }, { weight_dacay = 0.1 }) return r end,
      "'weight_dacay'" },
    { "optim.StepLR", function() local r = optim.StepLR(optim.SGD({ p }, { lr = 1 }), { step_size = 1, gama = 0.5 }) return r end,
      "'gama' %(known options: gamma, step_size%)" },
    { "optim.CosineWarmup", function()
        local r = optim.CosineWarmup(optim.SGD({ p }, { lr = 1 }), { warmup = 1, total_steps = 9 }) return r end,
      "'warmup' %(known options: min_lr, restart_lr, restart_step, total_steps, warmup_steps%)" },
    { "data.DataLoader", function() local r = data.DataLoader({ venom.ones(4) }, { batchsize = 2 }) return r end,
      "'batchsize' %(known options: batch_size, device, drop_last, sampler, shuffle, transform, workers%)" },
    { "data.fashion_mnist", function() local r = data.fashion_mnist("test", { dir = "/x" }) return r end, "'dir'" },
    { "nn.Linear", function() local r = nn.Linear(2, 2, { bais = false }) return r end, "'bais' %(known options: bias%)" },
    { "nn.CrossEntropyLoss", function() local r = nn.CrossEntropyLoss({ reduce = "sum" }) return r end, "'reduce'" },
    { "nn.MSELoss", function() local r = nn.MSELoss({ [1] = "sum" }) return r end, "%[1%]" },
    { "load_state_dict", function() local r = nn.Linear(2, 2):load_state_dict({}, { strict_ = false }) return r end,
      "'strict_'" },
    { "nn.SparseLinear", function() local r = sparse.SparseLinear(8, 8, { V = 4, m = 8 }) return r end,
      "'m' %(known options: M, N, V, bias, weight%)" },
    { "sparse.sparsify", function() local r = sparse.sparsify(nn.Sequential(nn.Linear(8, 8)), { skips = {} }) return r end,
      "'skips'" },
    { "util.ProgressBar", function() local r = util.ProgressBar(3, { tyy = false }) return r end, "'tyy'" },
  }
  for _, c in ipairs(cases) do
    tap.error_like(c[2], HERE .. c[1]:gsub("%.", "%%.") .. ": unknown option " .. c[3], c[1] .. ": an unknown option")
  end
  tap.ok(pcall(optim.AdamW, { p }, { lr = 1e-3, betas = { 0.9, 0.99 }, eps = 1e-6, weight_decay = 0 }),
    "known options still pass")
end

-- 9. Messages ---------------------------------------------------------------------------
do
  local a, b = venom.ones(2, 3), venom.ones(3, 2)
  tap.is(values(venom.cat({ venom.ones(2), venom.zeros(1) })), "1,1,0", "cat without a dim joins along dim 1")
  tap.error_like(function() local r = venom.cat({ a, b }) return r end,
    "cat: element 2 of the table %(f32 %(3, 2%)%) does not match element 1 %(f32 %(2, 3%)%) outside dim 1",
    "cat: elements and dims counted from 1")
  tap.error_like(function() local r = venom.cat({ a, a, venom.ones(2) }, 2) return r end,
    "cat: element 3 of the table %(f32 %(2,%)%) does not match element 1 %(f32 %(2, 3%)%) outside dim 2",
    "cat: a tensor with fewer dims")
  tap.error_like(function() local r = venom.cat({ a, a:long() }) return r end, "element 2 of the table %(i64",
    "cat: mixed dtypes")
  tap.is(table.concat(venom.cat({ a, a }, 2):shape(), "x"), "2x6", "cat along dim 2 still works")
  tap.error_like(function() local r = venom.zeros(0, 3):argmax() return r end,
    "argmax: the tensor of shape %(0, 3%) has no elements", "argmax of an empty tensor names its shape")
  tap.error_like(function() local r = venom.zeros(0, 3):argmin() return r end, "argmin: the tensor of shape %(0, 3%)",
    "argmin of an empty tensor")
  tap.error_like(function() local r = nn.Linear(3, 2)(venom.tensor(1)) return r end,
    HERE .. "nn%.Linear: expected an input of shape %(%.%.%., 3%), got a 0%-d tensor", "Linear on a 0-d tensor")
  tap.error_like(function() a[1] = "x" end, HERE .. "t%[i%] = v: v must be a number or a tensor, found string",
    "t[i] = 'x' names both accepted kinds")
  tap.error_like(function() local r = a < b return r end,
    HERE .. "cannot compare tensors with <, <=, > or >= %(Lua wants one boolean%); use a:lt%(b%)", "a < b")
  tap.error_like(function() local r = a >= b return r end, "use a:lt%(b%), a:le%(b%)", "a >= b")

  local NoInit = nn.Module:extend("NoInit")
  function NoInit:__init() self.x = 1 end
  tap.error_like(function() local r = NoInit() return r end,
    HERE .. "NoInit: this NoInit is not initialised: NoInit:__init must call nn%.Module%.__init%(self%) first",
    "a subclass that forgets Module.__init")
  local LateInit = nn.Module:extend("LateInit")
  function LateInit:__init() self:add_module("fc", nn.Linear(2, 2)) end
  tap.error_like(function() local r = LateInit() return r end, "add_module: this LateInit is not initialised",
    "add_module before Module.__init")

  -- A bar of unknown length (total 0) shows the count, never "1/0" or 100%.
  local out = { text = "" }
  function out:write(...) self.text = self.text .. table.concat({ ... }) end
  function out:flush() end
  local bar = util.ProgressBar(0, { file = out, tty = false, clock = function() return 2 end })
  bar:update()
  bar:update()
  bar:close()
  tap.is(out.text:gsub("%[.*", ""), "2 ", "ProgressBar(0): the count alone at close")
  local tty = { text = "" }
  tty.write, tty.flush = out.write, out.flush
  local now = 0
  bar = util.ProgressBar(0, { file = tty, tty = true, desc = "d", clock = function() return now end })
  now = 1
  bar:update()
  tap.ok(tty.text:find("\rd 1 [00:01, 1.0it/s]", 1, true) and not tty.text:find("%%"),
    "ProgressBar(0) on a terminal: no percentage")
  tap.error_like(function() local r = util.ProgressBar(0 / 0) return r end, "total must be a non%-negative number",
    "ProgressBar(NaN)")
end

-- 10 and 9. IDX files: label range, errors at the caller's line --------------------------
local idx = require "idxfile"
local be32, write, idx_images, idx_labels = idx.be32, idx.write, idx.images, idx.labels

local dir = testutil.tmpdir()
do
  write(dir .. "/t10k-images-idx3-ubyte", idx_images(3))
  write(dir .. "/t10k-labels-idx1-ubyte", idx_labels({ 3, 200, 9 }))
  tap.error_like(function() local r = data.mnist(dir, "test") return r end,
    HERE .. "data%.mnist: .*t10k%-labels%-idx1%-ubyte holds label 200 at position 2 %(of 3%); expected 0%.%.9",
    "mnist: a label outside 0..9 names the file, position and value")
  write(dir .. "/t10k-labels-idx1-ubyte", idx_labels({ 3, 0, 9 }))
  tap.is(values(data.mnist(dir, "test").labels), "4,1,10", "mnist: labels 0..9 load as 1..10")
  write(dir .. "/t10k-labels-idx1-ubyte", "\0\0\8\1" .. be32(5) .. "ab")
  tap.error_like(function() local r = data.mnist(dir, "test") return r end, HERE .. "data%.mnist: idx",
    "mnist: a truncated IDX file is reported at the caller's line")
end

-- 5. The tutorial's command line ---------------------------------------------------------
local exe = os.getenv("VENOM_EXE") or arg[-1]
local function tutorial(args)
  local p = io.popen(("'%s' tutorials/01-fashion-mnist.lua %s 2>&1; echo \"rc=$?\""):format(exe, args))
  local out = p:read("*a")
  p:close()
  return out:gsub("rc=%d+\n$", ""), tonumber(out:match("rc=(%d+)\n$"))
end

do
  local out, rc = tutorial("-h")
  tap.ok(rc == 0 and out:find("--epochs N", 1, true) and out:find("-h, --help", 1, true),
    "tutorial -h prints the help and exits 0")
  local usage = {
    { "extra", "unexpected argument 'extra'" },
    { "--epochs 0", "--epochs must be a whole number >= 1, got 0" },
    { "--epochs -1", "--epochs must be a whole number >= 1, got -1" },
    { "--epochs 1.5", "--epochs must be a whole number >= 1, got 1.5" },
    { "--batch-size 0", "--batch-size must be a whole number >= 1, got 0" },
    { "--lr inf", "--lr must be a finite number > 0, got inf" },
    { "--lr nan", "--lr must be a finite number > 0, got nan" },
    { "--lr -1", "--lr must be a finite number > 0, got -1" },
    { "--hidden 0", "--hidden must be a whole number >= 1, got 0" },
    { "--limit -5", "--limit must be a whole number >= 0, got -5" },
    { "--seed -1", "--seed must be a whole number >= 0, got -1" },
    { "--weight-decay -0.1", "--weight-decay must be a finite number >= 0, got -0.1" },
    { "--cosine 5", "--cosine is a flag and takes no value, got '5' after it" },
    { "--lr abc", "--lr expects a number, got 'abc'" },
    { "--bogus 1", "unknown option --bogus; known options:" },
  }
  for _, u in ipairs(usage) do
    out, rc = tutorial(u[1] .. " --root /nonexistent")
    local good = tap.ok(rc == 2 and out:sub(1, 7 + #u[2]) == "error: " .. u[2]
      and out:find("\nrun 'tutorials/01%-fashion%-mnist%.lua %-%-help' to list the options\n$")
      and not out:find("traceback"), ("tutorial %s: a usage error with status 2, no traceback"):format(u[1]))
    if not good then tap.diag("got (status %s): %s", tostring(rc), out) end
  end

  -- A learning rate this large makes the loss inf or NaN at once; the run
  -- stops there, naming the step, instead of training on garbage.
  write(dir .. "/train-images-idx3-ubyte", idx_images(16))
  write(dir .. "/train-labels-idx1-ubyte", idx_labels({ 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5 }))
  write(dir .. "/t10k-labels-idx1-ubyte", idx_labels({ 1, 2, 3 }))
  out, rc = tutorial(("--root '%s' --lr 1e30 --hidden 8 --batch-size 4 --epochs 3 --no-cosine"):format(dir))
  tap.ok(rc == 1 and out:find("error: the training loss is [%-]?[a-z]+ at epoch 1, step %d; the run diverged "
    .. "%(try a lower %-%-lr than 1e%+30%)\n$") and not out:find("epoch 1/3  train loss"),
    "tutorial: an inf/NaN loss stops the run with status 1, naming the step")
  if rc ~= 1 then tap.diag("%s", out) end
end
os.execute("rm -rf '" .. dir .. "'")

tap.done()
