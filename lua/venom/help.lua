--- venom.help — the documentation of a function, read from the docstrings
-- that are already in the code: the comment above a `vn_*` declaration in
-- venom.h for the C-backed functions, and the `---` comment above a
-- definition in lua/venom/*.lua for the Lua ones.
--
--     help(venom.matmul)      help(x.sum)      help(nn.Linear)
--     help("venom.topk")      ?venom.topk      (in the REPL)
--
-- An unknown name gets the closest known names ("did you mean ...?").
local venom = require "venom"

local help = {}

-- This file's directory: lua/venom in the source tree, or
-- PREFIX/share/lua/5.1/venom once installed.
local here = (debug.getinfo(1, "S").source:match("^@(.*)[/\\]") or ".")

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- venom.h's comment blocks, keyed by the C name of each function declared
-- right below them (one comment may cover several declarations).
local function c_docs()
  local dir = here .. "/../../engine/include"
  local text = read(dir .. "/venom.h")
  if not text then
    dir = here .. "/../../../../include"
    text = read(dir .. "/venom.h")
  end
  local docs = {}
  if not text then return docs end
  -- the sub-headers venom.h includes (venom/moe.h, venom/quant.h, venom/conv.h, ...) are read after it
  for sub in text:gmatch('#include "(venom/[%w_]+%.h)"') do text = text .. "\n" .. (read(dir .. "/" .. sub) or "") end
  local comment, last_was_decl = nil, false
  local in_comment, buf = false, {}
  local open_decl -- a declaration whose parameters continue on the next lines
  for line in (text .. "\n"):gmatch("(.-)\n") do
    if open_decl then
      open_decl.decl = open_decl.decl .. "\n    " .. line:gsub("^%s+", "")
      if line:find(";") then open_decl = nil end
    elseif in_comment then
      buf[#buf + 1] = line
      if line:find("%*/") then
        in_comment = false
        comment, last_was_decl = table.concat(buf, "\n"), false
      end
    elseif line:match("^%s*/%*") then
      buf = { line }
      if line:find("%*/") then comment, last_was_decl = line, false else in_comment = true end
    elseif line:match("^%s*$") or line:match("^#") then
      comment = nil
    else
      local name = line:match("[%s%*]vn_([%w_]+)%(")
      if name and comment then
        docs[name] = { comment = comment, decl = line }
        if not line:find(";") then open_decl = docs[name] end
      end
      if not name and not last_was_decl and not line:match("^%s") then comment = nil end
      last_was_decl = name ~= nil or line:match("^%s") ~= nil
    end
  end
  for name, d in pairs(docs) do
    local body = d.comment:gsub("^%s*/%*+%s?", ""):gsub("%s*%*/%s*$", ""):gsub("\n%s*%* ?", "\n")
    docs[name] = d.decl:gsub("^%s+", "") .. "\n" .. body
  end
  return docs
end

-- `---` blocks of one Lua module, keyed by the name they document:
-- "Linear" for `local Linear = ...`, "Linear:forward" / "nn.Linear" for
-- functions.
local function lua_docs(module)
  local text = read(here .. "/" .. module .. ".lua")
  local docs = {}
  if not text then return docs end
  local block = nil
  for line in (text .. "\n"):gmatch("(.-)\n") do
    local doc = line:match("^%-%-%-? ?(.*)$")
    if line:match("^%-%-%-") then
      block = { doc }
    elseif block and doc then
      block[#block + 1] = doc
    else
      if block then
        local name = line:match("^function ([%w_.:]+)%(") or line:match("^local ([%w_]+) = ")
          or line:match("^([%w_]+%.[%w_]+) = ")
        if name then
          local text_block = table.concat(block, "\n")
          docs[name] = text_block
          docs[name:gsub("^[%w_]+[.:]", "")] = docs[name:gsub("^[%w_]+[.:]", "")] or text_block
        end
      end
      -- one comment may cover a run of one-line functions or assignments
      -- right below it (venom.from_torch_names and venom.to_torch_names;
      -- venom.add_ = core.add_, venom.sub_ = core.sub_, ...)
      if not (line:match("^function [%w_.:]+%(.*%).* end$") or line:match("^[%w_]+%.[%w_]+ = [%w_.]+$")) then
        block = nil
      end
    end
  end
  return docs
end

local modules = { "nn", "optim", "data", "util", "prune", "sparse", "checkpoint", "plot", "metrics",
                  "nn_init", "nn_utils", "nn_transformer", "nn_graph", "nn_moe", "nn_dynamic", "nn_quant", "graph", "distributed", "help", "image",
                  "nn_conv", "data_image", "amp", "profile" }
local index -- qualified name → true, for every function reachable from venom
local names   -- function or class → its shortest qualified name

local function build_index()
  index, names = {}, {}
  local function add(prefix, t)
    for k, v in pairs(t) do
      if type(k) == "string" and (type(v) == "function" or (type(v) == "table" and getmetatable(v))) then
        local q = prefix .. k
        index[q] = true
        local old = names[v]
        if not old or #q < #old or (#q == #old and q < old) then names[v] = q end
      end
    end
  end
  add("venom.", venom.core)
  add("venom.", venom)
  -- Tensor methods (x.sum is not the same closure as venom.sum).
  local mt = getmetatable(venom.ones(1))
  if mt and type(mt.__methods) == "table" then add("venom.", mt.__methods) end
  if type(venom.Tensor) == "table" then add("venom.Tensor.", venom.Tensor) end
  add("venom.cuda.", venom.cuda)
  if type(venom.core.graph_methods) == "table" then add("venom.graph.", venom.core.graph_methods) end
  for _, m in ipairs(modules) do
    local ok, t = pcall(require, "venom." .. m)
    if ok and type(t) == "table" then
      local q = "venom." .. m:gsub("_", ".")
      add(q .. ".", t)
      index[q], names[t] = true, q -- help(nn) prints the module's header
    end
  end
  add("venom.data.transforms.", venom.data.transforms)
  index["venom.data.transforms"], names[venom.data.transforms] = true, "venom.data.transforms"
  names[venom] = "venom"
end

-- The comment at the top of a module's file (its overview), without the
-- comment dashes.
local function module_doc(module)
  local text = read(here .. "/" .. module .. ".lua")
  if not text then return nil end
  local lines = {}
  for line in (text .. "\n"):gmatch("(.-)\n") do
    local doc = line:match("^%-%-%-? ?(.*)$")
    if not doc then break end
    lines[#lines + 1] = doc
  end
  return #lines > 0 and table.concat(lines, "\n") or nil
end

local cdocs, ldocs

local function doc_of(qualified)
  if qualified == "venom" then return module_doc("init") end
  local module = qualified:match("^venom%.([%w_.]+)$")
  if module then
    for _, m in ipairs(modules) do
      if m:gsub("_", ".") == module then return module_doc(m) end
    end
  end
  cdocs = cdocs or c_docs()
  if not ldocs then
    ldocs = {}
    for _, m in ipairs(modules) do ldocs[m] = lua_docs(m) end
    ldocs.init = lua_docs("init")
  end
  local mod, name = qualified:match("^venom%.([%w_.]+)%.([%w_]+)$")
  if mod then
    local file = mod:gsub("%.", "_")
    local d = ldocs[file] and (ldocs[file][name] or ldocs[file][mod .. "." .. name])
    if d then return d end
    -- a function of a table inside a module's file, by the table's name
    -- (venom.data.transforms.ToTensor: transforms.ToTensor in data_image.lua)
    local inner = mod:match("([%w_]+)$") .. "." .. name
    for _, m in ipairs(modules) do
      if ldocs[m][inner] then return ldocs[m][inner] end
    end
  end
  name = qualified:match("([%w_]+)$")
  if ldocs.init["venom." .. name] then return ldocs.init["venom." .. name] end
  local d = cdocs[name] or cdocs["tensor_" .. name] or (mod == "graph" and cdocs["csr_" .. name]) or nil
  if d then return d, true end
  -- a function of a table that one comment documents whole (venom.cuda)
  return mod and ldocs.init["venom." .. mod] or nil, false
end

-- Edit distance, for "did you mean".
local function distance(a, b)
  local prev = {}
  for j = 0, #b do prev[j] = j end
  for i = 1, #a do
    local cur = { [0] = i }
    for j = 1, #b do
      local cost = a:sub(i, i) == b:sub(j, j) and 0 or 1
      cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
    end
    prev = cur
  end
  return prev[#b]
end

--- help.suggest(name) → up to 3 known qualified names closest to `name`.
function help.suggest(name)
  if not index then build_index() end
  local scored = {}
  local short = name:match("([%w_]+)$") or name
  for q in pairs(index) do
    local d = math.min(distance(name, q), distance(short, q:match("([%w_]+)$")) + 1)
    if d <= math.max(2, math.floor(#short / 3)) then scored[#scored + 1] = { q, d } end
  end
  table.sort(scored, function(a, b) return a[2] < b[2] or (a[2] == b[2] and a[1] < b[1]) end)
  local out = {}
  for i = 1, math.min(3, #scored) do out[i] = scored[i][1] end
  return out
end

--- help.text(what) → the documentation of `what` (a function or module
-- table from venom, or a qualified name such as "venom.topk") as a string,
-- or nil and a message (with suggestions) when there is none.
function help.text(what)
  if not index then build_index() end
  local qualified
  if type(what) == "string" then
    if not what:match("^[%w_.]+$") then
      return nil, ("help: expected a name such as \"venom.matmul\", got %q"):format(what)
    end
    qualified = what:match("^venom%.") and what or "venom." .. what
    if not index[qualified] then
      local s = help.suggest(qualified)
      return nil, ("no %s in venom%s"):format(qualified, #s > 0 and "; did you mean " .. table.concat(s, ", ") .. "?" or "")
    end
  elseif what == nil then
    return nil, "no documentation for nil (a misspelt field? help(\"venom.name\") suggests names)"
  else
    qualified = names[what]
    if not qualified then return nil, ("no documentation for this %s (not a venom function)"):format(type(what)) end
  end
  local d, from_c = doc_of(qualified)
  if not d then return nil, ("%s has no docstring"):format(qualified) end
  return qualified .. (from_c and "  (from the C API in venom.h: indices there are 0-based, 1-based in Lua)" or "")
    .. "\n\n" .. d
end

--- help.name_of(v) → the qualified name under which help knows `v` (a
-- function, class or module of venom: "venom.nn.Linear", "venom.nn"), or nil.
function help.name_of(v)
  if not index then build_index() end
  return names[v]
end

--- help.overview() → what help() with no argument prints: how to ask for
-- help and the modules there are.
function help.overview()
  return [[
help(venom.matmul)  help(x.sum)  help(nn.Linear)  the documentation of a function,
                                                  a tensor method or a class
help("venom.topk")  by name; a misspelt name gets "did you mean ...?"
help(nn)             the overview of a module
?venom.matmul  ?x.sum  ?nn.Linear   the same at the REPL prompt (? alone: this text)

Modules (the REPL has venom, nn, optim and help as globals):
  venom             tensors, ops and autograd: venom.randn, x:matmul(w), loss:backward()
  venom.nn          layers and losses: nn.Linear, nn.Sequential, nn.CrossEntropyLoss
  venom.optim       optimizers and schedules: optim.SGD, optim.Adam, optim.AdamW, optim.StepLR
  venom.data        datasets and batching: data.fashion_mnist, data.planetoid, data.DataLoader
  venom.graph       sparse graphs (CSR): graph.from_edges, g:spmm, g:scatter, g:gather, g:propagate
  venom.sparse      V:N:M sparse layers: nn.SparseLinear, sparse.from_dense, sparse.sparsify
  venom.prune       gradual magnitude pruning: prune.GMP
  venom.checkpoint  a whole training state in one safetensors file
  venom.distributed several processes over MPI: init, all_reduce, DataParallel
  venom.util        progress bar, train_epoch, command-line parsing
  venom.metrics     a log of training metrics (CSV or JSON Lines)
  venom.plot        training curves to PNG or SVG through gnuplot
Tab completes names at the prompt: venom.ze<Tab>, x:res<Tab>.]]
end

--- help(what): prints help.text(what), or the reason there is none;
-- help() with no argument prints help.overview().
setmetatable(help, { __call = function(_, ...)
  if select("#", ...) == 0 then
    print(help.overview())
    return
  end
  local text, err = help.text((...))
  print(text or err)
end })

return help
