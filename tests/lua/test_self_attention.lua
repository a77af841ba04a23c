-- venom.causal_self_attention(qkv, n_head) on the CPU: the same numbers,
-- bit for bit, as splitting the fused projection into heads by hand,
-- venom.causal_attention and merging the heads back (what models/gpt.lua
-- wrote before the op existed), forward and gradient; and bad arguments
-- raising Lua errors that name what was expected and what was found.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"

-- The composition, as models/gpt.lua had it.
local function by_hand(qkv, H)
  local s = qkv:shape()
  local B, T, C = s[1], s[2], s[3] / 3
  local function heads(i)
    return qkv:narrow(3, (i - 1) * C + 1, C):reshape(B, T, H, C / H):transpose(2, 3):contiguous()
  end
  local y = venom.causal_attention(heads(1), heads(2), heads(3))
  return y:transpose(2, 3):reshape(B, T, C)
end

venom.manual_seed(5)
for _, c in ipairs({ { 2, 7, 3, 4 }, { 1, 1, 1, 8 }, { 3, 20, 2, 6 } }) do
  local B, T, H, Dh = c[1], c[2], c[3], c[4]
  local C = H * Dh
  local what = ("causal_self_attention B %d, T %d, %d heads of %d"):format(B, T, H, Dh)
  local x = venom.randn(B, T, 3 * C)
  local a, b = x:clone():requires_grad_(true), x:clone():requires_grad_(true)
  local ya, yb = venom.causal_self_attention(a, H), by_hand(b, H)
  tap.is(table.concat(ya:shape(), ","), table.concat({ B, T, C }, ","), what .. ": shape (B, T, C)")
  tap.is((ya - yb):abs():max():item(), 0, what .. ": the composition's values exactly")
  local w = venom.randn(B, T, C)
  ;(ya * w):sum():backward()
  ;(yb * w):sum():backward()
  tap.is((a.grad - b.grad):abs():max():item(), 0, what .. ": the composition's gradient exactly")
end

local qkv = venom.randn(2, 5, 12)
tap.error_like(function() venom.causal_self_attention(qkv, 3) end,
  "expected qkv %(B, T, 3C%) with C a multiple of n_head.*%(2, 5, 12%) and n_head 3",
  "causal_self_attention: 3C not a multiple of 3·n_head")
tap.error_like(function() venom.causal_self_attention(qkv, 0) end, "n_head 0",
  "causal_self_attention: n_head 0")
tap.error_like(function() venom.causal_self_attention(venom.randn(5, 12), 2) end,
  "expected qkv %(B, T, 3C%).*%(5, 12%)", "causal_self_attention: 2-d qkv")
tap.error_like(function() venom.causal_self_attention(qkv, 1.5) end, "n_head must be an integer",
  "causal_self_attention: n_head 1.5")
tap.error_like(function() venom.causal_self_attention(qkv) end, "n_head must be an integer",
  "causal_self_attention: n_head missing")
tap.error_like(function() venom.causal_self_attention(venom.ones(2, 5, 12, { dtype = "i32" }), 2) end,
  "causal_self_attention: qkv.*f32", "causal_self_attention: an i32 qkv")

tap.done()
