-- venom.amp.GradScaler, on the CPU: the scaled loss, the unscaled gradients,
-- a step skipped on inf or NaN gradients (the parameters untouched) with the
-- scale shrinking, growth after growth_interval clean steps, a whole
-- scaled SGD run equal to the unscaled one, and the option checks.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local optim = require "venom.optim"
local amp = require "venom.amp"

tap.ok(venom.amp == amp, "venom.amp is the module require 'venom.amp' returns")

-- The list of numbers a equals the list b, element for element.
local function same(a, b, name)
  local ok = #a == #b
  for i = 1, #b do ok = ok and a[i] == b[i] end
  if not tap.ok(ok, name) then tap.diag("got {%s}, want {%s}", table.concat(a, ", "), table.concat(b, ", ")) end
end

local function param(values)
  return venom.tensor(values):requires_grad_(true)
end

-- scale, unscale_, step and update on one parameter
do
  local p = param({ 1, -2, 3 })
  local opt = optim.SGD({ p }, { lr = 0.1 })
  local s = amp.GradScaler({ init_scale = 1024, growth_interval = 2 })
  local loss = (p * venom.tensor({ 0.5, 0.25, -1 })):sum()
  local scaled = s:scale(loss)
  tap.is(scaled:item(), loss:item() * 1024, "scale: loss × S")
  scaled:backward()
  same(p.grad:totable(), { 512, 256, -1024 }, "the gradient of the scaled loss is S times the true one")
  s:unscale_(opt)
  same(p.grad:totable(), { 0.5, 0.25, -1 }, "unscale_ divides by S")
  tap.ok(not s.found_inf, "finite gradients: found_inf is false")
  tap.ok(not pcall(s.unscale_, s, opt), "a second unscale_ before update is an error")
  tap.ok(s:step(opt), "step runs (and does not unscale again)")
  same(p:totable(), venom.tensor({ 1 - 0.05, -2 - 0.025, 3 + 0.1 }):totable(), "the SGD step used the unscaled gradient")
  s:update()
  tap.is(s:get_scale(), 1024, "one clean step of growth_interval 2: the scale stays")
  opt:zero_grad()
  s:scale((p * 2):sum()):backward()
  s:step(opt)
  s:update()
  tap.is(s:get_scale(), 2048, "two clean steps: the scale doubles")
end

-- inf and NaN gradients: the step is skipped, the scale backs off
for _, bad in ipairs({ math.huge, 0 / 0 }) do
  local p = param({ 1, 2 })
  local opt = optim.SGD({ p }, { lr = 0.1 })
  local s = amp.GradScaler({ init_scale = 8, backoff_factor = 0.25 })
  s:scale((p * venom.tensor({ 1, bad })):sum()):backward()
  tap.ok(not s:step(opt), ("gradient %s: step is skipped"):format(tostring(bad)))
  tap.ok(s.found_inf, "found_inf is set")
  same(p:totable(), { 1, 2 }, "the parameter is untouched")
  s:update()
  tap.is(s:get_scale(), 2, "the scale shrinks by backoff_factor")
  opt:zero_grad()
  s:scale((p * 3):sum()):backward()
  tap.ok(s:step(opt), "the next clean step runs")
  s:update()
end

-- A scaled run equals the unscaled one (S a power of two: exact in f32).
do
  local function run(scaler)
    venom.manual_seed(5)
    local w = venom.randn(4, 3):requires_grad_(true)
    local x, y = venom.randn(8, 3), venom.randn(8, 4)
    local opt = optim.Adam({ w }, { lr = 0.01 })
    for _ = 1, 5 do
      opt:zero_grad()
      local loss = venom.mse_loss(x:matmul(w:t()), y)
      if scaler then
        scaler:scale(loss):backward()
        scaler:step(opt)
        scaler:update()
      else
        loss:backward()
        opt:step()
      end
    end
    return w:totable()
  end
  local a, b = run(nil), run(amp.GradScaler({ init_scale = 2 ^ 10, growth_interval = 2 }))
  local same = true
  for i = 1, 4 do for j = 1, 3 do same = same and a[i][j] == b[i][j] end end
  tap.ok(same, "5 Adam steps through the scaler (the scale growing) give the unscaled run's weights")
end

-- option checks
for _, case in ipairs({
  { { init_scale = 0 }, "init_scale" }, { { growth_factor = 1 }, "growth_factor" },
  { { backoff_factor = 1 }, "backoff_factor" }, { { growth_interval = 0.5 }, "growth_interval" },
  { { init_scale = 0 / 0 }, "init_scale" }, { { typo = 1 }, "typo" },
}) do
  local ok, err = pcall(amp.GradScaler, case[1])
  tap.ok(not ok and tostring(err):find(case[2], 1, true), "GradScaler: bad " .. case[2] .. " is an error naming it")
end
tap.ok(not pcall(amp.GradScaler().scale, amp.GradScaler(), 3), "scale of a number is an error")
tap.error_like(function() amp.GradScaler({ init_scale = "1" }) end,
  "^[^\n]*test_amp%.lua:%d+: GradScaler: init_scale must be a finite number > 0, got a string %(1%)",
  "GradScaler: a string option is named as a string, the error at the caller's line")
do
  local s = amp.GradScaler({ init_scale = 4 })
  tap.error_like(function() s:step(nil) end, "GradScaler:step: expected an optimizer .*got nil",
    "GradScaler:step(nil) is a clear error")
  tap.error_like(function() s:step({}) end, "GradScaler:step: expected an optimizer .*without a params list",
    "GradScaler:step({}) is a clear error")
  tap.error_like(function() s:unscale_(3) end, "GradScaler:unscale_: expected an optimizer .*got number",
    "GradScaler:unscale_(3) is a clear error")
  tap.ok(not s.unscaled, "a refused unscale_ changes nothing")
  tap.error_like(function() s:update(1024) end, "GradScaler:update: takes no argument",
    "GradScaler:update(new_scale) is refused rather than ignored")
  tap.is(s:get_scale(), 4, "the refused update left the scale as it was")
end

tap.error_like(function() venom.autocast("f8", function() end) end,
  "^[^\n]*test_amp%.lua:%d+: autocast: dtype must be 'bf16', 'f16' or 'f32' %(or nil: off%), got 'f8'",
  "autocast: a bad dtype is named, at the caller's line")
tap.error_like(function() venom.autocast(16, function() end) end, "autocast: dtype must be .*got number",
  "autocast: a number for the dtype is refused")
tap.is(venom.autocast(nil, function() return venom.get_autocast() end), "f32", "autocast(nil, fn): off, as set_autocast(nil)")

tap.done()
