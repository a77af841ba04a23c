-- venom.plot and venom.util.MetricsLog: a figure becomes a PNG of the asked
-- size with curves on it (checked by an independent decoder,
-- tests/python/png_stats.py), an SVG holds the series names, metric logs
-- read back exactly in CSV and JSON Lines, and bad input is a clear error.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"
local plot, metrics = venom.plot, venom.metrics

local dir = testutil.tmpdir()
local function succeeded(r) return r == 0 or r == true end

-- ---- metrics logs ----------------------------------------------------------
do
  local path = dir .. "/run.csv"
  local log = metrics.open(path, { columns = { "step", "loss", "epoch", "note" } })
  log:write { step = 1, loss = 0.1 + 0.2 }
  log:write { step = 2, loss = 0 / 0, note = 'a "quoted", note' }
  log:write { epoch = 1 }
  tap.error_like(function() log:write { step = 3, accuracy = 1 } end, 'no column "accuracy"',
                 "a CSV key outside the header is refused, naming it")
  log:close()
  tap.is(testutil.slurp(path),
         'step,loss,epoch,note\n1,0.30000000000000004,,\n2,nan,,"a ""quoted"", note"\n,,1,\n',
         "CSV: header, 17 digits, nan, empty cells, RFC 4180 quoting")
  tap.is(#log.records, 3, "the log keeps the records it wrote")
  tap.error_like(function() log:write { step = 4 } end, "closed", "writing to a closed log is an error")
end
do
  local path = dir .. "/run.jsonl"
  local log = metrics.open(path)
  log:write { step = 10, loss = 1 / 0, tag = "x\ty" }
  log:write { ok = true, lr = 1e-3 }
  log:close()
  tap.is(testutil.slurp(path), '{"loss":null,"step":10,"tag":"x\\ty"}\n{"lr":0.001,"ok":true}\n',
         "JSON Lines: sorted keys, null for inf, escaped strings")
end
tap.error_like(function() metrics.open(dir .. "/run.txt") end, "ending in .csv, .jsonl or .json",
               "an unknown log format is refused")
tap.error_like(function() metrics.open(dir .. "/missing/run.csv") end, "cannot create",
               "a log in a missing directory is a clear error")
tap.error_like(function() metrics.open(dir .. "/x.csv"):write { loss = {} } end, "expected string keys",
               "a table value is refused")

-- ---- plots -------------------------------------------------------------------
local have, why = plot.available()
if not have then
  tap.skip(why, 7)
else
  local steps, losses, acc = {}, {}, {}
  for i = 1, 200 do steps[i], losses[i] = i, 2.3 * math.exp(-i / 50) + 0.05 * math.sin(i) end
  for e = 1, 5 do acc[e] = 80 + 2 * e end
  local png = dir .. "/curves.png"
  local fig = plot.figure(png, { rows = 2, width = 640, height = 480, title = "run" })
  fig:panel(1, { xlabel = "step", ylabel = "loss", logy = true })
  fig:plot({ "train", steps, losses, "-" }, { "smooth", venom.tensor(losses) })
  fig:panel(2, { xlabel = "epoch", ylabel = "accuracy (%)" })
  fig:plot({ "test", { 1, 2, 3, 4, 5 }, acc, "+-" })
  tap.is(fig:close(), png, "close returns the path")
  local p = io.popen(("python3 tests/python/png_stats.py '%s' 2>&1"):format(png))
  local out = p:read("*a")
  p:close()
  local w, h, colours, ink = out:match("^(%d+) (%d+) (%d+) ([%d.]+)")
  tap.ok(tonumber(w) == 640 and tonumber(h) == 480, "the PNG is 640 x 480 (" .. out:gsub("\n", "") .. ")")
  tap.ok(tonumber(colours) and tonumber(colours) >= 3 and tonumber(ink) > 0.01,
         "the PNG has curves on it: several colours, over 1% of pixels drawn")

  local svg = dir .. "/curves.svg"
  plot.curves(svg, { { step = 1, loss = 2 }, { step = 2, loss = 1 }, { epoch = 1, test_accuracy = 50 },
                     { step = 3, loss = 0 / 0 } },
              { { x = "step", y = { "loss" } }, { x = "epoch", y = { "test_accuracy" }, style = "+" } })
  local text = testutil.slurp(svg)
  tap.ok(text:find("<svg") and text:find("test_accuracy", 1, true) and text:find("loss", 1, true),
         "plot.curves writes an SVG naming its series")

  tap.error_like(function() plot.figure(dir .. "/x.png"):close() end, "no series",
                 "a figure with nothing to draw is an error")
  tap.error_like(function() plot.figure(dir .. "/x.png"):plot({ "a", { 1, 2 }, { 1 } }) end,
                 "x has 2 values and y 1", "x and y of different lengths are refused")
  -- Without gnuplot on PATH: the error names the package.
  local cmd = ("PATH=/nonexistent '%s' -e 'local f = venom.plot.figure(\"%s/y.png\"); "
    .. "f:plot({\"a\", {1, 2}}); f:close()' 2>&1"):format(arg[-1] or "build/venom", dir)
  local q = io.popen(cmd)
  local msg = q:read("*a")
  q:close()
  tap.ok(msg:find("gnuplot%-nox") ~= nil, "without gnuplot, close() names the package to install")
end
tap.error_like(function() plot.figure(dir .. "/x.jpg") end, "ending in .png or .svg", "an unknown image format is refused")
tap.error_like(function() plot.figure(dir .. "/x.png", { rows = 0 }) end, "rows must be a whole number",
               "a bad panel count is refused")

os.execute("rm -rf '" .. dir .. "'")
tap.done()
