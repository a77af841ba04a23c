-- venom.data.planetoid: a small citation graph written here (values, the
-- two directions of each edge, the split, row normalisation, a .gz file),
-- bad input (each error names the file and line), and the real Cora and
-- CiteSeer of ../shared/data when they are there.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local data = require "venom.data"

local dir = testutil.tmpdir()

local function write(path, text)
  local f = assert(io.open(path, "wb"))
  f:write(text)
  f:close()
end

-- A folder holding NAME.content, NAME.cites and NAME.split with the given texts.
local folders = 0
local function dataset(content, cites, split)
  folders = folders + 1
  local d = ("%s/g%d"):format(dir, folders)
  os.execute("mkdir -p '" .. d .. "'")
  write(d .. "/tiny.content", content)
  write(d .. "/tiny.cites", cites)
  write(d .. "/tiny.split", split)
  return d
end

-- Four papers, 3 features, classes c0/c1 and one unlabeled; paper 40 cites
-- nothing. "10 20" appears twice (once reversed): one undirected edge.
local CONTENT = "10\t1\t0\t1\tc1\n20\t0\t2\t2\tc0\n30\t0\t0\t0\tnone\n40\t1\t1\t0\tc1\n"
local CITES = "10\t20\n20\t10\n20\t30\n"
local SPLIT = "10\ttrain\n20\tval\n30\tnone\n40\ttest\n"

local root = dataset(CONTENT, CITES, SPLIT)
local g = data.planetoid(root, "tiny")
tap.is(g.num_nodes, 4, "4 nodes")
tap.is(g.num_features, 3, "3 features")
tap.is(g.num_classes, 2, "2 classes (none is no class)")
tap.is(table.concat(g.classes, ","), "c0,c1", "class names in order")
tap.is(table.concat(g.names, ","), "10,20,30,40", "node ids in file order")
tap.is(table.concat(g.labels:totable(), ","), "2,1,0,2", "labels 1-based, 0 for none")
tap.is(g.labels:dtype(), "i64", "labels are i64")
tap.ok(testutil.max_diff(g.features:totable(),
  { { 0.5, 0, 0.5 }, { 0, 0.5, 0.5 }, { 0, 0, 0 }, { 0.5, 0.5, 0 } }) < 1e-6,
  "features row-normalised; an empty row stays zero (no NaN)")
local pairs_seen = {}
local src, dst = g.src:totable(), g.dst:totable()
for i = 1, #src do pairs_seen[#pairs_seen + 1] = src[i] .. ">" .. dst[i] end
table.sort(pairs_seen)
tap.is(table.concat(pairs_seen, " "), "1>2 2>1 2>3 3>2", "each citation in both directions, once")
tap.is(g.num_edges, 4, "num_edges counts directed edges")
tap.is(g.src:dtype(), "i64", "src is i64")
tap.is(table.concat(g.train:totable(), ","), "1", "train set")
tap.is(table.concat(g.val:totable(), ","), "2", "val set")
tap.is(table.concat(g.test:totable(), ","), "4", "test set")
local raw = data.planetoid(root, "tiny", { normalize = false })
tap.ok(testutil.max_diff(raw.features:totable()[2], { 0, 2, 2 }) == 0, "normalize = false: raw values")

-- The folder above (root/NAME/) and a gzip-compressed .content.
local above = dir .. "/above"
os.execute(("mkdir -p '%s/tiny' && cp '%s'/tiny.* '%s/tiny/' && gzip '%s/tiny/tiny.content'")
  :format(above, root, above, above))
local gz = data.planetoid(above, "tiny")
tap.is(gz.num_nodes, 4, "root may be the folder above NAME/; reads NAME.content.gz")
tap.ok(testutil.max_diff(gz.features:totable(), g.features:totable()) == 0, ".gz gives the same features")

-- Bad input --------------------------------------------------------------------------
tap.error_like(function() data.planetoid(dir .. "/nowhere", "cora") end,
  "cannot open .*nowhere/cora%.content%.gz.*cora%.cites and cora%.split", "missing files: names what is expected")
tap.error_like(function() data.planetoid(42, "cora") end, "root must be a directory path", "root not a string")
tap.error_like(function() data.planetoid(root, nil) end, "name must be a data set name", "name missing")
tap.error_like(function() data.planetoid(root, "tiny", { normalise = true }) end, "normalise",
  "unknown option named")
tap.error_like(function() data.planetoid(dataset(CONTENT, "10\t20\n20 x 30\n", SPLIT), "tiny") end,
  "tiny%.cites:2: expected two node ids, got '20 x 30'", "a .cites line that does not parse: file and line")
tap.error_like(function() data.planetoid(dataset(CONTENT, "10\n", SPLIT), "tiny") end,
  "tiny%.cites:1: expected two node ids", "a .cites line with one id")
tap.error_like(function() data.planetoid(dataset(CONTENT, "10\t20\n\n10\t99\n", SPLIT), "tiny") end,
  "tiny%.cites:3: node id '99' is not in .*tiny%.content", "an edge to an unknown node")
tap.error_like(function() data.planetoid(dataset(CONTENT, CITES, SPLIT .. "77\ttest\n"), "tiny") end,
  "tiny%.split:5: node id '77' is not in", "a split naming an unknown node")
tap.error_like(function() data.planetoid(dataset(CONTENT, CITES, "10\ttrian\n"), "tiny") end,
  "tiny%.split:1: set 'trian' of node '10' is not train, val, test or none", "a bad set name")
tap.error_like(function() data.planetoid(dataset(CONTENT, CITES, "10\ttrain\n10\ttest\n"), "tiny") end,
  "tiny%.split:2: node '10' is listed twice %(first on line 1%)", "a node in two sets")
tap.error_like(function() data.planetoid(dataset(CONTENT .. "50\t1\t0\tc0\n", CITES, SPLIT), "tiny") end,
  "tiny%.content:5: 2 features, but the lines before have 3", "a short feature row")
tap.error_like(function() data.planetoid(dataset(CONTENT .. "50\t1\tx\t0\tc0\n", CITES, SPLIT), "tiny") end,
  "tiny%.content:5: feature 2 of node '50' is 'x', not a finite number", "a feature that is not a number")
tap.error_like(function() data.planetoid(dataset(CONTENT .. "10\t1\t0\t0\tc0\n", CITES, SPLIT), "tiny") end,
  "tiny%.content:5: node id '10' appears twice %(first on line 1%)", "a duplicate node")
tap.error_like(function() data.planetoid(dataset("", "", ""), "tiny") end,
  "tiny%.content holds no nodes", "an empty graph")
local broken = dataset(CONTENT, CITES, SPLIT)
os.remove(broken .. "/tiny.content")
-- A gzip header (magic, deflate, no flags) followed by bytes that are not a
-- deflate stream: zlib reports the damage, and the message names the file.
write(broken .. "/tiny.content.gz", "\31\139\8\0\0\0\0\0\0\3" .. ("\255"):rep(64))
tap.error_like(function() data.planetoid(broken, "tiny") end,
  "data%.planetoid: read_file: '.*tiny%.content%.gz' is a damaged gzip file", "a damaged .gz file")
local nosplit = dataset(CONTENT, CITES, SPLIT)
os.remove(nosplit .. "/tiny.split")
tap.error_like(function() data.planetoid(nosplit, "tiny") end, "cannot open .*tiny%.split", "a missing split file")

-- The real data sets -----------------------------------------------------------------
local REAL = {
  cora = { nodes = 2708, features = 1433, classes = 7, edges = 10556, train = 140 },
  citeseer = { nodes = 3327, features = 3703, classes = 6, edges = 9104, train = 120 },
}
for _, name in ipairs({ "cora", "citeseer" }) do
  local f = io.open("../shared/data/" .. name .. "/" .. name .. ".cites", "rb")
  if not f then
    tap.skip("../shared/data/" .. name .. " is not there", 4)
  else
    f:close()
    local d = data.planetoid("../shared/data/" .. name, name)
    local want = REAL[name]
    tap.ok(d.num_nodes == want.nodes and d.num_features == want.features and d.num_classes == want.classes,
      ("%s: %d nodes, %d features, %d classes"):format(name, want.nodes, want.features, want.classes))
    tap.is(d.num_edges, want.edges, name .. ": directed edges (both directions of each citation)")
    tap.ok(d.train:size(1) == want.train and d.val:size(1) == 500 and d.test:size(1) == 1000,
      name .. ": the public split sizes")
    local s = d.features:sum(2)
    local mx, mn = s:max():item(), s:min():item()
    tap.ok(math.abs(mx - 1) < 1e-4 and (mn > 0.9999 or mn == 0), name .. ": rows sum to 1 (or 0 without features)")
  end
end

os.execute("rm -rf '" .. dir .. "'")
tap.done()
