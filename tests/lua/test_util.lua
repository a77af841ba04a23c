-- venom.util: argument parsing, progress bar output, formatting helpers.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local util = require "venom.util"
local venom = require "venom"

local defaults = { epochs = 5, lr = 1e-3, batch_size = 128, cosine = false, name = "run" }

-- parse_args: types follow the defaults -----------------------------------------
do
  local o = util.parse_args({ "--epochs", "3", "--lr=0.01", "--batch-size", "64",
                              "--cosine", "data.bin", "--name", "x1" }, defaults)
  tap.is(o.epochs, 3, "parse_args: --epochs 3 is the number 3")
  tap.is(type(o.epochs), "number", "parse_args: numbers are converted")
  tap.near(o.lr, 0.01, 1e-15, "parse_args: --lr=0.01 form")
  tap.is(o.batch_size, 64, "parse_args: --batch-size sets batch_size")
  tap.is(o.cosine, true, "parse_args: a bare flag sets true")
  tap.is(o.name, "x1", "parse_args: string option")
  tap.is(o[1], "data.bin", "parse_args: positional argument kept in order")
  tap.is(defaults.epochs, 5, "parse_args: defaults table is not modified")

  local d = util.parse_args({}, defaults)
  tap.is(d.epochs, 5, "parse_args: default kept when absent")
  tap.is(d.cosine, false, "parse_args: flag default kept")

  local n = util.parse_args({ "--no-cosine" }, { cosine = true })
  tap.is(n.cosine, false, "parse_args: --no-flag sets false")
  local f = util.parse_args({ "--cosine=false" }, { cosine = true })
  tap.is(f.cosine, false, "parse_args: --flag=false")
  local neg = util.parse_args({ "--lr", "-0.5" }, defaults)
  tap.is(neg.lr, -0.5, "parse_args: a negative number is a value, not an option")
end

tap.error_like(function() util.parse_args({ "--epoch", "3" }, defaults) end,
  "unknown option %-%-epoch; known options: %-%-batch%-size, %-%-cosine, %-%-epochs, %-%-lr, %-%-name",
  "parse_args: unknown option lists the known ones")
tap.error_like(function() util.parse_args({ "--epochs", "five" }, defaults) end,
  "%-%-epochs expects a number, got 'five'", "parse_args: a non-number for a number option")
tap.error_like(function() util.parse_args({ "--lr" }, defaults) end,
  "%-%-lr expects a number value, but none was given", "parse_args: missing value")
tap.error_like(function() util.parse_args({ "--name", "--epochs", "2" }, defaults) end,
  "%-%-name needs a value, got the option %-%-epochs after it", "parse_args: an option where a value belongs")
tap.error_like(function() util.parse_args({ "--lr", "--epochs=2" }, defaults) end,
  "%-%-lr needs a value, got the option %-%-epochs after it", "parse_args: an --opt=value where a value belongs")
tap.error_like(function() util.parse_args({ "--cosine=maybe" }, defaults) end,
  "%-%-cosine is a flag", "parse_args: bad flag value")
tap.ok(util.usage(defaults, { lr = "learning rate" }):find("--batch-size N", 1, true),
  "usage lists options with dashes")

-- ProgressBar -------------------------------------------------------------------------

-- A fake file and clock make the output deterministic.
local function sink()
  local s = { parts = {} }
  function s:write(...)
    for _, p in ipairs({ ... }) do self.parts[#self.parts + 1] = p end
  end
  function s:flush() end
  function s:text() return table.concat(self.parts) end
  return s
end
local function fake_clock()
  local c = { t = 0 }
  return c, function() return c.t end
end

do
  local out, c = sink(), nil
  local clock
  c, clock = fake_clock()
  local bar = util.ProgressBar(100, { desc = "epoch 1", file = out, tty = false, clock = clock })
  for i = 1, 100 do
    c.t = i * 0.5
    bar:update(1, { loss = 1 / i })
  end
  bar:close()
  local text = out:text()
  tap.ok(not text:find("\r", 1, true), "progress bar (not a tty): no carriage return")
  local _, lines = text:gsub("\n", "")
  tap.is(lines, 10, "progress bar (not a tty): one line per 10%")
  tap.ok(text:find("epoch 1:  10%% 10/100 %[00:05<00:45, 2%.0it/s, loss=0%.1%]\n"),
    "progress bar (not a tty): first line has count, elapsed, ETA, rate, loss")
  tap.ok(text:find("epoch 1: 100%% 100/100 %[00:50<00:00, 2%.0it/s, loss=0%.01%]\n$"),
    "progress bar (not a tty): last line at 100%")
end

do
  local out = sink()
  local c, clock = fake_clock()
  local bar = util.ProgressBar(7, { file = out, tty = false, clock = clock })
  for _ = 1, 3 do c.t = c.t + 1; bar:update() end
  bar:close()
  local _, lines = out:text():gsub("\n", "")
  tap.is(lines, 4, "progress bar (not a tty): 3 of 7 steps cross 3 deciles; close adds a line")
  tap.ok(out:text():find(" 42%% 3/7 %[00:03<00:04, 1%.0it/s%]\n$"),
    "progress bar (not a tty): close prints the final state")
end

do
  local out = sink()
  local c, clock = fake_clock()
  local bar = util.ProgressBar(10, { file = out, tty = false, clock = clock })
  for _ = 1, 2 do c.t = c.t + 24.4; bar:update() end
  bar:close()
  tap.ok(out:text():find(" 2/10 %[00:49<03:15, 24%.4s/it%]\n$"),
    "progress bar: an item slower than a second is shown as s/it, not 0.0it/s")
end

do
  local out = sink()
  local c, clock = fake_clock()
  local bar = util.ProgressBar(4, { desc = "train", width = 8, file = out, tty = true, clock = clock })
  for _ = 1, 4 do c.t = c.t + 1; bar:update(1, { loss = 0.25 }) end
  bar:close()
  local text = out:text()
  tap.ok(text:find("\r", 1, true), "progress bar (tty): redraws with carriage returns")
  tap.ok(text:find("\rtrain 100%%|" .. ("█"):rep(8) .. "| 4/4 %[00:04<00:00, 1%.0it/s, loss=0%.25%]"),
    "progress bar (tty): full bar, count, times, rate, postfix")
  tap.ok(text:find("\rtrain  50%%|" .. ("█"):rep(4) .. "    | 2/4"), "progress bar (tty): half bar")
  tap.is(text:sub(-1), "\n", "progress bar (tty): close ends the line")
end

-- Formatting ------------------------------------------------------------------------------

tap.is(util.format_time(65), "01:05", "format_time: minutes and seconds")
tap.is(util.format_time(3661), "1:01:01", "format_time: hours")
tap.is(util.format_time(nil), "?", "format_time: unknown")
tap.is(util.format_bytes(512), "512 B", "format_bytes: bytes")
tap.is(util.format_bytes(1536), "1.5 KiB", "format_bytes: KiB")
tap.is(util.format_bytes(3 * 1024 ^ 3), "3.0 GiB", "format_bytes: GiB")

-- accuracy: the fraction of arg-max predictions equal to the 1-based targets.
do
  local venom, nn, data = require "venom", require "venom.nn", require "venom.data"
  local model = nn.Linear(3, 3)
  venom.no_grad(function()
    model.weight:copy_(venom.tensor({ { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } }))
    model.bias:fill_(0)
  end)
  -- logits = x; argmax rows: 1, 2, 3, 3, 1 against targets 1, 2, 1, 3, 2 → 3 of 5
  local x = venom.tensor({ { 5, 1, 0 }, { 0, 2, 1 }, { 0, 0, 9 }, { 1, 2, 3 }, { 7, 0, 0 } })
  local y = venom.tensor({ 1, 2, 1, 3, 2 }, "i64")
  local loader = data.DataLoader({ x, y }, { batch_size = 2 })
  model:train()
  tap.near(util.accuracy(model, loader), 0.6, 1e-12, "accuracy: 3 of 5 over uneven batches")
  tap.ok(model.training, "accuracy restores training mode")
end

-- check_arg_device: cpu always; cuda only with a device; anything else named.
do
  tap.is(util.check_arg_device({ device = "cpu" }, "device"), "cpu", "check_arg_device: cpu")
  tap.error_like(function() util.check_arg_device({ device = "gpu" }, "device") end,
    "%-%-device must be cpu or cuda, got \"gpu\"", "check_arg_device: an unknown device")
  if venom.cuda.is_available() then
    tap.is(util.check_arg_device({ device = "cuda" }, "device"), "cuda", "check_arg_device: cuda")
  else
    tap.error_like(function() util.check_arg_device({ device = "cuda" }, "device") end,
      "%-%-device cuda: no CUDA device is available", "check_arg_device: cuda without a device")
  end
end

-- check_int: one rule for every integer argument --------------------------------------
do
  tap.is(util.check_int(3, "n", { min = 1 }), 3, "check_int: returns the value")
  tap.is(util.check_int(-2 ^ 53, "n"), -2 ^ 53, "check_int: -2^53 is an integer")
  local bad = { { 1.5, "got 1%.5" }, { 0 / 0, "got nan" }, { math.huge, "got inf" },
                { -math.huge, "got %-inf" }, { 2 ^ 53 + 2, "got 9%.007" }, { "8", "got string \"8\"" },
                { nil, "got nil" } }
  for _, b in ipairs(bad) do
    tap.error_like(function() util.check_int(b[1], "n", { who = "f" }) end,
      "f: n must be an integer, " .. b[2], "check_int: refuses " .. b[2]:gsub("%%", ""))
    tap.ok(not util.is_int(b[1]), "is_int: false for " .. b[2]:gsub("%%", ""))
  end
  tap.error_like(function() util.check_int(0, "k", { min = 1 }) end,
    "k must be a positive integer, got 0", "check_int: min 1 reads 'a positive integer'")
  tap.error_like(function() util.check_int(-1, "k", { min = 0 }) end,
    "k must be a non%-negative integer, got %-1", "check_int: min 0 reads 'a non-negative integer'")
  tap.error_like(function() util.check_int(3, "k", { min = 4 }) end,
    "k must be an integer >= 4, got 3", "check_int: another min")
  tap.error_like(function() util.check_int(9, "k", { min = 4, max = 8 }) end,
    "k must be an integer in %[4, 8%], got 9", "check_int: min and max")
  tap.error_like(function() util.check_int(2, "k", { min = 3, what = "more than two" }) end,
    "k must be more than two, got 2", "check_int: the caller's words")
  tap.error_like(function() util.check_arg_int({ epochs = math.huge }, "epochs", 1) end,
    "%-%-epochs must be a whole number >= 1, got inf", "check_arg_int: math.huge is not a whole number")
end

-- format_shape, error_text, nn.is_module ------------------------------------------------
do
  tap.is(util.format_shape(venom.zeros(2, 3)), "(2, 3)", "format_shape: a tensor")
  tap.is(util.format_shape({ 4 }), "(4)", "format_shape: a list of sizes")
  local _, err = pcall(function() error("boom: at 3:4: here") end)
  tap.is(util.error_text(err), "boom: at 3:4: here", "error_text: drops the file:line position")
  tap.is(util.error_text("boom: at 3:4: here"), "boom: at 3:4: here",
    "error_text: a message without one is kept whole")
  local nn = require "venom.nn"
  local Sub = nn.Linear:extend("Sub")
  tap.ok(nn.is_module(nn.ReLU()) and nn.is_module(Sub(2, 2)), "is_module: instances of subclasses")
  local selfish = setmetatable({}, {})
  getmetatable(selfish).__index = getmetatable(selfish)
  setmetatable(getmetatable(selfish), getmetatable(selfish))
  tap.ok(not nn.is_module(nn.Linear) and not nn.is_module({ forward = print })
    and not nn.is_module(selfish) and not nn.is_module(venom.zeros(1)),
    "is_module: a class, a table with forward, a self-indexing table and a tensor are not modules")
end

-- util.die: "error: <msg>" on stderr, the given status, a --help hint for status 2 ------
do
  local exe = os.getenv("VENOM_EXE") or arg[-1]
  local script = os.tmpname()
  local function die(code)
    local f = assert(io.open(script, "w"))
    f:write(code)
    f:close()
    local p = io.popen(("'%s' '%s' 2>&1; echo \"rc=$?\""):format(exe, script))
    local out = p:read("*a")
    p:close()
    return out:gsub("rc=%d+\n$", ""), tonumber(out:match("rc=(%d+)\n$"))
  end
  local out, rc = die([[
local util = require "venom.util"
local x = require("venom").zeros(3)
local ok, err = pcall(error, "no data here")
util.die(err)]])
  tap.ok(rc == 1 and out == "error: no data here\n", "die: the message without its position, status 1")
  if rc ~= 1 then tap.diag("got (status %s): %s", tostring(rc), out) end
  out, rc = die([[require("venom.util").die("--k must be odd", 2)]])
  tap.ok(rc == 2 and out == ("error: --k must be odd\nrun '%s --help' to list the options\n")
    :format(script), "die: status 2 adds the --help hint")
  if rc ~= 2 then tap.diag("got (status %s): %s", tostring(rc), out) end
  os.remove(script)
end

-- venom's newer modules are venom's own to util.fail: an error raised in
-- data_sampler.lua points at the caller's line.
do
  local data = require "venom.data"
  local line = debug.getinfo(1, "l").currentline + 1
  tap.error_like(function() data.DistributedSampler(0) end,
    "^[^:]*test_util%.lua:" .. line .. ": data%.DistributedSampler: n must be",
    "DistributedSampler's errors point at the caller's line (not data_sampler.lua)")
end

-- README's layout table: one `tutorials/` row, naming every tutorial.
do
  local f = assert(io.open("README.md", "rb"))
  local readme = f:read("*a")
  f:close()
  local rows = {}
  for row in readme:gmatch("\n(| `tutorials/` |[^\n]*)") do rows[#rows + 1] = row end
  local missing = {}
  local ls = io.popen("ls tutorials")
  for name in ls:lines() do
    if #rows == 1 and not rows[1]:find("`" .. name, 1, true) then missing[#missing + 1] = name end
  end
  ls:close()
  tap.ok(#rows == 1 and #missing == 0, ("README: one tutorials/ row (found %d) naming every tutorial "
    .. "(missing: %s)"):format(#rows, table.concat(missing, ", ")))
end

tap.done()
