--- venom.repl — the Lua half of the venom REPL (lua/main.c): how results
-- are printed and what Tab completes. Plain functions, so they can be tested
-- without a terminal.
local repl = {}

local MAX_ITEMS = 20 -- entries of a table shown before "..."

local function is_name(s)
  return type(s) == "string" and s:match("^[%a_][%w_]*$") ~= nil
end

local function show(v, depth, seen)
  if type(v) == "string" then
    return depth == 0 and v or string.format("%q", v)
  end
  local mt = getmetatable(v)
  if type(v) ~= "table" or (type(mt) == "table" and mt.__tostring) or depth >= 2 or seen[v] then
    return tostring(v)
  end
  seen[v] = true
  local parts, n = {}, #v
  for i = 1, math.min(n, MAX_ITEMS) do
    parts[#parts + 1] = show(v[i], depth + 1, seen)
  end
  local keys = {}
  for k in pairs(v) do
    if not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then
      keys[#keys + 1] = k
    end
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
  for i = 1, math.min(#keys, MAX_ITEMS) do
    local k = keys[i]
    local name = is_name(k) and k or "[" .. show(k, depth + 1, seen) .. "]"
    parts[#parts + 1] = name .. " = " .. show(v[k], depth + 1, seen)
  end
  if n > MAX_ITEMS or #keys > MAX_ITEMS then
    parts[#parts + 1] = "..."
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

--- The text the REPL prints for the results of a line: each value (tables
-- shown two levels deep, tensors through their __tostring), tab-separated.
function repl.show(...)
  local parts = {}
  for i = 1, select("#", ...) do
    parts[i] = show((select(i, ...)), 0, {})
  end
  return table.concat(parts, "\t")
end

local KEYWORDS = { "and", "break", "do", "else", "elseif", "end", "false", "for", "function",
  "goto", "if", "in", "local", "nil", "not", "or", "repeat", "return", "then", "true",
  "until", "while" }

-- Names reachable from v: its own keys, then what its metatable's __index
-- table (and a tensor's __methods) offer, following class chains.
local function collect(v, out, depth)
  if depth > 4 then return end
  if type(v) == "table" then
    for k, x in pairs(v) do
      if is_name(k) and out[k] == nil then out[k] = x end
    end
  end
  local mt = getmetatable(v)
  if type(mt) == "table" then
    for _, field in ipairs { "__index", "__methods" } do
      local t = rawget(mt, field)
      if type(t) == "table" then collect(t, out, depth + 1) end
    end
  end
end

--- Completions of `text`, the word before the cursor: a global name, or a
-- path like `venom.ze` / `x:res` (after `:` only functions). Walking the path
-- only indexes values, it never calls anything but __index.
function repl.complete(text)
  local head, sep, word = text:match("^(.-)([%.:]?)([%a_]?[%w_]*)$")
  if not head then return {} end
  local cands = {}
  if sep == "" then
    collect(_G, cands, 0)
    for _, k in ipairs(KEYWORDS) do cands[k] = cands[k] or true end
  else
    local v = _G
    for name in (head .. "."):gmatch("([^.:]*)[.:]") do
      if not is_name(name) then return {} end
      local ok, x = pcall(function() return v[name] end)
      if not ok or x == nil then return {} end
      v = x
    end
    collect(v, cands, 0)
  end
  local out = {}
  for k, x in pairs(cands) do
    if k:sub(1, #word) == word and (sep ~= ":" or type(x) == "function") then
      out[#out + 1] = head .. sep .. k
    end
  end
  table.sort(out)
  return out
end

-- The name help.text looks up for a path whose part `names[i]` is missing
-- from `parent` (the value of the parts before it): under the parent's
-- qualified name when help knows it ("nn.Linaer" → "venom.nn.Linaer"; a
-- tensor's methods are venom's functions), else the path as typed (an
-- unknown global "topk" is looked up as "venom.topk").
local function missing_name(help, parent, names, i)
  local rest = table.concat(names, ".", i)
  if i == 1 then return rest end
  local venom = require "venom"
  local prefix = help.name_of(parent) or (venom.is_tensor(parent) and "venom")
  return prefix and prefix .. "." .. rest or table.concat(names, ".")
end

--- repl.help_command(expr) → the text `?expr` prints at the prompt: the
-- help of what `expr` names (`?venom.matmul`, `?x.sum`, `?x:matmul`,
-- `?nn.Linear`, `?"venom.softmax"`), found by indexing from the globals
-- without calling anything; a name that leads nowhere gets "did you mean
-- ...?" (help.suggest), and `?` alone the overview.
function repl.help_command(expr)
  local help = require "venom.help"
  local function text_of(what)
    local text, err = help.text(what)
    return text or err
  end
  expr = expr:match("^%s*(.-)%s*$")
  if expr == "" then return help.overview() end
  local quoted = expr:match('^"(.*)"$') or expr:match("^'(.*)'$")
  if quoted then return text_of(quoted) end
  local names, rest = {}, "." .. expr
  while rest ~= "" do
    local name, after = rest:match("^[.:]([%a_][%w_]*)(.*)$")
    if not name then
      return ("?%s: ? takes a name such as venom.matmul, x.sum or nn.Linear"):format(expr)
    end
    names[#names + 1], rest = name, after
  end
  local v = _G
  for i, name in ipairs(names) do
    local ok, x = pcall(function() return v[name] end)
    if not ok or x == nil then return text_of(missing_name(help, v, names, i)) end
    v = x
  end
  if require("venom").is_tensor(v) then
    return ("%s is a tensor: ?%s.sum gives a method's help, %s:<Tab> lists them"):format(expr, expr, expr)
  end
  return text_of(v)
end

return repl
