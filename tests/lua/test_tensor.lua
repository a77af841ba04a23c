-- The venom tensor API from Lua: creation, 1-based views, arithmetic with
-- numbers, printing, tables, autograd, no_grad, free, memory.
package.path = (arg[0]:match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"

local function same(got, want, tol, name)
  local g = got:totable()
  local ok = #g == #want
  for i = 1, #want do
    if type(want[i]) == "table" then
      for j = 1, #want[i] do ok = ok and math.abs(g[i][j] - want[i][j]) <= tol end
    else
      ok = ok and math.abs(g[i] - want[i]) <= tol
    end
  end
  if not tap.ok(ok, name) then tap.diag("got %s", tostring(got)) end
end

-- creation ------------------------------------------------------------------------
do
  local z = venom.zeros(2, 3)
  tap.is(table.concat(z:shape(), ","), "2,3", "zeros(2, 3) has shape (2, 3)")
  tap.is(z:dtype(), "f32", "f32 by default")
  tap.is(venom.ones({ 4 }, { dtype = "i64" }):dtype(), "i64", "shape table + dtype option")
  tap.is(venom.zeros():dim(), 0, "no sizes: a 0-d tensor")
  tap.is(venom.full({ 2, 2 }, 7):sum():item(), 28, "full fills with the value")
  same(venom.arange(1, 4), { 1, 2, 3 }, 0, "arange(1, 4) stops before 4")
  same(venom.arange(5, 0, -2), { 5, 3, 1 }, 0, "arange with a negative step")
  tap.is(venom.tensor(3.5):item(), 3.5, "tensor(number) is 0-d")
  local t = venom.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, "i32")
  tap.is(t:dtype() .. " " .. t:numel(), "i32 6", "tensor(table, dtype)")
  tap.is(t:get(2, 3), 6, "get is 1-based")
  tap.is(t:get(-1, -3), 4, "get counts negative positions from the end")
  t:set(1, 2, 20)
  tap.is(t:totable()[1][2], 20, "set is 1-based")
  tap.ok(venom.rand(3, 3, { requires_grad = true }):requires_grad(), "requires_grad option")

  local p = venom.randperm(10)
  local seen, count = {}, 0
  for i = 1, 10 do
    local v = p[i]
    if not seen[v] and v >= 1 and v <= 10 then count = count + 1 end
    seen[v] = true
  end
  tap.is(count, 10, "randperm(10) holds each of 1..10 once")
  tap.is(p:dtype(), "i64", "randperm gives i64")

  venom.manual_seed(42)
  local a = venom.randn(5):totable()
  venom.manual_seed(42)
  local b = venom.randn(5):totable()
  tap.ok(a[1] == b[1] and a[5] == b[5], "manual_seed makes randn repeat")
end

-- views with 1-based dims -----------------------------------------------------------
do
  local x = venom.arange(0, 6):reshape(2, 3) -- {{0,1,2},{3,4,5}}
  same(x:transpose(1, 2), { { 0, 3 }, { 1, 4 }, { 2, 5 } }, 0, "transpose(1, 2)")
  same(x:t(), { { 0, 3 }, { 1, 4 }, { 2, 5 } }, 0, "t()")
  same(x:narrow(2, 2, 2), { { 1, 2 }, { 4, 5 } }, 0, "narrow(2, 2, 2): columns 2..3")
  same(x:select(1, 2), { 3, 4, 5 }, 0, "select(1, 2): the second row")
  same(x:select(-1, 1), { 0, 3 }, 0, "select(-1, 1): first entry of the last dim")
  same(x[2], { 3, 4, 5 }, 0, "x[2] selects a row")
  tap.is(x[2][3], 5, "x[2][3] is a number")
  tap.is(#x, 2, "#x is the size of dim 1")
  tap.is(x:size(2), 3, "size(2)")
  tap.is(x:size(-1), 3, "size(-1) is the last dim")
  tap.is(table.concat(x:unsqueeze(1):shape(), ","), "1,2,3", "unsqueeze(1) adds a leading dim")
  tap.is(table.concat(x:unsqueeze(-1):shape(), ","), "2,3,1", "unsqueeze(-1) adds a trailing dim")
  tap.is(table.concat(x:unsqueeze(2):squeeze(2):shape(), ","), "2,3", "squeeze(2)")
  tap.is(table.concat(venom.zeros(1, 3, 1):squeeze():shape(), ","), "3", "squeeze() drops all 1s")
  tap.is(table.concat(x:reshape(-1):shape(), ","), "6", "reshape(-1)")
  tap.is(table.concat(x:view({ 3, 2 }):shape(), ","), "3,2", "view with a shape table")
  local p = venom.zeros(2, 3, 4):permute(3, 1, 2)
  tap.is(table.concat(p:shape(), ","), "4,2,3", "permute(3, 1, 2)")
  tap.ok(not x:t():is_contiguous() and x:t():contiguous():is_contiguous(), "contiguous()")
  same(venom.tensor({ 1, 2 }):reshape(2, 1):expand(2, 3), { { 1, 1, 1 }, { 2, 2, 2 } }, 0, "expand")
  same(x:index_select(1, venom.tensor({ 2, 1, 2 }, "i64")), { { 3, 4, 5 }, { 0, 1, 2 }, { 3, 4, 5 } },
    0, "index_select with 1-based indices")
  same(venom.cat({ x, x }, 2), { { 0, 1, 2, 0, 1, 2 }, { 3, 4, 5, 3, 4, 5 } }, 0, "cat along dim 2")
  local v = x:clone()
  v[1] = 9
  same(v, { { 9, 9, 9 }, { 3, 4, 5 } }, 0, "t[i] = number fills a row")
  v[2] = venom.tensor({ 7, 8, 6 })
  same(v, { { 9, 9, 9 }, { 7, 8, 6 } }, 0, "t[i] = tensor copies a row")
  same(x, { { 0, 1, 2 }, { 3, 4, 5 } }, 0, "clone is a copy: the source is unchanged")
end

-- arithmetic with numbers and tensors -------------------------------------------------
do
  local x = venom.tensor({ 1, 2, 4 })
  same(x + 1, { 2, 3, 5 }, 0, "x + 1")
  same(1 - x, { 0, -1, -3 }, 0, "1 - x keeps the operand order")
  same(2 * x, { 2, 4, 8 }, 0, "2 * x")
  same(x / 2, { 0.5, 1, 2 }, 0, "x / 2")
  same(8 / x, { 8, 4, 2 }, 0, "8 / x")
  same(x ^ 2, { 1, 4, 16 }, 0, "x ^ 2")
  same(-x, { -1, -2, -4 }, 0, "-x")
  same(x:add(x):mul(x), { 2, 8, 32 }, 0, "methods with tensors")
  same(x + venom.tensor({ { 10 }, { 20 } }), { { 11, 12, 14 }, { 21, 22, 24 } }, 0, "broadcasting")
  local i = venom.tensor({ 1, 2 }, "i64") + 1
  tap.is(i:dtype(), "i64", "a number takes the tensor's dtype")
  same(x:gt(1.5), { 0, 1, 1 }, 0, "comparisons give 0/1")
  same(x:clamp(nil, 2), { 1, 2, 2 }, 0, "clamp(nil, hi)")
  same(venom.where(x:gt(1.5), x, 0), { 0, 2, 4 }, 0, "where with a number")
  same(x:masked_fill(x:eq(2), -1), { 1, -1, 4 }, 0, "masked_fill")
  local m = venom.tensor({ { 1, 5, 3 }, { 4, 2, 6 } })
  same(m:argmax(2), { 2, 3 }, 0, "argmax(2) is 1-based")
  tap.is(m:argmax():item(), 6, "argmax() over all, 1-based")
  tap.is(m:argmin(1):dtype(), "i64", "argmin gives i64")
  same(m:sum(1), { 5, 7, 9 }, 0, "sum(1)")
  tap.is(table.concat(m:mean(2, true):shape(), ","), "2,1", "mean(2, true) keeps the dim")
  tap.is(m:max():item(), 6, "max() over all")
  same(m:softmax(2):sum(2), { 1, 1 }, 1e-6, "softmax rows sum to 1")
  local y = venom.tensor({ 5, 7 })
  y:add_(1)
  same(y, { 6, 8 }, 0, "add_ works in place")
end

-- u8 -> f32 ----------------------------------------------------------------------------
-- Every byte value, as a loader converts image rows: contiguous (the vectorised loop) and
-- through a transposed view (the strided one). A byte read as signed would give 200 -> -56.
do
  local vals = {}
  for i = 0, 255 do vals[#vals + 1] = i end
  local u = venom.tensor(vals, "u8"):reshape(16, 16)
  local want = {}
  for r = 1, 16 do
    want[r] = {}
    for c = 1, 16 do want[r][c] = vals[(r - 1) * 16 + c] end
  end
  same(u:float(), want, 0, "u8 -> f32, contiguous: 0..255 exactly")
  local wt = {}
  for r = 1, 16 do
    wt[r] = {}
    for c = 1, 16 do wt[r][c] = want[c][r] end
  end
  same(u:transpose(1, 2):float(), wt, 0, "u8 -> f32 through a transposed view")
end

-- printing ---------------------------------------------------------------------------
do
  local s = tostring(venom.tensor({ { 0.1, -2 }, { 3, 4 } }))
  tap.is(s, "tensor([[ 0.1000, -2.0000],\n        [ 3.0000,  4.0000]], dtype=f32, shape=(2, 2))",
    "tostring: aligned columns, dtype and shape")
  tap.is(tostring(venom.tensor({ 1, 20 }, "i64")), "tensor([ 1, 20], dtype=i64, shape=(2,))",
    "integers print plainly")
  local big = tostring(venom.arange(0, 5000):reshape(50, 100))
  tap.ok(big:find("...", 1, true) and big:find("4999.0000", 1, true) and not big:find("2500.0000", 1, true),
    "a large tensor elides its middle but shows both ends")
  tap.ok(big:find("shape=(50, 100)", 1, true) ~= nil, "elided print still names the shape")
  tap.ok(not tostring(venom.arange(0, 1000)):find("...", 1, true), "1000 elements print in full")
  tap.ok(tostring(venom.tensor({ 1e-7, 2e-7 })):find("1.0000e-07", 1, true) ~= nil,
    "tiny values print in scientific notation")
  local w = venom.ones(2, { requires_grad = true })
  tap.ok(tostring(w):find("requires_grad=true", 1, true) ~= nil, "a parameter says requires_grad")
  tap.ok(tostring(w * 2):find("grad_fn=<mul>", 1, true) ~= nil, "a result names its grad_fn")
end

-- totable round trip ---------------------------------------------------------------------
do
  local t = { { { 1, 2 }, { 3, 4 } }, { { 5, 6 }, { 7, 8 } } }
  local back = venom.tensor(t):totable()
  tap.ok(back[2][1][2] == 6 and back[1][2][1] == 3 and #back == 2, "tensor(t):totable() gives t back")
  tap.is(venom.tensor(7):totable(), 7, "totable of a 0-d tensor is a number")
  tap.is(#venom.tensor({}):totable(), 0, "an empty table round-trips")
end

-- autograd ---------------------------------------------------------------------------------
do
  -- L = sum((a*b + a)^2), a = [1, 2], b = [3, 4]: y = [4, 10],
  -- dL/da = 2y(b + 1) = [32, 100], dL/db = 2ya = [8, 40].
  local a = venom.tensor({ 1, 2 }, { requires_grad = true })
  local b = venom.tensor({ 3, 4 }, { requires_grad = true })
  local loss = ((a * b + a) ^ 2):sum()
  tap.is(loss:item(), 116, "forward value")
  tap.ok(a:is_leaf() and not loss:is_leaf(), "is_leaf")
  tap.is(loss:grad_fn(), "sum_all", "grad_fn names the op")
  loss:backward()
  same(a.grad, { 32, 100 }, 1e-5, "dL/da")
  same(b.grad, { 8, 40 }, 1e-5, "dL/db")
  local again = (a * 1):sum()
  again:backward()
  same(a.grad, { 33, 101 }, 1e-5, "gradients accumulate")
  a:zero_grad()
  tap.is(a.grad, nil, "zero_grad clears the gradient")

  -- cross_entropy of zero logits against class 2 of 3: log 3; the gradient is
  -- softmax - onehot = [1/3, -2/3, 1/3].
  local logits = venom.zeros(1, 3, { requires_grad = true })
  local ce = venom.cross_entropy(logits, venom.tensor({ 2 }, "i64"))
  tap.near(ce:item(), math.log(3), 1e-6, "cross_entropy with a 1-based target")
  ce:backward()
  same(logits.grad, { { 1 / 3, -2 / 3, 1 / 3 } }, 1e-6, "cross_entropy gradient")

  -- matmul: d sum(W x) / dW = x broadcast over rows
  local W = venom.tensor({ { 1, 2 }, { 3, 4 } }, { requires_grad = true })
  local x = venom.tensor({ 5, 6 })
  W:matmul(x):sum():backward()
  same(W.grad, { { 5, 6 }, { 5, 6 } }, 1e-6, "matmul gradient")
  local d = W:detach()
  tap.ok(not d:requires_grad() and d:get(2, 1) == 3, "detach shares values, drops the graph")
end

-- no_grad ------------------------------------------------------------------------------------
do
  local w = venom.ones(3, { requires_grad = true })
  local y, extra = venom.no_grad(function(k) return w * k, "x" end, 2)
  tap.ok(y:grad_fn() == nil and not y:requires_grad(), "no_grad records nothing")
  tap.is(extra, "x", "no_grad passes the function's results")
  tap.ok(venom.is_grad_enabled(), "grad mode is back on after no_grad")
  local ok = pcall(venom.no_grad, function() error("inside") end)
  tap.ok(not ok and venom.is_grad_enabled(), "grad mode is restored when the function fails")
  local prev = venom.set_grad_enabled(false)
  tap.ok(prev == true and (w * 2):grad_fn() == nil, "set_grad_enabled(false)")
  venom.set_grad_enabled(prev)
  tap.ok((w * 2):grad_fn() ~= nil, "set_grad_enabled(true) records again")
end

-- after_backward and scale_grad ------------------------------------------------------------
do
  local calls = {}
  venom.after_backward(function() calls[#calls + 1] = "a" end)
  venom.after_backward(function() calls[#calls + 1] = "b" end)
  local w = venom.tensor({ 1, -2, 3 }, { requires_grad = true })
  tap.is(#calls, 0, "after_backward: nothing runs before the backward")
  local function square_sum(t) return (t * t):sum() end
  square_sum(w):backward()
  square_sum(w):backward()
  tap.is(table.concat(calls, ","), "a,b", "after_backward: each function once, in order, after the next backward")
  venom.after_backward(function() calls[#calls + 1] = "c" end)
  local ok = pcall(function() venom.tensor({ 1, 2 }):sum():backward() end) -- no graph: fails
  square_sum(w):backward()
  tap.ok(not ok and #calls == 2, "a failed backward drops the queue")
  tap.error_like(function() venom.after_backward(3) end, "fn", "after_backward takes a function")
  -- a function that fails does not skip the ones queued after it (nn.MoE's
  -- replica all-reduce may be one), and backward raises the first error
  calls = {}
  venom.after_backward(function() error("first failure") end)
  venom.after_backward(function() calls[#calls + 1] = "after" end)
  venom.after_backward(function() error("second failure") end)
  tap.error_like(function() square_sum(w):backward() end, "first failure",
    "after_backward: backward raises the first function's error")
  tap.is(table.concat(calls, ","), "after", "after_backward: the functions after a failing one still run")
  square_sum(w):backward()
  tap.is(#calls, 1, "after_backward: the queue is empty after a backward whose functions failed")
  -- y = scale_grad(x, s) is x in the forward, s · dL/dy in the backward:
  -- d/dx Σ y² = 2·s·x (exact for s = 3 and these small integers).
  local dist = require "venom.distributed"
  local x = venom.tensor({ 1, -2, 3 }, { requires_grad = true })
  local y = dist.scale_grad(x, 3)
  tap.ok(y:grad_fn() == "scale_grad" and (y - x):abs():max():item() == 0, "scale_grad: the same values")
  square_sum(y):backward()
  same(x.grad, { 6, -12, 18 }, 0, "scale_grad: the gradient times the scale")
  tap.error_like(function() dist.scale_grad(x, 0 / 0) end, "scale = %-?nan; expected a finite number",
    "scale_grad refuses a scale that is not finite")
  tap.error_like(function() dist.scale_grad(nil, 2) end, "bad argument #1 to 'dist%.scale_grad' %(expected a tensor",
    "scale_grad: a bad argument names dist.scale_grad, the function the user called")
end

-- free and memory ------------------------------------------------------------------------
do
  local t = venom.ones(100)
  local v = t:narrow(1, 1, 10)
  t:free()
  t:free()
  tap.ok(t:is_freed(), "free is idempotent")
  tap.is(tostring(t), "tensor(<freed>)", "a freed tensor prints as freed")
  tap.is(v:sum():item(), 10, "a view keeps its storage after free")

  collectgarbage()
  local base = venom.memory_stats()
  local peak = 0
  for _ = 1, 300 do
    local z = venom.zeros(1024, 1024) -- 4 MB each, never freed by hand
    z = z + 1
    local in_use = venom.memory_stats()
    if in_use > peak then peak = in_use end
  end
  tap.ok(peak - base < 128 * 2 ^ 20,
    ("garbage tensors are collected: peak %.0f MB over the start for 2.4 GB made"):format((peak - base) / 2 ^ 20))
end

-- Memory that is live (here held in a table, in training a forward pass's
-- activations held by its graph) is not garbage: a full collection that
-- frees little doubles the growth the next one waits for (32, 64, 128 MB),
-- so 160 MB of live tensors cost 3 collections, not one per 32 MB. Counted
-- by a sentinel whose finalizer re-arms it at each full collection.
do
  collectgarbage()
  local cycles = 0
  local function arm()
    local p = newproxy(true)
    getmetatable(p).__gc = function() cycles = cycles + 1; arm() end
  end
  arm()
  local live = {}
  for i = 1, 40 do live[i] = venom.zeros(1024, 1024) end -- 4 MB each
  tap.ok(cycles >= 1 and cycles <= 3,
    ("160 MB of live tensors: %d full collections (at most 3)"):format(cycles))
  for i = 1, 40 do live[i]:free() end
  live = nil
  collectgarbage()
  local base, peak = venom.memory_stats(), 0
  for _ = 1, 100 do
    local z = venom.zeros(1024, 1024) + 1 -- garbage again: collected as before
    local in_use = venom.memory_stats()
    if in_use > peak then peak = in_use end
  end
  tap.ok(peak - base < 128 * 2 ^ 20,
    ("then garbage is collected again: peak %.0f MB over the start"):format((peak - base) / 2 ^ 20))
end

tap.done()
