-- The venom executable: the REPL driven through a pipe, -e, -v, -h, scripts
-- with arguments and failing scripts; and the REPL's printing and Tab
-- completion (venom.repl), which need no terminal.
package.path = (arg[0]:match("^(.*)/") or ".") .. "/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local repl = require "venom.repl"

-- This script runs under the venom executable: arg[-1] is its path.
local exe = os.getenv("VENOM_EXE") or arg[-1]

local function quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function write_tmp(text)
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

-- Run `venom <args>` with `input` on stdin; returns stdout+stderr, exit code.
local function run(args, input)
  local inpath = write_tmp(input or "")
  local p = io.popen(("%s %s < %s 2>&1; echo \"rc=$?\""):format(quote(exe), args, quote(inpath)))
  local out = p:read("*a")
  p:close()
  os.remove(inpath)
  local rc = tonumber(out:match("rc=(%d+)\n$"))
  return out:gsub("rc=%d+\n$", ""), rc
end

local function has(out, s) return out:find(s, 1, true) ~= nil end

-- the REPL through a pipe ------------------------------------------------------
do
  local out, rc = run("", '1+1\nx = venom.ones(2)\nx\nerror("boom")\nprint("alive")\n')
  tap.is(rc, 0, "the REPL exits 0 at the end of its input")
  tap.ok(out:match("^2\n"), "an expression's value is printed")
  tap.ok(has(out, "\ntensor([1.0000, 1.0000], dtype=f32, shape=(2,))\n"), "a tensor result prints")
  tap.ok(out:find("stdin:1: boom\nstack traceback:\n", 1, true), "an error prints with a traceback")
  tap.ok(out:match("alive\n$"), "the REPL survives the error")
  tap.ok(not has(out, "> "), "no prompts when stdin is not a terminal")
end

do -- piped input that ends inside an unfinished chunk reports it instead of dropping it
  local out, rc = run("", "print('before')\nprint(1 +\n")
  tap.ok(rc == 0 and has(out, "before\n") and has(out, "stdin:2: unexpected symbol near '<eof>'"),
    "an unfinished chunk at the end of piped input gives its syntax error: " .. out)
end

do -- Lua compares a tensor with a number without asking the tensor: the executable adds the hint
  local out = run("-e 'local x = venom.ones(2); return x > 0'")
  tap.ok(has(out, "attempt to compare number with userdata (a tensor and a number? comparisons are "
    .. "methods: x:gt(0)"), "x > 0 gets the hint that names the comparison methods: " .. out:match("^[^\n]*"))
end

do
  local out = run("", "for i = 1, 2 do\n  print(i * 10)\nend\nlocal t = {\n  7,\n}\n=1 + 2\n")
  tap.ok(out:match("^10\n20\n"), "multi-line input runs once complete")
  tap.ok(out:match("\n3\n$"), "=expr prints the expression")
end

do
  local out = run("", "x = = 1\nprint('after')\nvenom.zeros(2, 3):shape()\n{1, 'a', n = {2}}\n1, nil, 'b'\n")
  tap.ok(has(out, "stdin:1: unexpected symbol near '='"), "a syntax error is reported")
  tap.ok(has(out, "after\n"), "and the REPL goes on")
  tap.ok(has(out, "\n{2, 3}\n"), "a shape table prints as {2, 3}")
  tap.ok(has(out, '\n{1, "a", n = {2}}\n'), "tables print with their fields")
  tap.ok(has(out, "\n1\tnil\tb\n"), "several results print tab-separated")
end

do
  local out = run("", "type(venom), type(nn), type(optim)\nvenom.tensor({1, {2}})\nprint('ok')\n")
  tap.ok(has(out, "table\ttable\ttable\n"), "venom, nn and optim are globals in the REPL")
  tap.ok(has(out, "stdin:1: tensor: expected a number at [2], found table"), "a venom error names the line")
  tap.ok(out:match("ok\n$"), "the REPL goes on after a venom error")
end

-- help in the REPL: the help global, help(), ?name ----------------------------------
do
  local out = run("", table.concat({
    "type(help)",
    "help()",
    "?venom.matmul",
    "x = venom.ones(2)",
    "?x.sum",
    "? x:sum",
    "?venom.mtmul",
    "?nn.Linaer",
    "?nn.Linear",
    "?1 + 1",
    "print('end')",
  }, "\n") .. "\n")
  tap.ok(out:match("^table\n"), "help is a global in the REPL")
  tap.ok(has(out, "help(venom.matmul)") and has(out, "venom.nn ") and has(out, "venom.optim "),
    "help() prints an overview: how to ask and the modules")
  tap.ok(has(out, "vn_matmul") and has(out, "inner dims"), "?venom.matmul prints matmul's docstring")
  local _, sums = out:gsub("keepdim", "")
  tap.ok(sums >= 2, "?x.sum and ? x:sum print the method's docstring")
  tap.ok(has(out, "no venom.mtmul in venom; did you mean venom.matmul"), "a misspelt ?name gets a suggestion")
  tap.ok(has(out, "did you mean venom.nn.Linear?"), "a misspelt field of nn gets one too")
  tap.ok(has(out, "out_features"), "?nn.Linear prints the class's docstring")
  tap.ok(has(out, "? takes a name"), "?expr that is not a name says what ? takes")
  tap.ok(out:match("end\n$"), "the REPL goes on after help")
end

-- command line ----------------------------------------------------------------
do
  local out, rc = run("-e " .. quote("print(venom.ones(2):sum():item())"))
  tap.ok(out == "2\n" and rc == 0, "-e runs code with venom as a global")
  out, rc = run("-e " .. quote("error('bad')"))
  tap.ok(rc == 1 and has(out, "bad") and has(out, "stack traceback"), "-e: an error exits 1 with a traceback")
  out, rc = run("-v")
  tap.ok(rc == 0 and out:match("^venom %d+%.%d+%.%d+"), "-v prints the version")
  tap.is(venom.version, out:match("^venom (%S+)"), "venom.version matches -v")
  out, rc = run("--help")
  tap.ok(rc == 0 and has(out, "usage: venom"), "--help prints usage")
  out, rc = run("--bogus")
  tap.ok(rc == 1 and has(out, "unknown option '--bogus'"), "an unknown option exits 1")

  local script = write_tmp('local v = require "venom"\n' ..
    'print(arg[0] ~= nil, arg[1], arg[2], select("#", ...), v.ones(3):sum():item())\n')
  out, rc = run(quote(script) .. " a 'b c'")
  tap.is(out, "true\ta\tb c\t2\t3\n", "a script gets arg and ... and can require venom")
  tap.is(rc, 0, "a script that finishes exits 0")
  os.remove(script)

  script = write_tmp("local function f() error('deep') end\nf()\n")
  out, rc = run(quote(script))
  tap.is(rc, 1, "a failing script exits 1")
  tap.ok(has(out, ":1: deep") and has(out, "stack traceback") and has(out, "in function 'f'"),
    "a failing script prints its error and a traceback")
  os.remove(script)

  out, rc = run("/nonexistent/script.lua")
  tap.ok(rc == 1 and has(out, "/nonexistent/script.lua"), "a missing script is named, exit 1")
  out, rc = run("-", "print('from stdin', ...)\n")
  tap.ok(rc == 0 and out == "from stdin\n", "- runs a script from stdin")
end

-- require "venom" from a stock luajit, with the paths the README gives ------------
do
  local build = exe:match("^(.*)/[^/]*$") or "."
  local src = (arg[0]:match("^(.*)/tests/lua/[^/]*$")) or "."
  local cmd = ("LUA_PATH=%s LUA_CPATH=%s luajit -e %s 2>&1"):format(
    quote(src .. "/lua/?.lua;" .. src .. "/lua/?/init.lua;;"), quote(build .. "/lua/?.so;;"),
    quote('print(require("venom").ones(2):sum():item())'))
  local p = io.popen(cmd)
  local out = p:read("*a")
  p:close()
  if has(out, "ASan runtime") or has(out, "not found") and not has(out, "venom") then
    tap.skip("stock luajit cannot load this build's venom.core (sanitizer build or no luajit)", 1)
  else
    tap.is(out, "2\n", "require 'venom' works from a stock luajit")
  end
end

-- printing and completion (venom.repl) --------------------------------------------
do
  tap.is(repl.show(1, "a", { 1, { 2 } }, nil), '1\ta\t{1, {2}}\tnil', "show: values, strings plain, nested tables")
  tap.is(repl.show({ b = "x", a = 1 }), '{a = 1, b = "x"}', "show: named fields sorted")
  tap.is(repl.show(venom.tensor({ 1 }, "i64")), "tensor([1], dtype=i64, shape=(1,))", "show: a tensor")
  tap.is(repl.show(), "", "show: no values")

  local function set(list) local s = {} for _, v in ipairs(list) do s[v] = true end return s end
  _G.venom = venom -- as in the REPL
  local c = set(repl.complete("venom.ze"))
  tap.ok(c["venom.zeros"] and not c["venom.ones"], "venom.ze<Tab> completes to venom.zeros")
  _G.xx = venom.ones(2)
  c = repl.complete("xx:res")
  tap.is(table.concat(c, " "), "xx:reshape", "x:res<Tab> completes a tensor method")
  c = set(repl.complete("xx:requires"))
  tap.ok(c["xx:requires_grad"] and c["xx:requires_grad_"], "both requires_grad methods offered")
  _G.xx = nil
  c = set(repl.complete("pri"))
  tap.ok(c["print"] and not c["pairs"], "a global name completes")
  c = set(repl.complete("whi"))
  tap.ok(c["while"], "keywords complete")
  c = set(repl.complete("string.fo"))
  tap.ok(c["string.format"], "fields of library tables complete")
  tap.is(#repl.complete("nosuchglobal."), 0, "an unknown table gives nothing")
  _G.obj = setmetatable({}, { __index = { method = function() end, value = 1 } })
  c = set(repl.complete("obj:"))
  tap.ok(c["obj:method"] and not c["obj:value"], "after ':' only functions, found through __index")
  _G.obj = nil

  -- ?name (venom.repl.help_command), beyond what the REPL run above covers
  _G.xx = venom.ones(2)
  tap.ok(repl.help_command("xx.sm"):find("did you mean venom.sum", 1, true), "?x.sm suggests the tensor method sum")
  tap.ok(repl.help_command("xx"):find("is a tensor", 1, true), "?x on a tensor points to its methods")
  _G.xx = nil
  tap.ok(repl.help_command("  "):find("Modules", 1, true), "? alone gives the overview")
  tap.ok(repl.help_command("'venom.sum'"):find("keepdim", 1, true), "?'venom.sum' looks the name up")
  tap.ok(repl.help_command("softmx"):find("did you mean venom.softmax", 1, true),
    "an unknown global is looked up among venom's names")
  tap.ok(repl.help_command("nn"):find("torch.nn", 1, true), "?nn prints the module's overview")
end

tap.done()
