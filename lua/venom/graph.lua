--- venom.graph — graphs as sparse matrices (CSR) and the stages of a graph
-- neural network layer, after NGra's SAGA-NN (Ma et al., "Towards Efficient
-- Large-Scale Graph Neural Network Computing", arXiv 1810.08403): Scatter
-- (vertex features onto edges), ApplyEdge (ordinary tensor ops on the
-- (E, F) edge tensor), Gather (a reduction into destination vertices) and
-- ApplyVertex (ordinary ops on the (n, F) vertex tensor).
--
--     local graph = venom.graph
--     local g = graph.from_edges(src, dst, n)  -- 1-based i64 tensors or Lua arrays (E)
--     local a = g:gcn_norm()                    -- D̃^−½ (A + I) D̃^−½ (Kipf & Welling 2017)
--     local h = a:spmm(x:matmul(w))             -- one GCN layer's propagation, autograd
--
-- An edge src→dst is the matrix entry (dst, src): row = destination, so
-- g:spmm(x) sums into each vertex the features of its in-neighbours. Edges
-- are stored sorted by dst, then src, duplicates summed into one edge;
-- every edge tensor follows that order (g:edges() gives it). All ops are
-- deterministic, and CPU only except g:spmm, which runs on CUDA tensors too.
local venom = require "venom"
local util = require "venom.util"

local core = venom.core
local fail = util.fail
local G = core.graph_methods -- the methods of every graph (C ones from lv_graph.c)

local graph = {}

-- v as an integer tensor: a tensor is taken as is, a Lua array becomes i64.
local function as_indices(who, what, v)
  if venom.is_tensor(v) then return v end
  if type(v) == "table" then return venom.tensor(v, { dtype = "i64" }) end
  fail(("%s: %s must be a tensor or a Lua array of 1-based vertex numbers, got %s")
    :format(who, what, type(v)))
end

--- graph.from_edges(src, dst, n [, {values = w}]) → g: the graph on n vertices
-- with the edges src[k] → dst[k] (1-based i64 tensors or Lua arrays of E
-- numbers), each an entry (dst, src) of its n × n matrix, with weight w[k]
-- (f32 (E); all ones without it). Duplicate edges are summed into one.
function graph.from_edges(src, dst, n, opts)
  opts = util.check_options(opts, { "values" }, "graph.from_edges")
  n = util.check_int(n, "the number of vertices", { min = 0 })
  src = as_indices("graph.from_edges", "src", src)
  dst = as_indices("graph.from_edges", "dst", dst)
  return core.graph_from_edges(src, dst, n, opts.values)
end

--- graph.is_graph(v): whether v is a graph.
graph.is_graph = core.is_graph

--- g:edges() → src, dst: 1-based i64 (E), in the stored order (by dst, then src).
function G:edges()
  return self:col_idx() + 1, self:row_idx() + 1
end

--- g:degree("in" | "out") → f32 (n): the number of edges into (in, the
-- default) or out of (out) each vertex.
function G:degree(which)
  which = which or "in"
  local n = self:num_nodes()
  if which == "out" then
    local src, dst = self:edges()
    return graph.from_edges(dst, src, n):degree("in")
  elseif which ~= "in" then
    fail(('degree: expected "in" or "out", got %s'):format(tostring(which)))
  end
  local rp = self:row_ptr()
  return (rp:narrow(1, 2, n) - rp:narrow(1, 1, n)):float()
end

--- g:add_self_loops() → a new graph with the edge i → i (weight 1) added
-- for every vertex i that lacks one.
function G:add_self_loops()
  local n, E = self:num_nodes(), self:num_edges()
  local src, dst = self:edges()
  local values = self:values()
  local missing
  venom.no_grad(function()
    local loop = src:eq(dst):float():reshape(E, 1)
    local has = self:gather(loop, "max"):reshape(n)
    local m = n - math.floor(has:sum():item() + 0.5)
    local _, order = has:sort() -- the vertices without a loop come first
    missing = order:narrow(1, 1, m)
  end)
  local m = missing:shape()[1]
  if values then values = venom.cat({ values, venom.ones(m) }, 1) end
  return graph.from_edges(venom.cat({ src, missing }, 1), venom.cat({ dst, missing }, 1), n,
                          { values = values })
end

--- g:gcn_norm() → a new graph: self loops added (add_self_loops) and the
-- weights of D̃^−½ (A + I) D̃^−½, D̃ the weighted in-degrees of A + I (Kipf &
-- Welling, ICLR 2017). Computed once per graph, without autograd; a vertex
-- whose degree is not positive gets weight 0, never NaN.
function G:gcn_norm()
  local h = self:add_self_loops()
  local n = h:num_nodes()
  local src, dst = h:edges()
  local w
  venom.no_grad(function()
    local deg = h:spmm(venom.ones(n, 1))
    local dinv = venom.where(deg:gt(0), deg:clamp(1e-30, math.huge):pow(-0.5), 0)
    w = (h:scatter(dinv, "dst") * h:scatter(dinv, "src")):reshape(h:num_edges())
    if h:values() then w = w * h:values() end
  end)
  return graph.from_edges(src, dst, n, { values = w })
end

-- A (n) vertex mask reshaped to broadcast against a (n, F...) tensor.
local function per_vertex(mask, like)
  local shape = { mask:shape()[1] }
  for _ = 2, #like:shape() do shape[#shape + 1] = 1 end
  return mask:reshape((table.unpack or unpack)(shape))
end

--- g:propagate(x, edge_fn, reduce [, {max_edges = k}]) → (n, F...):
-- gather(edge_fn(scatter(x, "src"), first, last), reduce), reduce "sum",
-- "mean" or "max". edge_fn gets the (count, F...) edge tensor and the
-- 1-based numbers of its first and last edges (to narrow per-edge data to
-- them). With max_edges the edges run in chunks of at most k (NGra's edge
-- streaming: the (E, F) edge tensor never exists whole) with the same result.
function G:propagate(x, edge_fn, reduce, opts)
  opts = util.check_options(opts, { "max_edges" }, "propagate")
  if reduce ~= "sum" and reduce ~= "mean" and reduce ~= "max" then
    fail(('propagate: reduce must be "sum", "mean" or "max", got %s'):format(tostring(reduce)))
  end
  local E = self:num_edges()
  local k = opts.max_edges and util.check_int(opts.max_edges, "max_edges", { min = 1 }) or E
  if k >= E then return self:gather(edge_fn(self:scatter(x, "src"), 1, E), reduce) end
  local out
  for first = 1, E, k do
    local count = math.min(k, E - first + 1)
    local c = self:slice(first, count)
    local e = edge_fn(c:scatter(x, "src"), first, first + count - 1)
    local part = c:gather(e, reduce == "mean" and "sum" or reduce)
    if reduce == "max" then
      -- Vertices without edges in this chunk must not take its 0; an
      -- earlier chunk keeps ties (the first maximum in the stored order).
      part = venom.where(per_vertex(c:degree("in"):gt(0), part), part, -math.huge)
      out = out and venom.where(part:gt(out), part, out) or part
    else
      out = out and out + part or part
    end
  end
  local deg = self:degree("in")
  if reduce == "mean" then return out / per_vertex(deg:clamp(1, math.huge), out) end
  if reduce == "max" then return venom.where(per_vertex(deg:gt(0), out), out, 0) end
  return out
end

return graph
