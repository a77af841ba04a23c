-- venom.graph: from_edges (Lua arrays and tensors, the stored order, 1-based
-- edges), degree, add_self_loops, gcn_norm (no NaN for an isolated vertex),
-- spmm against a dense product, autograd through the SAGA stages, chunked
-- propagate equal to the unchunked one, and bad input.
package.path = "tests/lua/?.lua;" .. package.path
local T = require "tap"
local venom = require "venom"
local graph = venom.graph

venom.manual_seed(5)
T.plan(27)

local function same_list(got, want, name)
  local ok = #got == #want
  for k = 1, #want do ok = ok and got[k] == want[k] end
  T.ok(ok, name)
  if not ok then T.diag("got {%s}, want {%s}", table.concat(got, ", "), table.concat(want, ", ")) end
end

local g = graph.from_edges({ 1, 2, 3, 1, 2 }, { 2, 3, 1, 3, 2 }, 5)
T.ok(graph.is_graph(g) and not graph.is_graph(venom.zeros(2)), "is_graph")
T.is(g:num_nodes(), 5, "num_nodes")
T.is(g:num_edges(), 5, "num_edges")
T.is(tostring(g), "Graph(5 nodes, 5 edges)", "tostring counts nodes and edges")
T.is(tostring(graph.from_edges({ 1 }, { 1 }, 1)), "Graph(1 node, 1 edge)", "tostring: singular for one")
local src, dst = g:edges()
same_list(src:totable(), { 3, 1, 2, 1, 2 }, "edges: src in the stored order (by dst, then src)")
same_list(dst:totable(), { 1, 2, 2, 3, 3 }, "edges: dst")
same_list(g:degree("in"):totable(), { 1, 2, 2, 0, 0 }, "in-degree")
same_list(g:degree("out"):totable(), { 2, 2, 1, 0, 0 }, "out-degree")

-- gcn_norm: vertices 4 and 5 are isolated; their self loops give weight 1.
local a = g:gcn_norm()
T.is(a:num_edges(), 9, "gcn_norm adds the 4 missing self loops (vertex 2 has one)")
local w = a:values()
local finite = true
for _, v in ipairs(w:totable()) do finite = finite and v == v and v < math.huge end
T.ok(finite, "gcn_norm: no NaN or Inf with isolated vertices")

-- spmm against the dense normalised adjacency.
local n = 5
local dense = venom.zeros(n, n)
local s1, d1 = a:edges()
local st, dt, wt = s1:totable(), d1:totable(), w:totable()
for k = 1, #st do dense[dt[k]][st[k]] = wt[k] end
local x = venom.randn(n, 4)
T.ok((a:spmm(x) - dense:matmul(x)):abs():max():item() < 1e-5, "spmm equals the dense product")

-- autograd through scatter → ApplyEdge → gather, and chunked propagate.
local big_src, big_dst = {}, {}
for k = 1, 200 do big_src[k] = (k * 7) % 37 + 1; big_dst[k] = (k * 13) % 41 + 1 end
local G = graph.from_edges(big_src, big_dst, 41)
local E = G:num_edges()
local h = venom.randn(41, 3, { requires_grad = true })
local ew = venom.randn(E, 1)
local function edge_fn(e, first, last) return e * ew:narrow(1, first, last - first + 1) end
for _, reduce in ipairs({ "sum", "mean", "max" }) do
  local whole = G:propagate(h, edge_fn, reduce)
  whole:sum():backward()
  local g1 = h.grad:clone()
  h:zero_grad()
  local chunked = G:propagate(h, edge_fn, reduce, { max_edges = 7 })
  chunked:sum():backward()
  local same = (whole - chunked):abs():max():item() < 1e-5
    and (g1 - h.grad):abs():max():item() < 1e-5
  h:zero_grad()
  T.ok(same, "propagate " .. reduce .. " in chunks of 7 equals the whole, gradients too")
end

-- bad input: the position and value of a bad index, unknown options.
T.error_like(function() return graph.from_edges({ 1, 6 }, { 1, 1 }, 5) end,
             "src%[2%] = 6 is out of range", "an index out of range names its position")
T.error_like(function() return graph.from_edges({ 1, 0 }, { 1, 1 }, 5) end, "src%[2%] = 0",
             "index 0 (Lua counts from 1) is refused")
T.error_like(function() return g:gather(venom.zeros(5, 2), "median") end, "sum.*mean.*max",
             "an unknown reduction lists the known ones")
-- Mistakes a user makes, each a clear error naming the real culprit.
do
  local G = venom.graph
  local h = G.from_edges({ 1, 2, 3 }, { 2, 3, 1 }, 3)
  local x = venom.ones(3, 2)
  T.error_like(function() G.from_edges({ 1, 2 }, { 2, 1 }, 2, { values = venom.tensor({ -3, 1 }) }):gcn_norm() end,
    "gcn_norm: 1 vertices have a weighted degree <= 0", "gcn_norm refuses a non-positive degree (no silent 0)")
  T.error_like(function() h:propagate(x, function() return nil end, "sum") end,
    "edge_fn must return a tensor of 3 rows", "propagate names edge_fn when it returns nil")
  T.error_like(function() h:propagate(x, function(e) return e:narrow(1, 1, 1) end, "sum", { max_edges = 2 }) end,
    "edge_fn returned shape %(1, 2%) for edges 1..2", "propagate names edge_fn's wrong shape in a chunk")
  T.error_like(function() h:propagate(x, nil, "sum") end, "edge_fn must be a function", "a missing edge_fn")
  T.error_like(function() return h.edges() end, "g:edges: expected a graph as self", "a dot for a colon")
  T.error_like(function() G.from_edges({ 1, 2, 3 }, { 2, 3 }, 3) end, "src and dst must be 1%-d and of one length",
    "src and dst of different lengths, named as such")
  T.error_like(function() G.from_edges({ 1.5, 1 }, { 2, 3 }, 3) end, "src%[1%] must be a whole vertex number",
    "a fractional vertex number")
  T.error_like(function() G.from_edges({ 1, 2 }, { 2, 3 }, 3, { values = venom.tensor({ 1, 2 }, "i64") }) end,
    "values must be an f32 tensor", "i64 edge weights")
  local w = G.from_edges({ 1, 2 }, { 2, 3 }, 3, { values = { 0.5, 2 } })
  T.ok(w:values() and w:values():get(2) == 2, "edge weights as a Lua array")
end
T.done()
