-- Ctrl-C (SIGINT) in the venom executable: a script ends with status 130
-- and one line on stderr, no traceback, whether the loop it is in runs in
-- the interpreter, was compiled by the JIT or catches errors with pcall;
-- the REPL (reading a pipe) stops the running line and goes on with the
-- next; a venom started with SIGINT ignored (nohup) leaves it ignored.
-- python3 starts venom, waits for it to print "ready", sends the signal and
-- reports; skipped without python3.
package.path = (arg[0]:match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local tap = require "tap"

local exe = os.getenv("VENOM_EXE") or arg[-1]

if os.execute("command -v python3 >/dev/null 2>&1") ~= 0 then
  tap.skip("python3 is not installed (it sends the signals)", 23)
  tap.done()
  return
end

-- argv: ignore (1: start venom with SIGINT ignored), stdin file, then
-- venom's argv. Prints venom's stdout, stderr, exit status and run time
-- (the time from the signal to the exit).
local driver = [[
import signal, subprocess, sys, time
ignore, stdin_path, cmd = sys.argv[1] == "1", sys.argv[2], sys.argv[3:]
def child_setup():
    signal.signal(signal.SIGINT, signal.SIG_IGN if ignore else signal.SIG_DFL)
with open(stdin_path) as stdin:
    p = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=child_setup)
    first = p.stdout.readline()  # "ready": the code to interrupt runs now
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    sent = time.time()
    try:
        out, err = p.communicate(timeout=30)  # a hang guard; slow under a sanitizer on a loaded machine
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
took = time.time() - sent
sys.stdout.write("STDOUT\n%s%s\nSTDERR\n%s\nEXIT %d\nTOOK %.2f\n" % (
    first.decode(), out.decode(), err.decode(), p.returncode, took))
]]

local function tmp(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end
local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local driver_path = tmp(driver)

-- Runs venom with `args` (a string of quoted words) and `input` on stdin,
-- interrupts it once it printed a line; returns stdout, stderr, status, seconds.
local function interrupt(args, input, ignore)
  local inpath = tmp(input or "")
  local p = io.popen(("python3 %s %s %s %s %s 2>&1"):format(quote(driver_path), ignore and "1" or "0",
    quote(inpath), quote(exe), args))
  local report = p:read("*a")
  p:close()
  os.remove(inpath)
  local out, err, status, took = report:match("^STDOUT\n(.-)\nSTDERR\n(.-)\nEXIT (%-?%d+)\nTOOK ([%d.]+)\n$")
  if not out then tap.diag("driver: %s", report) end
  return out or "", err or "", tonumber(status), tonumber(took)
end

local function lines(s)
  local n = 0
  for _ in s:gmatch("[^\n]+") do n = n + 1 end
  return n
end

-- A script interrupted: status 130, one short line, no traceback.
local function script_case(body, what)
  local script = tmp('io.stdout:write("ready\\n") io.stdout:flush()\n' .. body)
  local _, err, status, took = interrupt(quote(script))
  os.remove(script)
  tap.is(status, 130, what .. ": exit status 130")
  tap.ok(err:find("interrupted", 1, true) and lines(err) == 1, what .. ": one line on stderr says interrupted")
  tap.ok(not err:find("traceback", 1, true), what .. ": no traceback")
  tap.ok(took and took < 5, what .. ": ends within seconds")
  if tap.failed > 0 then tap.diag("stderr: %s", err) end
end

script_case("while true do end\n", "a JIT-compiled empty loop")
script_case('local venom = require "venom"\nlocal x = venom.ones(4)\nwhile true do x = x + 1 end\n',
  "a loop of venom ops")
script_case("while true do pcall(function() for i = 1, 1e5 do tostring(i) end end) end\n",
  "a loop whose pcall catches the interrupt")

do
  local _, err, status = interrupt("-e " .. quote('io.stdout:write("ready\\n") io.stdout:flush() while true do end'))
  tap.is(status, 130, "-e code interrupted: exit status 130")
  tap.ok(not err:find("traceback", 1, true), "-e code interrupted: no traceback")
end

-- The REPL reading a pipe: the interrupted line reports, the next ones run.
do
  local out, err, status = interrupt("", "print('ready')\nwhile true do end\nprint('after', 1 + 1)\n")
  tap.ok(out:find("after\t2\n", 1, true), "the REPL runs the line after an interrupted while true do end")
  tap.ok(err:find("stdin:1: interrupted", 1, true), "the interrupted line says so: " .. err)
  tap.ok(not err:find("traceback", 1, true), "without a traceback")
  tap.is(status, 0, "the REPL then ends normally at the end of its input")
end

do
  local out, err, status = interrupt("",
    "function spin(n) local i = 0 while true do i = i + n end end\nprint('ready')\nspin(1)\nprint('after')\n")
  tap.ok(out:find("after\n", 1, true) and err:find("interrupted", 1, true),
    "a loop in a function defined at the REPL is interrupted too")
  tap.is(status, 0, "and the REPL goes on")
end

-- Started with SIGINT ignored (nohup, `venom x.lua &` in a script): left ignored.
do
  local script = tmp('io.stdout:write("ready\\n") io.stdout:flush()\n' ..
    "local t = os.clock() while os.clock() - t < 1 do end\nprint('finished')\n")
  local out, err, status = interrupt(quote(script), nil, true)
  os.remove(script)
  tap.ok(out:find("finished", 1, true) and not err:find("interrupted", 1, true),
    "with SIGINT ignored at start, the script runs to its end")
  tap.is(status, 0, "and exits 0")
end

-- help is a global in a script run by venom.
do
  local script = tmp('print(type(help), (help.text(help.text) or ""):find("help.text", 1, true) ~= nil)\n')
  local p = io.popen(("%s %s 2>&1"):format(quote(exe), quote(script)))
  local out = p:read("*a")
  p:close()
  os.remove(script)
  tap.is(out, "table\ttrue\n", "help is a global in scripts")
end

os.remove(driver_path)
tap.done()
