--- venom.data_planetoid — data.planetoid: the Planetoid citation graphs
-- (Cora, CiteSeer) in the LINQS layout, parsed into tensors for
-- venom.graph and the GNN layers (tutorial 7).
local venom = require "venom"
local util = require "venom.util"
local fail = util.fail
local read_file = util.read_file

local planetoid = {}

-- Citation graphs (Planetoid) ------------------------------------------------------

-- Rows of features per venom.tensor call: bounds the Lua table built for each piece.
local FEATURE_CHUNK = 262144

-- The text of NAME.content (plain) or NAME.content.gz under root, and the
-- path read; a .gz file is decompressed by zlib in the engine
-- (venom.read_file).
local function read_content(who, root, name, hint)
  local plain = root .. "/" .. name .. ".content"
  local f = io.open(plain, "rb")
  if f then
    f:close()
    return read_file(who, plain), plain
  end
  local gz = plain .. ".gz"
  f = io.open(gz, "rb")
  if not f then
    fail(("%s: cannot open %s (no such file; nor %s)%s"):format(who, gz, plain, hint))
  end
  -- zlib reads a file that is not gzip as plain text; a .gz name that is
  -- not gzip is a mistake to report, not text to parse.
  local magic = f:read(2)
  f:close()
  if magic ~= "\31\139" then
    fail(("%s: %s is not a gzip file (it does not start with the gzip magic bytes 1f 8b)"):format(who, gz))
  end
  local ok, text = pcall(venom.read_file, gz)
  if not ok then fail(("%s: %s"):format(who, util.error_text(text))) end
  return text, gz
end

-- Class names → labels 1..C: "c0", "c1", ... in numeric order (c10 after c9),
-- any other names in sorted order.
local function class_order(seen)
  local names, numbered = {}, true
  for c in pairs(seen) do
    names[#names + 1] = c
    if not c:match("^c%d+$") then numbered = false end
  end
  table.sort(names, function(a, b)
    if numbered then return tonumber(a:sub(2)) < tonumber(b:sub(2)) end
    return a < b
  end)
  return names
end

-- Parses NAME.content: one line per node, "id f1 ... fF label" (tab or
-- space separated). Returns the node ids in file order, id → index, the
-- features (N, F) f32 (row-normalised when normalize), the labels i64 (N)
-- (0 for "none"), and the class names. The features go to the engine in
-- pieces of whole rows as they are read, so no Lua table holds all N·F.
local function parse_content(who, text, path, normalize)
  local ids, index, line_of, label_of = {}, {}, {}, {}
  local pieces, buf, rows_in_buf = {}, {}, 0
  local F, per_chunk
  local function flush()
    for j = rows_in_buf * F + 1, #buf do buf[j] = nil end
    local flat = venom.tensor(buf)
    pieces[#pieces + 1] = flat:reshape(rows_in_buf, F)
    flat:free()
    rows_in_buf = 0
  end
  local n_line = 0
  local fields = {}
  for line in text:gmatch("([^\n]*)\n?") do
    n_line = n_line + 1
    if line:find("%S") then
      local nf = 0
      for field in line:gmatch("%S+") do
        nf = nf + 1
        fields[nf] = field
      end
      if nf < 3 then
        fail(("%s: %s:%d: expected a node id, its features and a label, got %d field%s")
          :format(who, path, n_line, nf, nf == 1 and "" or "s"))
      end
      if not F then
        F = nf - 2
        per_chunk = math.max(1, math.floor(FEATURE_CHUNK / F))
      end
      if nf - 2 ~= F then
        fail(("%s: %s:%d: %d features, but the lines before have %d")
          :format(who, path, n_line, nf - 2, F))
      end
      local id = fields[1]
      if index[id] then
        fail(("%s: %s:%d: node id '%s' appears twice (first on line %d)")
          :format(who, path, n_line, id, line_of[index[id]]))
      end
      local base, sum = rows_in_buf * F, 0
      for k = 1, F do
        local field = fields[k + 1]
        -- Bag-of-words rows are mostly "0": skip tonumber for those.
        local v = field == "0" and 0 or tonumber(field)
        if not v or v ~= v or math.abs(v) == math.huge then
          fail(("%s: %s:%d: feature %d of node '%s' is '%s', not a finite number")
            :format(who, path, n_line, k, id, fields[k + 1]))
        end
        buf[base + k] = v
        sum = sum + math.abs(v)
      end
      -- Kipf & Welling divide each row by its sum; an all-zero row (a node
      -- without features) stays zero.
      if normalize and sum > 0 then
        for k = 1, F do buf[base + k] = buf[base + k] / sum end
      end
      rows_in_buf = rows_in_buf + 1
      if rows_in_buf == per_chunk then flush() end
      ids[#ids + 1] = id
      index[id], line_of[#ids], label_of[#ids] = #ids, n_line, fields[nf]
    end
  end
  if #ids == 0 then fail(("%s: %s holds no nodes"):format(who, path)) end
  if rows_in_buf > 0 then flush() end
  local features = #pieces == 1 and pieces[1] or venom.cat(pieces, 1)
  if features ~= pieces[1] then
    for _, p in ipairs(pieces) do p:free() end
  end
  local seen = {}
  for _, c in ipairs(label_of) do
    if c ~= "none" then seen[c] = true end
  end
  local classes = class_order(seen)
  local label_index = {}
  for i, c in ipairs(classes) do label_index[c] = i end
  local labels = {}
  for i, c in ipairs(label_of) do labels[i] = label_index[c] or 0 end
  return ids, index, features, venom.tensor(labels, "i64"), classes
end

-- Parses NAME.cites: "a b" per line, an undirected citation. Returns the
-- 1-based src and dst lists holding each edge in both directions, once
-- (a pair listed twice, in either order, counts once; a self loop once).
local function parse_cites(who, text, path, index, n, content_path)
  local src, dst, seen = {}, {}, {}
  local n_line = 0
  for line in text:gmatch("([^\n]*)\n?") do
    n_line = n_line + 1
    if line:find("%S") then
      local a, b, rest = line:match("^%s*(%S+)%s+(%S+)(.*)$")
      if not a or rest:find("%S") then
        fail(("%s: %s:%d: expected two node ids, got '%s'"):format(who, path, n_line, line))
      end
      local ia, ib = index[a], index[b]
      for _, pair in ipairs({ { a, ia }, { b, ib } }) do
        if not pair[2] then
          fail(("%s: %s:%d: node id '%s' is not in %s"):format(who, path, n_line, pair[1],
            content_path))
        end
      end
      for _, e in ipairs({ { ia, ib }, { ib, ia } }) do
        local key = (e[1] - 1) * n + e[2]
        if not seen[key] then
          seen[key] = true
          src[#src + 1], dst[#dst + 1] = e[1], e[2]
        end
      end
    end
  end
  return src, dst
end

-- Parses NAME.split: "id train|val|test|none" per line. Returns the 1-based
-- index lists of the three sets, each in node order.
local function parse_split(who, text, path, index, n, content_path)
  local set_of, line_of = {}, {}
  local n_line = 0
  for line in text:gmatch("([^\n]*)\n?") do
    n_line = n_line + 1
    if line:find("%S") then
      local id, set, rest = line:match("^%s*(%S+)%s+(%S+)(.*)$")
      if not id or rest:find("%S") then
        fail(("%s: %s:%d: expected a node id and train, val, test or none, got '%s'")
          :format(who, path, n_line, line))
      end
      if set ~= "train" and set ~= "val" and set ~= "test" and set ~= "none" then
        fail(("%s: %s:%d: set '%s' of node '%s' is not train, val, test or none")
          :format(who, path, n_line, set, id))
      end
      local i = index[id]
      if not i then
        fail(("%s: %s:%d: node id '%s' is not in %s"):format(who, path, n_line, id, content_path))
      end
      if set_of[i] then
        fail(("%s: %s:%d: node '%s' is listed twice (first on line %d)")
          :format(who, path, n_line, id, line_of[i]))
      end
      set_of[i], line_of[i] = set, n_line
    end
  end
  local sets = { train = {}, val = {}, test = {} }
  for i = 1, n do
    local list = sets[set_of[i]]
    if list then list[#list + 1] = i end
  end
  return sets
end

--- A citation graph in the LINQS layout of the Planetoid data sets (Cora,
-- CiteSeer; Yang et al. 2016) from directory `root`: NAME.content[.gz]
-- (per line: node id, the features, the class), NAME.cites (per line: two
-- node ids, an undirected citation) and NAME.split (per line: node id and
-- train, val, test or none: the public split); root may also be the folder
-- above, holding NAME/ (as ../shared/data does). Returns a table:
--   features  f32 (N, F), each row divided by its sum as Kipf & Welling do
--             (opts.normalize = false: the raw values); a node without
--             features keeps a zero row
--   labels    i64 (N), classes 1..C (0: a node whose class is "none")
--   src, dst  i64 (E), 1-based: every citation in both directions, once
--   train, val, test  i64 1-based node numbers, in node order
--   num_nodes, num_features, num_classes, num_edges (E, directed)
--   classes   the class names by label; names: the node ids by node number
-- Nodes are numbered 1..N in the order of NAME.content. Errors name the
-- file and line: a line that does not parse, an edge or split entry naming
-- an unknown node, a node listed twice; and a missing file.
function planetoid.planetoid(root, name, opts)
  local who = "data.planetoid"
  if type(root) ~= "string" then
    fail(("%s: root must be a directory path (a string), got %s"):format(who, type(root)))
  end
  if type(name) ~= "string" or not name:match("^[%w_.-]+$") then
    fail(("%s: name must be a data set name such as 'cora' or 'citeseer', got %s")
      :format(who, type(name) == "string" and "'" .. name .. "'" or type(name)))
  end
  opts = util.check_options(opts, { "normalize" }, who)
  if opts.normalize ~= nil and type(opts.normalize) ~= "boolean" then
    fail(("%s: normalize must be true or false, got %s"):format(who, tostring(opts.normalize)))
  end
  -- root may be the data set's folder or the folder above it (../shared/data
  -- holds cora/ and citeseer/).
  local f = io.open(root .. "/" .. name .. ".cites", "rb")
  if f then
    f:close()
  else
    f = io.open(root .. "/" .. name .. "/" .. name .. ".cites", "rb")
    if f then
      f:close()
      root = root .. "/" .. name
    end
  end
  local hint = ("; expected %s.content[.gz], %s.cites and %s.split in %s or in %s/%s/ (the LINQS "
    .. "layout; get Cora or CiteSeer from the Planetoid or LINQS releases)"):format(name, name, name, root,
    root, name)
  local text, content_path = read_content(who, root, name, hint)
  local ids, index, features, labels, classes =
    parse_content(who, text, content_path, opts.normalize ~= false)
  text = nil -- the decompressed text can be large
  local cites_path, split_path = root .. "/" .. name .. ".cites", root .. "/" .. name .. ".split"
  local src, dst = parse_cites(who, read_file(who, cites_path, hint:sub(3)), cites_path, index,
    #ids, content_path)
  local sets = parse_split(who, read_file(who, split_path, hint:sub(3)), split_path, index,
    #ids, content_path)
  return {
    features = features, labels = labels,
    src = venom.tensor(src, "i64"), dst = venom.tensor(dst, "i64"),
    train = venom.tensor(sets.train, "i64"), val = venom.tensor(sets.val, "i64"),
    test = venom.tensor(sets.test, "i64"),
    num_nodes = #ids, num_features = features:size(2), num_classes = #classes,
    num_edges = #src, classes = classes, names = ids,
  }
end

return planetoid
