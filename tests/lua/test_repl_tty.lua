-- The REPL on a terminal: Ctrl-C at the prompt drops the input being typed
-- (an empty line, a partial line, a `>>` continuation) and shows a fresh
-- prompt instead of killing the process, non-ASCII input reaches Lua even
-- under the C locale, and Ctrl-C stops a running `while true do end`
-- without ending the session. A terminal is needed, so python3's pty
-- module drives the venom executable through a pseudo-terminal; skipped
-- without python3.
package.path = (arg[0]:match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local tap = require "tap"

local exe = os.getenv("VENOM_EXE") or arg[-1]

if os.execute("command -v python3 >/dev/null 2>&1") ~= 0 then
  tap.skip("python3 is not installed (it provides the pseudo-terminal)", 10)
  tap.done()
  return
end

-- Runs venom on a pty, types each step's keys once the previous step's text
-- has appeared, and prints the transcript followed by "\nEXIT <status>".
-- The steps are argv[3], a Python list: (text to wait for, keys to type
-- then), or (text, keys, "running") to type the keys while a line runs.
local driver = [[
import ast, os, pty, select, sys, termios, time
exe, hist, steps = sys.argv[1], sys.argv[2], ast.literal_eval(sys.argv[3])
pid, fd = pty.fork()
if pid == 0:
    env = dict(os.environ, VENOM_HISTORY=hist, LC_ALL="C", TERM="xterm")
    env.pop("LANG", None)
    os.execve(exe, [exe], env)
out = b""
deadline = time.time() + 30  # a hang guard: a sanitizer build on a loaded machine is slow
def wait_for(text, start):
    """Reads until `text` appears in out[start:]; False at EOF or the deadline."""
    global out
    while text not in out[start:] and time.time() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:  # EIO: the child closed the terminal
                return False
            if not chunk:
                return False
            out += chunk
    return text in out[start:]
def wait_raw():
    """Waits for libedit to put the terminal in raw mode, which it does just
    before reading a key: keys typed before that go through the kernel's
    line editing (a Ctrl-D there can be lost in the switch)."""
    while termios.tcgetattr(fd)[3] & termios.ICANON and time.time() < deadline:
        time.sleep(0.005)
def wait_running():
    """Waits for libedit to hand the line over (the terminal back in cooked
    mode), then a moment for the code to start."""
    while not termios.tcgetattr(fd)[3] & termios.ICANON and time.time() < deadline:
        time.sleep(0.005)
    time.sleep(0.3)
start = 0
for step in steps:
    if not wait_for(step[0], start):
        break
    if len(step) > 2:
        wait_running()
    else:
        wait_raw()
    start = len(out)  # the next step's text must come after these keys
    os.write(fd, step[1])
wait_for(b"never printed", 0)  # drain until the child exits or the deadline
done, status = os.waitpid(pid, os.WNOHANG)
if done == 0:  # still running: a step's text never came
    os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
sys.stdout.write(out.decode("utf-8", "replace"))
sys.stdout.write("\nEXIT %d\n" % (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1))
]]

-- Ctrl-C at the prompt. "^C\r\n> " is the REPL's answer to Ctrl-C: its
-- "^C", a newline, a fresh prompt (the kernel may echo a ^C too).
local prompt_steps = [[
[
    (b"> ", b"x = 1 +\r"),          # an unfinished statement: a >> prompt follows
    (b">> ", b"\x03"),              # Ctrl-C in the continuation
    (b"^C\r\n> ", b"print('alive', x)\r"),
    (b"alive\tnil\r\n> ", b"abc"),  # a partial line, then Ctrl-C
    (b"abc", b"\x03"),
    (b"^C\r\n> ", b"\x03"),          # Ctrl-C on an empty line
    (b"^C\r\n> ", b"print(#'h\xc3\xa9', 'h\xc3\xa9')\r"),
    (b"3\th\xc3\xa9\r\n> ", b"\x04"),  # Ctrl-D exits
]
]]

-- Ctrl-C while a line runs: the loop stops, the session goes on.
local running_steps = [[
[
    (b"> ", b"while true do end\r"),
    (b"while true do end\r\n", b"\x03", "running"),
    (b"interrupted\r\n> ", b"print('after', 1 + 1)\r"),
    (b"after\t2\r\n> ", b"\x04"),
]
]]

local function tmp(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- The transcript of a session that takes `steps` (a Python list).
local function session(steps)
  local script, hist = tmp(driver), tmp("")
  local p = io.popen(("python3 %s %s %s %s 2>&1"):format(quote(script), quote(exe), quote(hist), quote(steps)))
  local transcript = p:read("*a")
  p:close()
  os.remove(script)
  os.remove(hist)
  return transcript
end

local out = session(prompt_steps)

local function has(s) return out:find(s, 1, true) ~= nil end
tap.ok(has(">> ^C"), "Ctrl-C in a >> continuation is shown as ^C")
tap.ok(has("alive\tnil\r\n"), "the process survives it and the dropped 'x = 1 +' never ran")
tap.ok(has("abc^C"), "Ctrl-C drops a partial line")
tap.ok(not has("stdin:1:"), "no dropped input reached Lua (abc would be a syntax error)")
tap.ok(has("3\th\xc3\xa9\r\n"), "UTF-8 input typed at the prompt reaches Lua intact under LC_ALL=C")
tap.is(out:match("EXIT (%-?%d+)\n$"), "0", "Ctrl-D then exits with status 0")
if tap.failed > 0 then tap.diag("transcript:\n%s", out) end

local failed = tap.failed
out = session(running_steps)
tap.ok(has("stdin:1: interrupted\r\n"), "Ctrl-C stops a running while true do end and says where")
tap.ok(not has("traceback"), "without a traceback")
tap.ok(has("after\t2\r\n"), "the session goes on: the next line runs")
tap.is(out:match("EXIT (%-?%d+)\n$"), "0", "and Ctrl-D exits with status 0")
if tap.failed > failed then tap.diag("transcript:\n%s", out) end
tap.done()
