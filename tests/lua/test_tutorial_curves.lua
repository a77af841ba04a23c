-- The tutorials' output options: --save, --log and --plot into a missing
-- directory, --plot with a bad name or without gnuplot, and --seed 1e30
-- are usage errors at the start (status 2, before any data is read or any
-- step is trained); short runs with --log and --plot write a CSV or JSON
-- Lines log with one record per step and per epoch / evaluation, and a
-- picture with ink in it (checked by tests/python/png_stats.py, a decoder
-- of its own), also when a run stops before its first evaluation. Runs on
-- Fashion-MNIST are skipped when the dataset package is not installed,
-- pictures when gnuplot is not.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local data = require "venom.data"
local plot = require "venom.plot"

local exe = os.getenv("VENOM_EXE") or arg[-1]
local dir = testutil.tmpdir()
local missing = dir .. "/no-such-dir/"

local f = io.open(data.FASHION_MNIST_ROOT .. "/train-labels-idx1-ubyte.gz", "rb")
local have_data = f ~= nil
if f then f:close() end
local have_gnuplot = plot.available()

local text = dir .. "/corpus.txt"
f = assert(io.open(text, "wb"))
for i = 1, 200 do f:write(("line %d: the quick brown fox jumps over the lazy dog.\n"):format(i)) end
f:close()

local small = {
  ["01-fashion-mnist"] = "--limit 1000 --hidden 32 --batch-size 100 --epochs 2",
  ["02-sparse-fashion-mnist"] = "--limit 1000 --hidden 64 --batch-size 100 --epochs 2 "
    .. "--target 16:2:8 --every 1",
  ["03-tiny-gpt"] = "--steps 12 --batch-size 4 --block-size 16 --n-layer 2 --n-head 2 "
    .. "--n-embd 16 --eval-every 6 --eval-batches 2 --sample 20 --text " .. text,
}
local names = { "01-fashion-mnist", "02-sparse-fashion-mnist", "03-tiny-gpt" }

-- Runs tutorial `name` with its small options and `args`; `env` goes
-- before the command (e.g. "PATH=/nonexistent").
local function tutorial(name, args, env)
  local p = io.popen(("%s '%s' tutorials/%s.lua %s %s 2>&1; echo \"rc=$?\""):format(env or "",
    exe, name, small[name], args))
  local out = p:read("*a")
  p:close()
  return out, tonumber(out:match("rc=(%d+)\n$"))
end

-- A usage error: status 2, the message on an "error:" line, nothing trained.
local function usage_error(out, rc, pattern)
  return rc == 2 and out:find("^error: " .. pattern) ~= nil and not out:find("epoch 1/")
    and not out:find("step +1 ") and not out:find("corpus:")
end

-- Usage errors at the start -------------------------------------------------------------
for _, name in ipairs(names) do
  local out, rc = tutorial(name, "--save " .. missing .. "run.st")
  tap.ok(usage_error(out, rc, "%-%-save: cannot write .*no%-such%-dir/run%.st: No such file"),
    name .. ": --save into a missing directory fails at the start, status 2")
  if rc ~= 2 then tap.diag("%s", out) end
  out, rc = tutorial(name, "--seed 1e30")
  tap.ok(usage_error(out, rc, "%-%-seed must be a whole number >= 0, got 1e%+30"),
    name .. ": --seed 1e30 is a usage error")
  out, rc = tutorial(name, "--log " .. missing .. "run.csv")
  tap.ok(usage_error(out, rc, "%-%-log: cannot write .*no%-such%-dir/run%.csv: No such file"),
    name .. ": --log into a missing directory fails at the start")
  out, rc = tutorial(name, "--plot " .. dir .. "/run.gif")
  tap.ok(usage_error(out, rc, "plot: .*run%.gif: expected a file name ending in %.png or %.svg"),
    name .. ": --plot FILE.gif is refused")
  out, rc = tutorial(name, "--plot " .. dir .. "/run.png", "PATH=/nonexistent")
  tap.ok(usage_error(out, rc,
    "plot: cannot write .*run%.png: gnuplot is not installed %(Debian package gnuplot%-nox"),
    name .. ": --plot without gnuplot names the package to install")
  if have_gnuplot then
    out, rc = tutorial(name, "--plot " .. missing .. "run.png")
    tap.ok(usage_error(out, rc, "%-%-plot: cannot write .*no%-such%-dir/run%.png"),
      name .. ": --plot into a missing directory fails at the start")
  end
end

-- The CSV log: its header, then every line's cells.
local function read_csv(path)
  local rows, header = {}, nil
  for line in io.lines(path) do
    local cells = {}
    for cell in (line .. ","):gmatch("([^,]*),") do cells[#cells + 1] = cell end
    if not header then
      header = cells
    else
      local r = {}
      for i, k in ipairs(header) do r[k] = tonumber(cells[i]) end
      rows[#rows + 1] = r
    end
  end
  return table.concat(header or {}, ","), rows
end

-- PNG size, colours and ink fraction from the independent decoder.
local function png_stats(path)
  local p = io.popen(("python3 tests/python/png_stats.py '%s' 2>&1"):format(path))
  local out = p:read("*a")
  p:close()
  local w, h, colours, ink = out:match("^(%d+) (%d+) (%d+) (%S+)")
  return tonumber(w), tonumber(h), tonumber(colours), tonumber(ink), out
end

-- A test that `path` is a picture of `panels` stacked panels: plot.figure's
-- 900 × 320 per panel, several colours (curves, text, grid) and some ink,
-- but mostly background. The Python decoder takes a second or so; `quick`
-- reads only the size in the PNG header. Skipped without gnuplot.
local function sane_png(path, panels, quick, what)
  if not have_gnuplot then return tap.skip("gnuplot is not installed", 1) end
  local ok, out
  if quick then
    local head = testutil.slurp(path):sub(1, 24)
    local function u32(at)
      local a, b, c, d = head:byte(at, at + 3)
      return ((a * 256 + b) * 256 + c) * 256 + d
    end
    ok = head:sub(1, 8) == "\137PNG\r\n\26\n" and head:sub(13, 16) == "IHDR"
      and u32(17) == 900 and u32(21) == 320 * panels
  else
    local w, h, colours, ink
    w, h, colours, ink, out = png_stats(path)
    ok = w == 900 and h == 320 * panels and colours > 3 and ink > 0.005 and ink < 0.5
  end
  if not ok then tap.diag("%s: %s", path, out or "not a PNG of the expected size") end
  return tap.ok(ok, what)
end

-- Runs with --log and --plot ------------------------------------------------------------------
-- Per step: the loss (positive, finite), the lr; per epoch or evaluation: its metrics.
local function check_rows(name, rows, steps, step_keys, eval_keys, evals)
  local n_steps, n_evals, ok = 0, 0, true
  for _, r in ipairs(rows) do
    if r.loss then
      n_steps = n_steps + 1
      ok = ok and r.step == n_steps and r.loss > 0 and r.loss < 100
      for _, k in ipairs(step_keys) do ok = ok and r[k] ~= nil end
    else
      n_evals = n_evals + 1
      for _, k in ipairs(eval_keys) do ok = ok and r[k] ~= nil end
    end
  end
  tap.ok(ok and n_steps == steps and n_evals == evals,
    ("%s: %d step records and %d evaluation records with their columns (got %d and %d)")
    :format(name, steps, evals, n_steps, n_evals))
end

-- --plot only where gnuplot is installed (else it is the usage error above).
local function outputs(log, png) return "--log " .. log .. (have_gnuplot and " --plot " .. png or "") end

if have_data then
  local csv, png = dir .. "/t1.csv", dir .. "/t1.png"
  local out, rc = tutorial("01-fashion-mnist", outputs(csv, png))
  tap.is(rc, 0, "01 with --log and --plot" .. (rc ~= 0 and ": " .. out or ""))
  local header, rows = read_csv(csv)
  tap.is(header, "step,epoch,loss,lr,train_loss,test_accuracy", "01: the CSV columns")
  check_rows("01", rows, 20, { "epoch", "lr" }, { "epoch", "train_loss", "test_accuracy" }, 2)
  tap.ok(rows[#rows].test_accuracy > 10 and rows[#rows].epoch == 2 and rows[#rows].step == 20,
    "01: the last record is epoch 2's test accuracy (%), at step 20")
  sane_png(png, 2, true, "01: a PNG with the loss and accuracy panels")

  csv, png = dir .. "/t2.csv", dir .. "/t2.png"
  out, rc = tutorial("02-sparse-fashion-mnist", outputs(csv, png))
  tap.is(rc, 0, "02 with --log and --plot" .. (rc ~= 0 and ": " .. out or ""))
  header, rows = read_csv(csv)
  tap.is(header, "step,epoch,loss,lr,sparsity,train_loss,test_accuracy", "02: the CSV columns")
  check_rows("02", rows, 20, { "epoch", "lr", "sparsity" }, { "train_loss", "test_accuracy" }, 2)
  -- Pruning from step 4 to 12 towards 16:2:8 (75%): the target per step.
  local s = {}
  for _, r in ipairs(rows) do if r.sparsity then s[r.step] = r.sparsity end end
  tap.ok(s[3] == 0 and s[5] > 0 and s[5] < 75 and s[12] == 75 and s[20] == 75,
    "02: the sparsity column follows the schedule, 0 before step 4 and 75% from step 12")
  sane_png(png, 3, true, "02: a PNG with the loss, accuracy and sparsity panels")
else
  tap.skip("dataset-fashion-mnist is not installed", 10)
end

do
  local log, png = dir .. "/t3.jsonl", dir .. "/t3.png"
  local out, rc = tutorial("03-tiny-gpt", "--sparse 16:2:8 " .. outputs(log, png))
  tap.is(rc, 0, "03 with --log (JSON Lines) and --plot" .. (rc ~= 0 and ": " .. out or ""))
  local steps, evals, ok = 0, 0, true
  for line in io.lines(log) do
    if line:find('"loss":') then
      steps = steps + 1
      ok = ok and line:find('^{"loss":[%d.e+-]+,"lr":[%d.e+-]+,"sparsity":[%d.e+-]+,"step":'
        .. steps .. "}$") ~= nil
    else
      evals = evals + 1
      ok = ok and line:find('^{"step":' .. 6 * evals
        .. ',"train_loss":[%d.e+-]+,"val_loss":[%d.e+-]+}$') ~= nil
    end
  end
  tap.ok(ok and steps == 12 and evals == 2, ("03: 12 step records and 2 evaluations, keys sorted "
    .. "(got %d and %d)"):format(steps, evals))
  sane_png(png, 3, false, "03: the PNG has the loss, evaluation and sparsity panels, with ink")

  -- Stopped at step 4, before the first evaluation: a picture all the same
  -- (its evaluation panel still empty).
  png = dir .. "/t3-stopped.png"
  out, rc = tutorial("03-tiny-gpt", "--stop-after 4 " .. outputs(dir .. "/t3-stopped.csv", png))
  tap.ok(rc == 0 and out:find("stopped after step 4 of 12") ~= nil,
    "03 stopped at step 4 with --plot" .. (rc ~= 0 and ": " .. out or ""))
  sane_png(png, 2, true, "03: a run stopped before any evaluation still has its picture")
end

os.execute("rm -rf '" .. dir .. "'")
tap.done()
