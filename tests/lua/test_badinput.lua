-- Bad input from Lua: each case is a Lua error whose message names what was
-- expected and what was found, and the process carries on to the next case.
package.path = (arg[0]:match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"

local a, b = venom.ones(2, 3), venom.ones(4, 5)

-- Calls are not tail calls here (local r = ...), so messages carry the line
-- and the function's name as a user's script would see them.
tap.error_like(function() local r = a:matmul(b) return r end,
  "test_badinput%.lua:%d+: matmul: %(2, 3%) and %(4, 5%): inner dims 3 and 4 differ",
  "matmul shape mismatch names both shapes")
tap.error_like(function() local r = a + venom.ones(4) return r end,
  "shapes %(2, 3%) and %(4,%) do not broadcast", "broadcast mismatch names both shapes")
tap.error_like(function() local r = a + venom.ones(3, { dtype = "i64" }) return r end,
  "same dtype.*f32 and i64", "mixed dtypes name both")
tap.error_like(function() local r = a:long():log() return r end,
  "expected dtype f32, got i64", "an f32-only op on i64")
tap.error_like(function() local r = venom.zeros(2, { dtype = "f64" }) return r end,
  "bad argument #2 to 'zeros' %(unknown dtype 'f64' %(expected 'f32', 'i32', 'i64', 'u8', 'bf16' or 'f16'%)%)",
  "an unknown dtype name")

-- a number or a table where a tensor is needed
tap.error_like(function() local r = venom.matmul(a, 3) return r end,
  "bad argument #2 to 'matmul' %(expected a tensor, found number%)", "a number for a tensor")
tap.error_like(function() local r = a:matmul({}) return r end,
  "bad argument #1 to 'matmul' %(expected a tensor, found table%)", "a table for a tensor (method)")
tap.error_like(function() local r = a + {} return r end,
  "expected a tensor or a number, found table", "a table in arithmetic")
tap.error_like(function() local r = venom.cross_entropy({}, a) return r end,
  "expected a tensor, found table", "a table as logits")
tap.error_like(function() local r = venom.relu("x") return r end,
  "expected a tensor, found string", "a string for a tensor")

-- dims and sizes
tap.error_like(function() local r = a:sum("1") return r end,
  "bad argument #1 to 'sum' %(dim must be an integer, found string%)", "a string as a dim")
tap.error_like(function() local r = a:transpose(1, 3) return r end,
  "dim 3 out of range for 2 dims %(expected 1%.%.2 or %-2%.%.%-1%)", "a dim out of range")
tap.error_like(function() local r = a:softmax(0) return r end,
  "dim 0 out of range", "dim 0 is out of range in 1-based Lua")
tap.error_like(function() local r = venom.zeros(2, -1) return r end,
  "size 2 of the shape must be a non%-negative integer, found %-1", "a negative size")
tap.error_like(function() local r = venom.zeros("a", 2) return r end,
  "size 1 of the shape must be a non%-negative integer, found string", "a string size")
tap.error_like(function() local r = a:reshape(4, 2) return r end,
  "reshape: shape %(2, 3%) has 6 elements but the target %(4, 2%) has 8", "reshape to a wrong numel")

-- autograd misuse
tap.error_like(function() a:backward() end, "does not require grad", "backward without a parameter")
tap.error_like(function()
  local w = venom.ones(2, { requires_grad = true })
  local y = w * w
  y:backward()
end, "non%-scalar tensor %(shape %(2,%)%); expected one element", "backward on a non-scalar without a gradient")
do
  local w = venom.ones(2, { requires_grad = true })
  local loss = (w * w):sum()
  loss:backward()
  tap.error_like(function() loss:backward() end, "already released", "backward twice through a released graph")
  local y = w * 3
  y:backward(venom.tensor({ 1, 2 }))
  tap.is(w.grad:get(2), 2 + 6, "backward with an explicit gradient still works after the errors")
  tap.error_like(function() y:backward(venom.ones(3)) end, "backward", "a gradient of the wrong shape")
end

-- use after free
do
  local t = venom.ones(3)
  t:free()
  tap.error_like(function() local r = t + 1 return r end,
    "the tensor was freed %(t:free%(%)%) and can no longer be used", "arithmetic on a freed tensor")
  tap.error_like(function() local r = t:shape() return r end, "was freed", "shape() of a freed tensor")
  tap.error_like(function() local r = t[1] return r end, "was freed", "indexing a freed tensor")
  tap.error_like(function() local r = venom.matmul(a, t) return r end,
    "bad argument #2 to 'matmul' %(the tensor was freed", "a freed argument")
end

-- out-of-range positions, in 1-based terms
tap.error_like(function() local r = a:select(1, 3) return r end,
  "index 3 out of range for dim 1 of size 2 %(expected 1%.%.2%)", "select past the end")
tap.error_like(function() local r = a:select(2, 0) return r end,
  "index 0 out of range for dim 2 of size 3", "select(dim, 0)")
tap.error_like(function() local r = a:narrow(2, 3, 2) return r end,
  "narrow: start 3, length 2 is out of range for dim 2 of size 3", "narrow past the end")
tap.error_like(function() local r = a:narrow(1, 0, 1) return r end,
  "narrow: start 0", "narrow from 0")
tap.error_like(function() local r = a[3] return r end, "index 3 out of range for dim 1 of size 2", "t[i] past the end")
tap.error_like(function() local r = a:get(1, 4) return r end, "index 4 out of range for dim 2 of size 3", "get past the end")
tap.error_like(function() local r = a:get(1) return r end, "expected 2 indices for a 2%-d tensor, found 1", "get with too few indices")
tap.error_like(function() local r = venom.cross_entropy(a, venom.tensor({ 1, 4 }, "i64")) return r end,
  "cross_entropy: target%[2%] = 4 is out of range %(expected 1%.%.3%)", "a class target past C")
tap.error_like(function() local r = venom.cross_entropy(a, venom.tensor({ 0, 1 }, "i64")) return r end,
  "target%[1%] = 0 is out of range %(expected 1%.%.3%)", "class target 0 (0-based habit)")
tap.error_like(function() local r = venom.nll_loss(a, venom.tensor({ 1, 2 })) return r end,
  "target must be an integer tensor %(i64, i32 or u8%) of 1%-based indices, found f32", "f32 targets")
tap.error_like(function() local r = venom.cross_entropy(a, venom.tensor({ 1, 2, 3 }, "i64")) return r end,
  "cross_entropy", "a target of the wrong length")
tap.error_like(function() local r = a:index_select(1, venom.tensor({ 3 }, "i64")) return r end,
  "index_select: index%[1%] = 3 is out of range %(expected 1%.%.2%)", "index_select past the end")

-- bad tables for tensor()
tap.error_like(function() local r = venom.tensor({ { 1, 2 }, { 3 } }) return r end,
  "tensor: ragged table: %[2%] has 1 elements, expected 2", "a ragged table")
tap.error_like(function() local r = venom.tensor({ { { 1 }, { 2 } }, { { 3 }, { 4, 5 } } }) return r end,
  "ragged table: %[2%]%[2%] has 2 elements, expected 1", "ragged deep inside")
tap.error_like(function() local r = venom.tensor({ 1, "x" }) return r end,
  "tensor: expected a number at %[2%], found string", "a string element")
tap.error_like(function() local r = venom.tensor({ { 1, 2 }, 3 }) return r end,
  "tensor: expected a table at %[2%] %(a row of 2%), found number", "a number where a row belongs")
tap.error_like(function() local r = venom.tensor({ 1, true }) return r end,
  "expected a number at %[2%], found boolean", "a boolean element")
tap.error_like(function() local r = venom.tensor("1, 2") return r end,
  "expected a %(nested%) table of numbers or a number, found string", "a string for tensor()")
tap.error_like(function() local r = venom.tensor({ 300 }, "u8") return r end,
  "value 300 at %[1%] does not fit in dtype u8", "a value too big for u8")

-- fields
tap.error_like(function() a.foo = 1 end, "cannot set field 'foo' of a tensor", "setting an unknown field")
tap.error_like(function() local r = #venom.tensor(1) return r end, "0%-d tensor has no length", "# of a 0-d tensor")

-- files
tap.error_like(function() local r = venom.idx_load("/nonexistent/train.idx") return r end,
  "/nonexistent/train%.idx", "a missing IDX file is named")

-- after all that, the engine still works
tap.is((venom.ones(2, 2):matmul(venom.ones(2, 2))):sum():item(), 8, "still computing after the errors")
tap.ok(venom.is_grad_enabled(), "grad mode untouched by the errors")

tap.done()
