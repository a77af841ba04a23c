-- venom.nn graph layers (GCNConv, SAGEConv, GATConv) against plain-Lua
-- references on a small graph with an isolated vertex; gradients reach
-- every parameter; GATConv streamed over edge chunks gives the same output
-- and gradients; a tiny node-classification problem is learned; bad calls
-- are errors that name the layer.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"
local nn = require "venom.nn"
local graph = require "venom.graph"

venom.manual_seed(7)

-- Five vertices: a directed cycle 1→2→3→1, the edge 4→1 (vertex 4 has no
-- in-edges) and vertex 5 isolated (degree 0 in and out).
local N = 5
local SRC, DST = { 1, 2, 3, 4 }, { 2, 3, 1, 1 }
local g = graph.from_edges(SRC, DST, N)

-- Dense helpers on Lua tables ------------------------------------------------------------
local function matmul_t(x, w) -- x (n, k) · wᵀ, w (m, k)
  local out = {}
  for i = 1, #x do
    out[i] = {}
    for j = 1, #w do
      local s = 0
      for k = 1, #w[j] do s = s + x[i][k] * w[j][k] end
      out[i][j] = s
    end
  end
  return out
end
local function add_bias(h, b)
  for i = 1, #h do for j = 1, #b do h[i][j] = h[i][j] + b[j] end end
  return h
end
-- In-neighbour lists with self loops when loops: nbr[i] = {j, ...}.
local function in_lists(loops)
  local nbr = {}
  for i = 1, N do nbr[i] = loops and { i } or {} end
  for k = 1, #SRC do table.insert(nbr[DST[k]], SRC[k]) end
  return nbr
end

local x = venom.randn(N, 3)
local xt = x:totable()

-- GCNConv -------------------------------------------------------------------------------
local gcn = nn.GCNConv(3, 4)
venom.no_grad(function() gcn.bias:copy_(venom.randn(4)) end)
local got = gcn(x, g)
do
  local nbr = in_lists(true)
  local deg = {}
  for i = 1, N do deg[i] = #nbr[i] end
  local xw = matmul_t(xt, gcn.weight:totable())
  local want = {}
  for i = 1, N do
    want[i] = { 0, 0, 0, 0 }
    for _, j in ipairs(nbr[i]) do
      for f = 1, 4 do want[i][f] = want[i][f] + xw[j][f] / math.sqrt(deg[i] * deg[j]) end
    end
  end
  add_bias(want, gcn.bias:totable())
  tap.ok(testutil.max_diff(got:totable(), want) < 1e-5, "GCNConv = D^-1/2 (A + I) D^-1/2 X W^T + b")
  tap.ok(got:ne(got):sum():item() == 0, "GCNConv: an isolated vertex gives no NaN")
end
tap.ok(tostring(gcn):find("GCNConv%(3, 4") ~= nil, "GCNConv prints its sizes")

-- SAGEConv ------------------------------------------------------------------------------
for _, sizes in ipairs({ { 3, 4 }, { 3, 2 } }) do -- (out < in: the projection runs first)
  local sage = nn.SAGEConv(sizes[1], sizes[2])
  local h = sage(x, g)
  local nbr = in_lists(false)
  local mean = {}
  for i = 1, N do
    mean[i] = { 0, 0, 0 }
    for _, j in ipairs(nbr[i]) do
      for f = 1, 3 do mean[i][f] = mean[i][f] + xt[j][f] / #nbr[i] end
    end
  end
  local own = add_bias(matmul_t(xt, sage.lin_self.weight:totable()), sage.lin_self.bias:totable())
  local neigh = matmul_t(mean, sage.lin_neigh.weight:totable())
  for i = 1, N do for f = 1, sizes[2] do own[i][f] = own[i][f] + neigh[i][f] end end
  tap.ok(testutil.max_diff(h:totable(), own) < 1e-5,
    ("SAGEConv(%d, %d) = W_self x_i + W_neigh mean_j x_j + b (0 mean without in-edges)")
      :format(sizes[1], sizes[2]))
end

-- GATConv -------------------------------------------------------------------------------
local function gat_reference(layer)
  local H, C = layer.heads, layer.out_features
  local z = matmul_t(xt, layer.weight:totable())
  local as, ad = layer.att_src:totable(), layer.att_dst:totable()
  local nbr = in_lists(true)
  local out = {}
  for i = 1, N do
    out[i] = {}
    for k = 1, H do
      local function half(a, v)
        local s = 0
        for c = 1, C do s = s + a[k][c] * z[v][(k - 1) * C + c] end
        return s
      end
      local sc, mx = {}, -math.huge
      for t, j in ipairs(nbr[i]) do
        local e = half(as, j) + half(ad, i)
        sc[t] = e > 0 and e or 0.2 * e
        mx = math.max(mx, sc[t])
      end
      local den = 0
      for t = 1, #sc do den = den + math.exp(sc[t] - mx) end
      for c = 1, C do
        local s = 0
        for t, j in ipairs(nbr[i]) do s = s + math.exp(sc[t] - mx) / den * z[j][(k - 1) * C + c] end
        out[i][(k - 1) * C + c] = s
      end
    end
    if not layer.concat then
      local m = {}
      for c = 1, C do
        local s = 0
        for k = 1, H do s = s + out[i][(k - 1) * C + c] end
        m[c] = s / H
      end
      out[i] = m
    end
  end
  return add_bias(out, layer.bias:totable())
end

for _, concat in ipairs({ true, false }) do
  local gat = nn.GATConv(3, 2, { heads = 3, concat = concat })
  venom.no_grad(function() gat.bias:copy_(venom.randn(gat.bias:size(1))) end)
  local h = gat(x, g)
  tap.is(table.concat(h:shape(), ","), concat and "5,6" or "5,2",
    "GATConv: heads concatenated or averaged (concat = " .. tostring(concat) .. ")")
  tap.ok(testutil.max_diff(h:totable(), gat_reference(gat)) < 1e-5,
    "GATConv = softmax over in-edges (with self loops) of LeakyReLU(a^T[Wh_i || Wh_j]), weighted sum"
      .. (concat and "" or ", heads averaged"))
end

-- Gradients reach every parameter; the chunked GATConv agrees -----------------------
local function grads(layer, input)
  layer:zero_grad()
  local h = layer(input, g)
  local loss = (h * h):sum()
  loss:backward()
  local out = { h:totable() }
  for _, p in ipairs(layer:parameters()) do out[#out + 1] = p.grad and p.grad:totable() or false end
  return out
end
for name, make in pairs({
  GCNConv = function() return nn.GCNConv(3, 4) end,
  SAGEConv = function() return nn.SAGEConv(3, 4) end,
  GATConv = function() return nn.GATConv(3, 2, { heads = 2 }) end,
}) do
  local layer = make()
  local r = grads(layer, x)
  local all = #r == #layer:parameters() + 1
  for k = 2, #r do
    if not r[k] then all = false end
  end
  tap.ok(all, name .. ": backward gives every parameter a gradient")
end
do
  local gat = nn.GATConv(3, 2, { heads = 2 })
  local whole = grads(gat, x)
  gat.max_edges = 2
  local chunked = grads(gat, x)
  tap.ok(testutil.max_diff(whole, chunked) < 1e-5,
    "GATConv with max_edges = 2 (edge chunks) gives the same output and gradients")
end

-- A tiny problem is learned: two 4-cliques, the class is the clique, the
-- features are noise, one labelled node per clique.
do
  local src, dst = {}, {}
  for c = 0, 1 do
    for a = 1, 4 do
      for b = 1, 4 do
        if a ~= b then src[#src + 1], dst[#dst + 1] = 4 * c + a, 4 * c + b end
      end
    end
  end
  src[#src + 1], dst[#dst + 1] = 4, 5 -- one bridge
  local gg = graph.from_edges(src, dst, 8)
  local feats = venom.randn(8, 4)
  -- The two labelled nodes get telling features; the others learn from them.
  venom.no_grad(function()
    feats:narrow(1, 1, 1):fill_(1)
    feats:narrow(1, 8, 1):fill_(-1)
  end)
  local labels = venom.tensor({ 1, 1, 1, 1, 2, 2, 2, 2 }, "i64")
  local train = venom.tensor({ 1, 8 }, "i64")
  for _, name in ipairs({ "GCNConv", "SAGEConv", "GATConv" }) do
    venom.manual_seed(1)
    local l1, l2 = nn[name](4, 8), nn[name](8, 2)
    local params = l1:parameters()
    for _, p in ipairs(l2:parameters()) do params[#params + 1] = p end
    local opt = require("venom.optim").Adam(params, { lr = 0.05 })
    local first, last
    for _ = 1, 60 do
      local out = l2(l1(feats, gg):relu(), gg)
      local loss = venom.cross_entropy(out:index_select(1, train), labels:index_select(1, train))
      first = first or loss:item()
      last = loss:item()
      opt:zero_grad()
      loss:backward()
      opt:step()
    end
    tap.ok(last < 0.1 * first, ("%s: two layers fit the labelled nodes (loss %.3f → %.4f)")
      :format(name, first, last))
  end
end

-- Bad calls -----------------------------------------------------------------------------
local gcn2 = nn.GCNConv(3, 4)
tap.error_like(function() gcn2(venom.randn(5, 2), g) end,
  "nn.GCNConv: expected node features of shape %(N, 3%), got %(5, 2%)", "wrong feature width")
tap.error_like(function() gcn2(venom.randn(4, 3), g) end,
  "nn.GCNConv: the features have 4 rows but the graph has 5 nodes", "rows ≠ vertices")
tap.error_like(function() gcn2(x, {}) end, "nn.GCNConv: expected a graph", "not a graph")
tap.error_like(function() gcn2(nil, g) end, "nn.GCNConv: expected the node features", "no features")
tap.error_like(function() nn.SAGEConv(3, 0) end, "out_features", "SAGEConv with 0 outputs")
tap.error_like(function() nn.GATConv(3, 2, { heads = 0 }) end, "heads", "GATConv with 0 heads")
tap.error_like(function() nn.GATConv(3, 2, { dropout = 1 }) end, "dropout must be a number in %[0, 1%)",
  "GATConv dropout 1")
tap.error_like(function() nn.GCNConv(3, 2, { bais = false }) end, "bais", "an unknown option is named")

-- A graph without edges: every vertex is isolated; GCN keeps each vertex to itself.
do
  local ok, empty = pcall(graph.from_edges, {}, {}, 5)
  if not ok then
    tap.ok(false, "a graph without edges: " .. tostring(empty))
  else
    local h = gcn(x, empty)
    local want = add_bias(matmul_t(xt, gcn.weight:totable()), gcn.bias:totable())
    tap.ok(testutil.max_diff(h:totable(), want) < 1e-5, "GCNConv on a graph without edges: X W^T + b")
  end
end

tap.done()
