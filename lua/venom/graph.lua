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
  if type(v) == "table" then
    for i = 1, #v do
      if not util.is_int(v[i]) then
        fail(("%s: %s[%d] must be a whole vertex number, got %s"):format(who, what, i, tostring(v[i])))
      end
    end
    return venom.tensor(v, { dtype = "i64" })
  end
  fail(("%s: %s must be a tensor or a Lua array of 1-based vertex numbers, got %s")
    :format(who, what, type(v)))
end

--- graph.from_edges(src, dst, n [, {values = w}]) → g: the graph on n vertices
-- with the edges src[k] → dst[k] (1-based i64 tensors or Lua arrays of E
-- numbers), each an entry (dst, src) of its n × n matrix, with weight w[k]
-- (f32 (E); all ones without it). Duplicate edges are summed into one.
function graph.from_edges(src, dst, n, opts)
  local who = "graph.from_edges"
  opts = util.check_options(opts, { "values" }, who)
  n = util.check_int(n, "the number of vertices n", { min = 0, who = who })
  src = as_indices(who, "src", src)
  dst = as_indices(who, "dst", dst)
  if src:dim() ~= 1 or dst:dim() ~= 1 or src:numel() ~= dst:numel() then
    fail(("%s: src and dst must be 1-d and of one length E, got shapes %s and %s")
      :format(who, util.format_shape(src), util.format_shape(dst)))
  end
  local values = opts.values
  if type(values) == "table" and not venom.is_tensor(values) then values = venom.tensor(values) end
  if values ~= nil and not (venom.is_tensor(values) and values:dtype() == "f32" and values:dim() == 1
                            and values:numel() == src:numel()) then
    fail(("%s: values must be an f32 tensor (or Lua array) of E = %d edge weights, got %s")
      :format(who, src:numel(), venom.is_tensor(values) and values:dtype() .. " " .. util.format_shape(values)
        or type(values)))
  end
  local ok, g = pcall(core.graph_from_edges, src, dst, n, values)
  if not ok then
    -- The C side says row/col for dst/src (as a matrix); say it as a graph.
    local msg = util.error_text(g):gsub("^csr_from_coo: ", ""):gsub("^graph: ", "")
      :gsub("^row", "dst"):gsub("^col", "src")
    fail(who .. ": " .. msg)
  end
  return g
end

--- graph.is_graph(v): whether v is a graph.
graph.is_graph = core.is_graph

-- The methods written here check their receiver, so g.edges() (a dot for a
-- colon) or a non-graph is a clear error, as it is for the C methods.
local function check_self(self, method)
  if not core.is_graph(self) then
    fail(("g:%s: expected a graph as self (call it as g:%s(...)), got %s")
      :format(method, method, type(self)))
  end
end

--- g:edges() → src, dst: 1-based i64 (E), in the stored order (by dst, then src).
function G:edges()
  check_self(self, "edges")
  return self:col_idx() + 1, self:row_idx() + 1
end

--- g:degree("in" | "out") → f32 (n): the number of edges into (in, the
-- default) or out of (out) each vertex.
function G:degree(which)
  check_self(self, "degree")
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
  check_self(self, "add_self_loops")
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
-- Welling, ICLR 2017). Computed once per graph, without autograd. A vertex
-- whose weighted degree is not positive (negative edge weights) is an error.
function G:gcn_norm()
  check_self(self, "gcn_norm")
  local h = self:add_self_loops()
  local n = h:num_nodes()
  local src, dst = h:edges()
  local w
  venom.no_grad(function()
    local deg = h:spmm(venom.ones(n, 1))
    -- D̃^−½ needs positive degrees: negative edge weights can make one
    -- negative (or zero), and then the normalisation does not exist.
    local bad = deg:le(0):sum():item()
    if bad > 0 then
      local _, at = deg:reshape(n):min(1)
      fail(("g:gcn_norm: %d vertices have a weighted degree <= 0 after self loops (vertex %d: %g); "
        .. "D^-1/2 needs positive degrees (negative edge weights?)")
        :format(bad, at:item(), deg:reshape(n):get(at:item())))
    end
    local dinv = deg:pow(-0.5)
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
  check_self(self, "propagate")
  opts = util.check_options(opts, { "max_edges" }, "g:propagate")
  if type(edge_fn) ~= "function" and not (type(edge_fn) == "table" and getmetatable(edge_fn)) then
    fail(("g:propagate: edge_fn must be a function of (edge tensor, first, last), got %s"):format(type(edge_fn)))
  end
  -- edge_fn's result, checked so that a mistake there is named as such.
  local function apply(e, first, last)
    local out = edge_fn(e, first, last)
    if not venom.is_tensor(out) then
      fail(("g:propagate: edge_fn must return a tensor of %d rows (one per edge), returned %s")
        :format(last - first + 1, type(out)))
    end
    if out:dim() == 0 or out:shape()[1] ~= last - first + 1 then
      fail(("g:propagate: edge_fn returned shape %s for edges %d..%d; expected %d rows (one per edge)")
        :format(util.format_shape(out), first, last, last - first + 1))
    end
    return out
  end
  if reduce ~= "sum" and reduce ~= "mean" and reduce ~= "max" then
    fail(('g:propagate: reduce must be "sum", "mean" or "max", got %s'):format(tostring(reduce)))
  end
  local E = self:num_edges()
  local k = opts.max_edges and util.check_int(opts.max_edges, "max_edges", { min = 1, who = "g:propagate" }) or E
  if k >= E then return self:gather(apply(self:scatter(x, "src"), 1, E), reduce) end
  local out
  for first = 1, E, k do
    local count = math.min(k, E - first + 1)
    local c = self:slice(first, count)
    local e = apply(c:scatter(x, "src"), first, first + count - 1)
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
