--- venom.util — small helpers for training scripts: a progress bar, a
-- training epoch, command-line parsing, util.die, human-readable sizes,
-- shapes and durations, and the error helpers the pure-Lua modules use: one
-- integer check (util.check_int) and util.fail, which blames the user's line.
local venom = require "venom"

local util = {}

-- The pure-Lua modules of venom (lua/venom/<name>.lua).
local INTERNAL = { init = true, nn = true, optim = true, data = true, util = true,
                   checkpoint = true, sparse = true, prune = true, plot = true, metrics = true,
                   nn_init = true, nn_utils = true, nn_transformer = true, nn_graph = true, help = true, graph = true,
                   nn_quant = true, nn_conv = true, nn_moe = true, nn_dynamic = true, image = true,
                   data_image = true, data_sampler = true, data_planetoid = true, amp = true,
                   profile = true, nn_moe_parallel = true, nn_moe_placement = true,
                   distributed_zero = true, distributed = true, prune_masks = true,
                   prune_vnm = true, prune_state = true, repl = true }
-- Patterns of other sources util.fail passes over (util.add_internal_source).
local internal_sources = {}

--- Makes util.fail pass over the frames of files whose source (a path)
-- matches `pattern` as it does venom's own: a library built on venom, such
-- as models/gpt.lua, calls this once so that its errors, too, point at its
-- user's line.
function util.add_internal_source(pattern)
  internal_sources[#internal_sources + 1] = pattern
end

local function is_internal(info)
  if info.what == "C" or INTERNAL[info.source:match("[/\\]venom[/\\]([%w_]+)%.lua$")] then
    return true
  end
  for _, pattern in ipairs(internal_sources) do
    if info.source:match(pattern) then return true end
  end
  return false
end

--- Raises `msg` as a Lua error positioned at the first caller outside
-- venom's own Lua files, so that "nn.Linear: in_features must be ..." points
-- at the user's script line rather than at library internals.
function util.fail(msg)
  local level = 2
  while true do
    local info = debug.getinfo(level, "S")
    if not info then
      level = 0 -- no user frame: no position prefix
      break
    end
    if not is_internal(info) then break end
    level = level + 1
  end
  error(msg, level)
end
local fail = util.fail

--- "file:line: " of the user's line: the innermost frame outside venom's own
-- Lua (and C) code, or "" when there is none. The binding puts it in front
-- of the errors its C functions raise, so they point where util.fail's do.
function util.where()
  local level = 2
  while true do
    local info = debug.getinfo(level, "Sl")
    if not info then return "" end
    if not is_internal(info) then
      return info.currentline > 0 and ("%s:%d: "):format(info.short_src, info.currentline) or ""
    end
    level = level + 1
  end
end

--- The text of error value `err` without the "file:line: " position that
-- error() puts in front of a message, for showing it to a user.
function util.error_text(err)
  return (tostring(err):gsub("^[^:\n]*:%d+: ", ""))
end

-- Numbers ------------------------------------------------------------------------

local function number_text(v)
  return v ~= v and "nan" or tostring(v)
end

--- A value as an error message shows it: numbers plainly (nan for NaN), a
-- string with its type (`string "8"`), so that "8" and 8 read differently,
-- anything else as tostring gives it. Returns a string.
local function shown(v)
  if type(v) == "number" then return number_text(v) end
  if type(v) == "string" then return ("string %q"):format(v) end
  return tostring(v)
end
util.shown = shown

--- True when `v` is a number holding an integer that a double represents
-- exactly: |v| <= 2^53, so NaN and ±inf are not integers (math.huge would
-- otherwise pass v == math.floor(v) and mean "never" as a step count).
function util.is_int(v)
  return type(v) == "number" and v == math.floor(v) and v >= -2 ^ 53 and v <= 2 ^ 53
end

--- Checks that `v` is an integer (util.is_int) in [opts.min, opts.max]
-- (either bound optional) and returns it; otherwise fails with
-- "<who>: <name> must be <what>, got <v>". `what` says the range
-- ("a positive integer", "a non-negative integer", "an integer >= 4", "an
-- integer in [4, 8]", "an integer"); opts.what replaces it where a caller's
-- words are better ("an integer greater than warmup_steps (10)").
function util.check_int(v, name, opts)
  opts = opts or {}
  local min, max = opts.min, opts.max
  if util.is_int(v) and (min == nil or v >= min) and (max == nil or v <= max) then
    return v
  end
  local what = opts.what
  if what == nil then
    if min and max then
      what = ("an integer in [%d, %d]"):format(min, max)
    elseif min == 1 then
      what = "a positive integer"
    elseif min == 0 then
      what = "a non-negative integer"
    elseif min then
      what = ("an integer >= %d"):format(min)
    else
      what = "an integer"
    end
  end
  fail(("%s%s must be %s, got %s"):format(opts.who and opts.who .. ": " or "", name, what,
    shown(v)))
end

--- Checks that option `v` is true or false and returns it (`default` when
-- nil); otherwise fails with "<who>: <name> must be true or false, got <v>"
-- ({bias = "no"} and {bias = 0} are true to Lua, so they would otherwise
-- turn the option on).
function util.check_bool(v, name, who, default)
  if v == nil then return default end
  if type(v) ~= "boolean" then
    fail(("%s: %s must be true or false, got %s"):format(who, name, shown(v)))
  end
  return v
end

--- Checks an options table against the names it may hold: nil gives {}, a
-- non-table is an error, and so is a key not in the list `known` (a typo
-- such as {weight_dacay = 0.1} would otherwise be ignored). `who` names the
-- caller in messages ("optim.AdamW"). Returns the table.
function util.check_options(opts, known, who)
  if opts == nil then return {} end
  if type(opts) ~= "table" then
    fail(("%s: options must be a table, got %s"):format(who, type(opts)))
  end
  local allowed = {}
  for _, k in ipairs(known) do allowed[k] = true end
  for k in pairs(opts) do
    if not allowed[k] then
      local names = {}
      for i, name in ipairs(known) do names[i] = name end
      table.sort(names)
      local shown = type(k) == "string" and ("'%s'"):format(k) or ("[%s]"):format(tostring(k))
      fail(("%s: unknown option %s (known options: %s)")
        :format(who, shown, #names > 0 and table.concat(names, ", ") or "none"))
    end
  end
  return opts
end

-- Files -------------------------------------------------------------------------

--- util.read_file(who, path, hint) → the bytes of the file at path (a
-- string). io.open succeeds on a directory and the read fails, so both are
-- checked; errors start with `who` and name the path (and `hint`).
function util.read_file(who, path, hint)
  local f, err = io.open(path, "rb")
  local s, rerr, code
  if f then
    s, rerr, code = f:read("*a")
    f:close()
  end
  if s then return s end
  local msg
  if not f then -- err is "<path>: <reason>"
    msg = ("cannot open %s (%s)"):format(path, (tostring(err):gsub("^.*: ", "")))
  elseif code == 21 then -- EISDIR
    msg = ("%s is a directory; expected a file"):format(path)
  else
    msg = ("cannot read %s (%s)"):format(path, tostring(rerr))
  end
  util.fail(("%s: %s%s"):format(who, msg, hint and "; " .. hint or ""))
end

-- Formatting --------------------------------------------------------------------

--- "512 B", "1.5 KiB", "3.2 MiB", "1.1 GiB".
function util.format_bytes(n)
  local units = { "B", "KiB", "MiB", "GiB", "TiB" }
  local i = 1
  while n >= 1024 and i < #units do
    n = n / 1024
    i = i + 1
  end
  if i == 1 then
    return ("%d B"):format(n)
  end
  return ("%.1f %s"):format(n, units[i])
end

--- Classification accuracy of `model` over `loader` (batches of inputs and
-- 1-based class ids): the fraction of samples whose arg-max logit is the
-- target. Runs in eval mode under no_grad and restores the training mode;
-- each batch's tensors are freed as soon as they are counted.
function util.accuracy(model, loader)
  local was_training = model.training
  model:eval()
  local correct, seen = 0, 0
  venom.no_grad(function()
    for xb, yb in loader:iter() do
      local logits = model(xb)
      local pred = logits:argmax(-1)
      local hits = pred:eq(yb)
      local count = hits:sum()
      correct, seen = correct + count:item(), seen + yb:numel()
      logits:free(); pred:free(); hits:free(); count:free(); xb:free(); yb:free()
    end
  end)
  model:train(was_training)
  return seen > 0 and correct / seen or 0
end

--- A tensor's shape, or a list of sizes, as "(2, 3)" (a 1-d shape: "(4)").
function util.format_shape(t)
  local sizes = type(t) == "table" and t or t:shape()
  return "(" .. table.concat(sizes, ", ") .. ")"
end

--- Seconds as "MM:SS", or "H:MM:SS" from one hour on; "?" for unknown.
function util.format_time(s)
  if s == nil or s ~= s or s == math.huge or s < 0 then
    return "?"
  end
  s = math.floor(s + 0.5)
  local h, m = math.floor(s / 3600), math.floor(s % 3600 / 60)
  if h > 0 then
    return ("%d:%02d:%02d"):format(h, m, s % 60)
  end
  return ("%02d:%02d"):format(m, s % 60)
end

local function format_value(v)
  if type(v) == "number" then
    return ("%.4g"):format(v)
  end
  return tostring(v)
end

-- ProgressBar ----------------------------------------------------------------------

--- A progress bar for `total` steps.
--   On a terminal it redraws one line with "\r" (at most ~10 times a second):
--     desc  42%|████████          | 197/469 [00:02<00:03, 98.5it/s, loss=0.4213]
--   Otherwise (a log file, a pipe) it prints a plain line at every ~10% and at
--   close, never a carriage return. A total of 0 means the length is not
--   known: the bar then shows the count and the rate, with no percentage.
-- opts: desc = "", width = 30 (bar cells), file = io.stdout,
--   tty = venom.isatty(1) (override the detection), clock = venom.clock.
local ProgressBar = {}
ProgressBar.__index = ProgressBar

function util.ProgressBar(total, opts)
  if type(total) ~= "number" or not (total >= 0) or total == math.huge then
    fail("util.ProgressBar: total must be a non-negative number, got " .. tostring(total))
  end
  opts = util.check_options(opts, { "desc", "width", "file", "tty", "clock" }, "util.ProgressBar")
  local self = setmetatable({}, ProgressBar)
  self.total = total
  self.desc = opts.desc or ""
  self.width = opts.width or 30
  self.file = opts.file or io.stdout
  if opts.tty ~= nil then
    self.tty = opts.tty
  else
    self.tty = venom.isatty(1)
  end
  self.clock = opts.clock or venom.clock
  self.n = 0
  self.start = self.clock()
  self.last_draw = -math.huge
  self.last_decile = 0
  self.postfix = nil
  self.closed = false
  return self
end

-- The speed as tqdm prints it: items per second, or seconds per item when
-- an item takes longer than a second (0.0it/s would say nothing).
local function format_rate(rate)
  if rate > 0 and rate < 1 then return ("%.1fs/it"):format(1 / rate) end
  return ("%.1fit/s"):format(rate)
end

-- The status text after the bar: "197/469 [00:02<00:03, 98.5it/s, loss=0.42]".
function ProgressBar:status()
  local elapsed = self.clock() - self.start
  local rate = elapsed > 0 and self.n / elapsed or 0
  local parts
  if self.total == 0 then
    parts = { ("%d [%s, %s"):format(self.n, util.format_time(elapsed), format_rate(rate)) }
  else
    local eta = rate > 0 and (self.total - self.n) / rate or nil
    parts = { ("%d/%d [%s<%s, %s"):format(self.n, self.total,
      util.format_time(elapsed), util.format_time(eta), format_rate(rate)) }
  end
  if self.postfix then
    local keys = {}
    for k in pairs(self.postfix) do keys[#keys + 1] = k end
    table.sort(keys)
    for _, k in ipairs(keys) do
      parts[#parts + 1] = (", %s=%s"):format(k, format_value(self.postfix[k]))
    end
  end
  parts[#parts + 1] = "]"
  return table.concat(parts)
end

function ProgressBar:fraction()
  if self.total == 0 then return 1 end
  return math.min(self.n / self.total, 1)
end

function ProgressBar:draw()
  local f = self:fraction()
  local filled = math.floor(f * self.width + 1e-9)
  local bar = string.rep("█", filled) .. string.rep(" ", self.width - filled)
  local prefix = self.desc ~= "" and self.desc .. " " or ""
  if self.total == 0 then
    self.file:write(("\r%s%s\27[K"):format(prefix, self:status()))
  else
    self.file:write(("\r%s%3d%%|%s| %s\27[K"):format(prefix, math.floor(f * 100), bar,
      self:status()))
  end
  self.file:flush()
end

function ProgressBar:print_line()
  local prefix = self.desc ~= "" and self.desc .. ": " or ""
  local percent = self.total == 0 and "" or ("%3d%% "):format(math.floor(self:fraction() * 100))
  self.file:write(("%s%s%s\n"):format(prefix, percent, self:status()))
  self.file:flush()
end

--- Advances by n steps (default 1); `postfix` (a table such as {loss = 0.42})
-- replaces the values shown after the rate.
function ProgressBar:update(n, postfix)
  self.n = self.n + (n or 1)
  if postfix then self.postfix = postfix end
  if self.tty then
    local now = self.clock()
    if now - self.last_draw >= 0.1 or self.n >= self.total then
      self.last_draw = now
      self:draw()
    end
  else
    -- (an unknown length prints only at close)
    local decile = self.total > 0 and math.floor(math.min(self.n, self.total) * 10 / self.total) or 0
    if decile > self.last_decile then
      self.last_decile = decile
      self:print_line()
    end
  end
end

--- Draws the final state and ends the line; idempotent.
function ProgressBar:close()
  if self.closed then return end
  self.closed = true
  if self.tty then
    self:draw()
    self.file:write("\n")
    self.file:flush()
  elseif self.last_decile < 10 then
    self:print_line()
  end
end

-- Training ------------------------------------------------------------------------------

-- Where a silenced progress bar writes.
local NULL_FILE = { write = function() end, flush = function() end }

--- One pass of classification training over `loader` (batches of inputs
-- and targets), in training mode: for each batch the logits model(x), the
-- loss criterion(logits, y), cleared gradients, backward, opt:step(), then
-- opts.after_step(bar) (learning-rate schedules, pruning; `bar`, the
-- ProgressBar showing the smoothed loss, lets it print over the bar's
-- line). The batch, the logits and the loss are freed at once, so their
-- memory goes back to the allocator's cache without waiting for Lua's
-- garbage collector. A NaN or infinite loss ends the script (util.die,
-- status 1), naming opts.epoch and the step, with a hint to use a lower
-- --lr than opts.lr: every later step would be NaN too.
-- opts: desc (the bar's label), epoch, lr, after_step, progress (false: no
-- bar, e.g. on the ranks of a distributed run other than rank 0).
-- Returns the mean loss over the samples, their number and the seconds taken.
function util.train_epoch(model, loader, criterion, opt, opts)
  opts = util.check_options(opts, { "desc", "epoch", "lr", "after_step", "progress" },
    "util.train_epoch")
  model:train()
  local bar = util.ProgressBar(#loader, { desc = opts.desc,
    file = opts.progress == false and NULL_FILE or nil })
  local start = venom.clock()
  local loss_sum, seen, smooth = 0, 0, nil
  for xb, yb in loader:iter() do
    local logits = model(xb)
    local loss = criterion(logits, yb)
    opt:zero_grad()
    loss:backward()
    opt:step()
    if opts.after_step then opts.after_step(bar) end

    local l, b = loss:item(), xb:size(1)
    if l ~= l or l == math.huge or l == -math.huge then
      bar:close()
      util.die(("the training loss is %s at %sstep %d; the run diverged%s"):format(number_text(l),
        opts.epoch and ("epoch %d, "):format(opts.epoch) or "", bar.n + 1,
        opts.lr and (" (try a lower --lr than %g)"):format(opts.lr) or ""))
    end
    loss_sum, seen = loss_sum + l * b, seen + b
    smooth = smooth and 0.95 * smooth + 0.05 * l or l
    bar:update(1, { loss = smooth })
    xb:free(); yb:free(); logits:free(); loss:free()
  end
  bar:close()
  return loss_sum / seen, seen, venom.clock() - start
end

-- Command-line arguments ----------------------------------------------------------------

local function option_name(key)
  return "--" .. key:gsub("_", "-")
end

--- The string keys of table t, sorted (for output that is the same on
-- every run, whatever order pairs() gives).
function util.sorted_keys(t)
  local keys = {}
  for k in pairs(t) do
    if type(k) == "string" then keys[#keys + 1] = k end
  end
  table.sort(keys)
  return keys
end
local sorted_keys = util.sorted_keys

--- Usage text listing every option with its type and default.
function util.usage(defaults, help)
  help = help or {}
  local lines = { "options:" }
  for _, k in ipairs(sorted_keys(defaults)) do
    local v = defaults[k]
    local arg = type(v) == "boolean" and "" or (type(v) == "number" and " N" or " STR")
    local text = help[k] and help[k] .. " " or ""
    local default = v == "" and "" or ("(default %s)"):format(tostring(v)) -- "": help says it
    lines[#lines + 1] = ("  %-24s %s"):format(option_name(k) .. arg, (text .. default):gsub("%s+$", ""))
  end
  lines[#lines + 1] = "  -h, --help               print this message"
  return table.concat(lines, "\n")
end

-- parse_args, with `positional` = false making a stray argument an error
-- (parse_cli).
local function parse(args, defaults, help, positional)
  args = args or {}
  local opts, given = {}, {} -- given[key]: set on the command line, not a default
  for k, v in pairs(defaults) do opts[k] = v end
  local known = {}
  for _, k in ipairs(sorted_keys(defaults)) do known[#known + 1] = option_name(k) end
  local function unknown(name)
    fail(("unknown option %s; known options: %s"):format(name, table.concat(known, ", ")))
  end

  local i, bare_flag = 1, nil -- bare_flag: the previous argument, if a bare --flag
  while i <= #args do
    local a = args[i]
    local name, value = a:match("^%-%-([^=]+)=(.*)$")
    if not name then name = a:match("^%-%-(.+)$") end
    local flag = bare_flag
    bare_flag = nil
    if not name and a ~= "-h" then
      if positional then
        opts[#opts + 1] = a
      elseif flag then
        fail(("%s is a flag and takes no value, got '%s' after it (write %s=false or --no-%s "
          .. "to turn it off)"):format(flag, a, flag, flag:sub(3)))
      else
        fail(("unexpected argument '%s' (options are written --name value)"):format(a))
      end
    elseif a == "-h" or name == "help" then
      print(util.usage(defaults, help))
      os.exit(0)
    else
      local key = name:gsub("-", "_")
      local negated = false
      if defaults[key] == nil and key:match("^no_") and type(defaults[key:sub(4)]) == "boolean" then
        key, negated = key:sub(4), true
      end
      local default = defaults[key]
      if default == nil then unknown("--" .. name) end
      given[key] = true
      if type(default) == "boolean" then
        if value == nil then
          opts[key] = not negated
          if not negated then bare_flag = "--" .. name end
        elseif value == "true" or value == "false" then
          opts[key] = (value == "true") ~= negated
        else
          fail(("--%s is a flag (true or false), got '%s'"):format(name, value))
        end
      else
        if value == nil then
          i = i + 1
          value = args[i]
          if value == nil then
            fail(("--%s expects a %s value, but none was given"):format(name, type(default)))
          end
          -- `--activation --steps 2`: the value is missing, not '2' extra.
          if value:match("^%-%-%a") then
            fail(("--%s needs a value, got the option %s after it (write --%s=VALUE for a value "
              .. "that starts with --)"):format(name, value:match("^[^=]*"), name))
          end
        end
        if type(default) == "number" then
          local x = tonumber(value)
          if not x then
            fail(("--%s expects a number, got '%s'"):format(name, value))
          end
          opts[key] = x
        else
          opts[key] = value
        end
      end
    end
    i = i + 1
  end
  return opts, given
end

-- util.die with the script's name given (for the --help hint).
local function exit_error(err, status, script)
  io.stderr:write("error: ", util.error_text(err), "\n")
  if status == 2 then
    io.stderr:write(script and ("run '%s --help' to list the options\n"):format(script)
      or "run with --help to list the options\n")
  end
  -- In a distributed run the other ranks may be waiting in a collective this
  -- one will never join: end the whole job (no-op in a world of one).
  if status ~= 0 then venom.core.dist_abort(status) end
  os.exit(status, true) -- true: close the Lua state, so finalizers free the tensors
end

--- Ends a script on an error, the way command-line tools do: prints
-- "error: <msg>" on stderr (a caught error's "file:line: " position
-- removed, util.error_text) and exits with `status`: 1 (the default) when
-- the run itself failed (missing data, a diverged loss, a checkpoint that
-- does not fit), 2 for a usage error (a bad option), which adds a hint to
-- run the script with --help. Never returns.
function util.die(msg, status)
  exit_error(msg, status or 1, arg and arg[0])
end

--- Parses `--name value`, `--name=value`, `--flag` and `--no-flag` arguments
-- against `defaults` (a table of option values: their types are the expected
-- types; dashes in names map to underscores, so --batch-size sets
-- batch_size). Returns a new table with every option set; arguments not
-- starting with "--" are kept, in order, in its array part. `--help` (or
-- `-h`) prints util.usage(defaults, help) and exits. Errors name the option
-- and list the known ones.
function util.parse_args(args, defaults, help)
  return (parse(args, defaults, help, true))
end

--- A script's command line in one call: parse_args without positional
-- arguments (a stray word is an error, such as the 5 of `--cosine 5`), then
-- `check(opts, given)`, which refuses values out of range with
-- util.check_arg_int, util.check_arg_number or util.fail (`given[key]` is
-- true for the options set on the command line, so that an option that
-- does not apply can be refused even when its value equals the default). A usage error prints "error: <message>"
-- and a hint to run with --help on stderr and exits with status 2, with no
-- traceback (the way command-line tools report a bad invocation); `-h` and
-- `--help` print the usage and exit 0. Returns the options.
function util.parse_cli(args, defaults, help, check)
  local ok, res = pcall(function()
    local opts, given = parse(args, defaults, help, false)
    if check then check(opts, given) end
    return opts
  end)
  if ok then return res end
  exit_error(res, 2, args and args[0])
end

--- For parse_cli's check: opts[key] must be a whole number >= min
-- (util.check_int); the error names the option as typed (--batch-size).
function util.check_arg_int(opts, key, min)
  return util.check_int(opts[key], option_name(key),
    { min = min, what = ("a whole number >= %d"):format(min) })
end

--- For parse_cli's check: opts[key] must be a finite number > min, or >= min
-- when `inclusive`.
function util.check_arg_number(opts, key, min, inclusive)
  local v = opts[key]
  local finite = type(v) == "number" and v == v and v > -math.huge and v < math.huge
  if not (finite and (v > min or (inclusive and v == min))) then
    fail(("%s must be a finite number %s %s, got %s")
      :format(option_name(key), inclusive and ">=" or ">", tostring(min), number_text(v)))
  end
  return v
end

--- For parse_cli's check: opts[key] must be a number in [0, 1] (a
-- fraction, e.g. of the learning rate).
function util.check_arg_fraction(opts, key)
  local v = opts[key]
  if not (type(v) == "number" and v >= 0 and v <= 1) then
    fail(("%s must be a number in [0, 1], got %s"):format(option_name(key), shown(v)))
  end
  return v
end

--- For parse_cli's check: opts[key] must be "cpu" or "cuda", and "cuda"
-- needs a usable device.
function util.check_arg_device(opts, key)
  local v = opts[key]
  if v ~= "cpu" and v ~= "cuda" then
    fail(("%s must be cpu or cuda, got %q"):format(option_name(key), tostring(v)))
  end
  if v == "cuda" and not venom.cuda.is_available() then
    fail(("%s cuda: no CUDA device is available (a GPU, its driver and a venom built with CUDA "
      .. "are needed)"):format(option_name(key)))
  end
  return v
end

--- For parse_cli's check: unless opts[key] is "" (not asked for), a file the
-- run writes later (a checkpoint, a plot) must be creatable there: its
-- directory exists and lets us write. An existing file is left as it is.
-- The message names the option and gives the system's reason, so a typo in
-- a directory stops the run at the start rather than after an epoch.
function util.check_arg_path(opts, key)
  local path = opts[key]
  if path == "" then return path end
  local existed = os.rename(path, path) -- true for any existing file, readable or not
  local f, err = io.open(path, "a")     -- "a": creates a missing file, never truncates
  if not f then
    fail(("%s: cannot write %s: %s"):format(option_name(key), path,
      err:sub(1, #path + 2) == path .. ": " and err:sub(#path + 3) or err))
  end
  f:close()
  if not existed then os.remove(path) end
  return path
end

--- opts[key], if not "", must name a file that can be read (a checkpoint
-- given with --resume, say): checked at the start, so a typo stops the run
-- before the data is loaded.
function util.check_arg_file(opts, key)
  local path = opts[key]
  if path == "" then return path end
  local f, err = io.open(path, "rb")
  if not f then fail(("%s: cannot read %s"):format(option_name(key), err)) end
  local _, dir_err = f:read(0) -- a directory opens, then fails to read
  f:close()
  if dir_err then fail(("%s: %s is not a file (%s)"):format(option_name(key), path, dir_err)) end
  return path
end

--- The output files of a training script, checked at the start (inside a
-- parse_cli check): opts.save, opts.log and opts.plot, where given, must be
-- creatable (check_arg_path), --plot a .png or .svg with gnuplot installed
-- (venom.plot.check_output); --log is opened as a MetricsLog with
-- `columns` and returned (nil without --log).
function util.check_outputs(opts, columns)
  if (opts.plot or "") ~= "" then require("venom.plot").check_output(opts.plot) end
  for _, k in ipairs({ "save", "log", "plot" }) do
    if opts[k] ~= nil then util.check_arg_path(opts, k) end
  end
  if (opts.log or "") ~= "" then return util.MetricsLog(opts.log, { columns = columns }) end
end

--- util.MetricsLog(path, opts) → a metrics log writing CSV or JSON Lines
-- (log:write{step = ..., loss = ...}, log.records, log:close()); see
-- lua/venom/metrics.lua. Plot it with venom.plot.curves.
function util.MetricsLog(path, opts)
  return require("venom.metrics").open(path, opts)
end

return util
