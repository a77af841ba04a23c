-- Class targets of cross_entropy and nll_loss from Lua: 1-based, any integer
-- dtype, left as they were, and checked once by the engine; a bad one is
-- still named in 1-based terms, and other errors keep the engine's message.
package.path = (arg[0]:match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"

venom.manual_seed(7)
local z = venom.randn(4, 3)
local t64 = venom.tensor({ 3, 1, 2, 3 }, "i64")
local ref = venom.cross_entropy(z, t64, "none")
for _, dt in ipairs({ "i32", "u8" }) do
  local t = t64:to(dt)
  tap.ok((venom.cross_entropy(z, t, "none") - ref):abs():max():item() == 0,
    "cross_entropy: " .. dt .. " targets give the i64 losses")
  tap.ok((venom.nll_loss(z:log_softmax(2), t, "none") - ref):abs():max():item() < 1e-6,
    "nll_loss: " .. dt .. " targets agree with cross_entropy")
end
-- row 1 with target 3 (the last class): loss = log Σ exp(z) − z[1][3]
local row = z:narrow(1, 1, 1)
local want = math.log(row:exp():sum():item()) - z:get(1, 3)
tap.ok(math.abs(ref:get(1) - want) < 1e-5, "target 3 picks the third class (1-based)")
local _ = venom.cross_entropy(z, t64) -- the targets are not changed in place
tap.is(t64:get(1), 3, "the target tensor keeps its 1-based values")

for _, c in ipairs({ { 4, "target%[3%] = 4 is out of range %(expected 1%.%.3%)" },
                     { 0, "target%[3%] = 0 is out of range %(expected 1%.%.3%)" },
                     { -2, "target%[3%] = %-2 is out of range %(expected 1%.%.3%)" } }) do
  local bad = venom.tensor({ 1, 2, c[1], 3 }, "i64")
  tap.error_like(function() local r = venom.cross_entropy(z, bad) return r end,
    "cross_entropy: " .. c[2], "cross_entropy: target " .. c[1] .. " named 1-based")
  tap.error_like(function() local r = venom.nll_loss(z, bad, "sum") return r end,
    "nll_loss: " .. c[2], "nll_loss: target " .. c[1] .. " named 1-based")
end
tap.error_like(function() local r = venom.cross_entropy(z, venom.tensor({ 1, 2 }, "i64")) return r end,
  "cross_entropy: logits %(4, 3%) and target %(2,%)", "a short target keeps the engine's shape message")
tap.error_like(function() local r = venom.cross_entropy(z, venom.tensor({ { 1, 2 } }, "i64")) return r end,
  "expected target of shape %(4%)", "a 2-D target keeps the engine's shape message")
tap.done()
