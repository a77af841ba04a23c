--- venom.plot — line plots (training curves, accuracy, sparsity over steps)
-- written to PNG or SVG by gnuplot (Debian package `gnuplot-nox`), after
-- the convention of Torch7's `gnuplot` package: a series is
-- `{name, x, y, style}`.
--
--     local plot = venom.plot
--     local fig = plot.figure("curves.png", {rows = 2, width = 900})
--     fig:panel(1, {title = "training loss", xlabel = "step", ylabel = "loss"})
--     fig:plot({"train", steps, losses, "-"})
--     fig:panel(2, {xlabel = "epoch", ylabel = "accuracy (%)"})
--     fig:plot({"test", epochs, accuracies, "+-"})
--     fig:close()                         -- runs gnuplot; the file now exists
--
-- x and y are Lua arrays of numbers or 1-D tensors of the same length; `{name,
-- y}` plots y against 1..#y. Styles: "-" lines (default), "+" points, "+-"
-- lines with points. NaN and ±inf values are left out of the curve (a
-- diverged loss still plots). Errors (no gnuplot, a bad series, gnuplot
-- failing) are Lua errors that say what was expected; nothing is written
-- then.
local plot = {}

local Figure = {}
Figure.__index = Figure

local util = require "venom.util"
local function fail(msg) util.fail("plot: " .. msg) end

local function sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

--- plot.available() → true, or false and the reason (gnuplot not installed).
function plot.available()
  local ok = os.execute("command -v gnuplot >/dev/null 2>&1")
  if ok == 0 or ok == true then return true end
  return false, "gnuplot is not installed (Debian package gnuplot-nox: apt-get install gnuplot-nox)"
end

local terminals = { png = "pngcairo", svg = "svg" }

--- plot.check_output(path): fails unless a figure can be written to `path`
-- later as far as venom can tell up front: a name ending in .png or .svg,
-- and gnuplot installed (the message names the package). For a script to
-- check its --plot option before training (util.check_arg_path checks the
-- directory).
function plot.check_output(path)
  local ext = type(path) == "string" and path:match("%.(%w+)$")
  if not terminals[ext and ext:lower()] then
    fail(("%s: expected a file name ending in .png or .svg"):format(tostring(path)))
  end
  local ok, why = plot.available()
  if not ok then fail(("cannot write %s: %s"):format(path, why)) end
  return path
end

--- plot.figure(path, opts) → a figure that close() writes to `path`.
-- path ends in .png or .svg (the format). opts: width, height (pixels;
-- default 900 × 320 per panel), rows (panels stacked vertically, default 1),
-- title (over the whole figure). Errors: another extension, bad sizes.
function plot.figure(path, opts)
  opts = opts or {}
  if type(path) ~= "string" then fail("figure: expected a file path (a string), got a " .. type(path)) end
  local ext = path:match("%.(%w+)$")
  ext = ext and ext:lower()
  if not terminals[ext] then
    fail(("figure: %s: expected a file name ending in .png or .svg"):format(path))
  end
  local rows = opts.rows or 1
  local width, height = opts.width or 900, opts.height or 320 * rows
  for _, size in ipairs({ { "rows", rows }, { "width", width }, { "height", height } }) do
    local name, v = size[1], size[2]
    if type(v) ~= "number" or v ~= math.floor(v) or v < 1 or v > 20000 then
      fail(("figure: %s must be a whole number from 1 to 20000, got %s"):format(name, tostring(v)))
    end
  end
  local fig = setmetatable({ path = path, ext = ext, rows = rows, width = width, height = height,
                             title = opts.title, panels = {}, current = 1 }, Figure)
  for i = 1, rows do fig.panels[i] = { series = {} } end
  return fig
end

--- fig:panel(i, opts) selects panel i (1..rows) for the next plot() calls and
-- sets its labels. opts: title, xlabel, ylabel, logy (log-scale y axis).
function Figure:panel(i, opts)
  if type(i) ~= "number" or i ~= math.floor(i) or i < 1 or i > self.rows then
    fail(("panel: expected a panel number from 1 to %d, got %s"):format(self.rows, tostring(i)))
  end
  self.current = i
  for k, v in pairs(opts or {}) do self.panels[i][k] = v end
  return self
end

-- A Lua array from an array or a 1-D tensor.
local function numbers(v, what)
  if type(v) == "table" then return v end
  if type(v) == "userdata" and v.totable then
    if v:dim() ~= 1 then fail(("%s: expected a 1-D tensor, got %d dims"):format(what, v:dim())) end
    return v:cpu():totable()
  end
  fail(("%s: expected an array of numbers or a 1-D tensor, got a %s"):format(what, type(v)))
end

local styles = { ["-"] = "lines", ["+"] = "points", ["+-"] = "linespoints", ["-+"] = "linespoints" }

--- fig:plot(series, ...) adds series {name, x, y, style} (or {name, y}) to
-- the current panel.
function Figure:plot(...)
  local list = { ... }
  if #list == 0 then fail("plot: expected at least one series {name, x, y}") end
  for k, s in ipairs(list) do
    local what = ("series %d"):format(k)
    if type(s) ~= "table" or type(s[1]) ~= "string" then
      fail(("plot: %s: expected {name, x, y, style} with a string name"):format(what))
    end
    what = ("series '%s'"):format(s[1])
    local x, y, style
    if s[3] == nil or type(s[3]) == "string" then
      y, style = numbers(s[2], what .. " y"), s[3]
      x = {}
      for i = 1, #y do x[i] = i end
    else
      x, y, style = numbers(s[2], what .. " x"), numbers(s[3], what .. " y"), s[4]
    end
    if #x ~= #y then fail(("plot: %s: x has %d values and y %d"):format(what, #x, #y)) end
    style = style or "-"
    if not styles[style] then
      fail(("plot: %s: style must be \"-\", \"+\" or \"+-\", got %q"):format(what, tostring(style)))
    end
    for i = 1, #x do
      if type(x[i]) ~= "number" or type(y[i]) ~= "number" then
        fail(("plot: %s: value %d is not a number"):format(what, i))
      end
    end
    -- A line through one point draws nothing: mark it.
    local gp_style = #x == 1 and styles[style] == "lines" and "linespoints" or styles[style]
    table.insert(self.panels[self.current].series, { name = s[1], x = x, y = y, style = gp_style })
  end
  return self
end

-- gnuplot's string literal: double quotes, backslash escapes.
local function gp_string(s) return '"' .. tostring(s):gsub('[\\"]', "\\%0") .. '"' end

local function finite(v) return v == v and v ~= math.huge and v ~= -math.huge end

--- fig:close() → path. Writes the figure by running gnuplot (data and script
-- go to temporary files, removed afterwards). Errors: no gnuplot, a figure
-- with no series, gnuplot failing (its message is included).
function Figure:close()
  local ok, why = plot.available()
  if not ok then fail("cannot write " .. self.path .. ": " .. why) end
  local any = false
  for _, p in ipairs(self.panels) do any = any or #p.series > 0 end
  if not any then fail("close: the figure has no series to draw (call fig:plot first)") end

  local tmp = os.tmpname()
  local files = { tmp }
  local script = {
    ("set terminal %s size %d,%d noenhanced"):format(terminals[self.ext], self.width, self.height),
    "set output " .. gp_string(self.path),
    -- The key beside the plot, not over the curves; fixed margins keep the
    -- panels' x axes aligned whatever their keys' widths.
    "set grid", "set key outside right top",
    "set lmargin at screen 0.1", "set rmargin at screen 0.76",
    ("set multiplot layout %d,1%s"):format(self.rows, self.title and " title " .. gp_string(self.title) or ""),
  }
  for _, p in ipairs(self.panels) do
    for _, k in ipairs({ "title", "xlabel", "ylabel" }) do
      script[#script + 1] = p[k] and ("set %s %s"):format(k, gp_string(p[k])) or ("unset " .. k)
    end
    script[#script + 1] = p.logy and "set logscale y" or "unset logscale y"
    local parts = {}
    for _, s in ipairs(p.series) do
      local data = tmp .. "-" .. #files .. ".dat"
      files[#files + 1] = data
      local f = assert(io.open(data, "w"))
      for i = 1, #s.x do
        -- A point gnuplot cannot draw is left out; a blank line would split the curve.
        if finite(s.x[i]) and finite(s.y[i]) then f:write(("%.17g %.17g\n"):format(s.x[i], s.y[i])) end
      end
      f:close()
      parts[#parts + 1] = ("%s using 1:2 with %s title %s"):format(gp_string(data), s.style, gp_string(s.name))
    end
    -- An empty panel still takes its place in the layout; with no point to
    -- autoscale on, gnuplot needs a fixed (linear) y range to draw it.
    script[#script + 1] = #parts > 0 and "plot " .. table.concat(parts, ", ")
      or "set key off; unset logscale y; set yrange [0:1]; plot [0:1] NaN notitle; "
        .. "set key on; set autoscale y"
  end
  script[#script + 1] = "unset multiplot"
  script[#script + 1] = "set output"
  local f = assert(io.open(tmp, "w"))
  f:write(table.concat(script, "\n"), "\n")
  f:close()

  local errfile = tmp .. "-err"
  files[#files + 1] = errfile
  local rc = os.execute(("gnuplot %s 2>%s"):format(sh_quote(tmp), sh_quote(errfile)))
  local ef = io.open(errfile)
  local err = ef and ef:read("*a") or ""
  if ef then ef:close() end
  for _, name in ipairs(files) do os.remove(name) end
  if not (rc == 0 or rc == true) then
    os.remove(self.path)
    fail(("cannot write %s: gnuplot failed: %s"):format(self.path, (err:gsub("%s+$", ""))))
  end
  return self.path
end

--- plot.curves(path, records, panels, opts) → path: one panel per entry of
-- `panels` from a list of metric records (as venom.util.MetricsLog writes
-- them: tables of numbers keyed by name). Each panel is {x = key, y = {keys},
-- ylabel = ..., title = ..., logy = bool}; a series uses the records that
-- have both its x and y keys, so per-step and per-epoch records can share
-- one list. opts are plot.figure's (rows is set from #panels).
--
--     plot.curves("run.png", records, {
--       {x = "step", y = {"loss"}, ylabel = "training loss"},
--       {x = "epoch", y = {"test_accuracy"}, ylabel = "%", style = "+-"},
--     })
function plot.curves(path, records, panels, opts)
  if type(records) ~= "table" then fail("curves: expected a list of records (tables), got a " .. type(records)) end
  if type(panels) ~= "table" or #panels == 0 then fail("curves: expected a list of panels {x = key, y = {keys}}") end
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.rows = #panels
  local fig = plot.figure(path, o)
  for i, spec in ipairs(panels) do
    if type(spec.x) ~= "string" or type(spec.y) ~= "table" then
      fail(("curves: panel %d: expected {x = key, y = {keys}}"):format(i))
    end
    fig:panel(i, { title = spec.title, xlabel = spec.xlabel or spec.x, ylabel = spec.ylabel, logy = spec.logy })
    for _, key in ipairs(spec.y) do
      local xs, ys = {}, {}
      for _, r in ipairs(records) do
        if type(r[spec.x]) == "number" and type(r[key]) == "number" then
          xs[#xs + 1], ys[#ys + 1] = r[spec.x], r[key]
        end
      end
      if #xs > 0 then fig:plot({ key, xs, ys, spec.style or "-" }) end
    end
  end
  return fig:close()
end

return plot
