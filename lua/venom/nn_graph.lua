--- venom.nn graph layers: GCNConv, SAGEConv, GATConv (reached as nn.GCNConv,
-- nn.SAGEConv, nn.GATConv). Each is called with the node features and the
-- graph (venom.graph), and returns new node features:
--
--     local conv = nn.GCNConv(1433, 16)
--     local h = conv(x, g)                  -- x (N, 1433) f32, g a graph of N nodes → (N, 16)
--
-- They are built from the graph's sparse ops: SpMM (g:spmm) and NGra's SAGA
-- stages (g:scatter, g:gather, g:edge_softmax, g:propagate). In a graph an
-- edge src → dst carries src's features into dst (row = destination).
local venom = require "venom"
local util = require "venom.util"
local nn = require "venom.nn"
local init = require "venom.nn_init"
local fail = util.fail

local is_tensor = venom.is_tensor
local fmt_shape = util.format_shape

-- The derived graphs a layer needs (the GCN normalisation, the graph with
-- self loops), computed once per graph: keyed weakly by the graph, so they
-- go when the graph does.
local derived = { gcn_norm = setmetatable({}, { __mode = "k" }),
                  add_self_loops = setmetatable({}, { __mode = "k" }) }

local function derive(g, what)
  local cache = derived[what]
  local d = cache[g]
  if d == nil then
    d = g[what](g)
    cache[g] = d
  end
  return d
end

-- Checks a layer's call: x a tensor (N, in_features) and g a graph of N nodes.
local function check_call(self, who, x, g)
  if not is_tensor(x) then
    fail(("%s: expected the node features (N, %d) as the first argument, got %s")
      :format(who, self.in_features, type(x)))
  end
  local graph = require "venom.graph"
  if not graph.is_graph(g) then
    fail(("%s: expected a graph (venom.graph) as the second argument, got %s"):format(who, type(g)))
  end
  if x:dim() ~= 2 or x:size(2) ~= self.in_features then
    fail(("%s: expected node features of shape (N, %d), got %s"):format(who, self.in_features,
      fmt_shape(x)))
  end
  if x:size(1) ~= g:num_nodes() then
    fail(("%s: the features have %d rows but the graph has %d nodes"):format(who, x:size(1),
      g:num_nodes()))
  end
end

local function check_sizes(who, in_features, out_features)
  util.check_int(in_features, "in_features", { min = 1, who = who })
  util.check_int(out_features, "out_features", { min = 1, who = who })
end

local function check_bool(who, name, v, default)
  if v == nil then return default end
  if type(v) ~= "boolean" then
    fail(("%s: %s must be true or false, got %s"):format(who, name, tostring(v)))
  end
  return v
end

-- Adds the bias b (out) to h (N, out) when there is one.
local function add_bias(h, b)
  if b == nil then return h end
  return h + b
end

-- GCNConv ---------------------------------------------------------------------------

--- Graph convolution (Kipf & Welling 2017): H' = D̃^−½ (A + I) D̃^−½ · H·Wᵀ + b,
-- with Ã = A + I (self loops added) and D̃ its degrees. H·Wᵀ is computed
-- first (it narrows the features before the sparse product), then one SpMM
-- with the normalised graph, which is made once per graph (g:gcn_norm()) and
-- kept while the graph lives. W (out_features, in_features) is Glorot-uniform
-- as in the paper, b zero. opts: bias = true.
local GCNConv = nn.Module:extend("GCNConv")

function GCNConv:__init(in_features, out_features, opts)
  nn.Module.__init(self)
  check_sizes("nn.GCNConv", in_features, out_features)
  opts = util.check_options(opts, { "bias" }, "nn.GCNConv")
  self.in_features, self.out_features = in_features, out_features
  self:register_parameter("weight", init.xavier_uniform_(venom.empty(out_features, in_features)))
  local bias = check_bool("nn.GCNConv", "bias", opts.bias, true)
  self:register_parameter("bias", bias and venom.zeros(out_features) or nil)
end

function GCNConv:forward(x, g)
  check_call(self, "nn.GCNConv", x, g)
  local xw = venom.linear(x, self.weight)
  return add_bias(derive(g, "gcn_norm"):spmm(xw), self.bias)
end

function GCNConv:extra_repr()
  return ("%d, %d, bias=%s"):format(self.in_features, self.out_features, tostring(self.bias ~= nil))
end

-- SAGEConv --------------------------------------------------------------------------

--- GraphSAGE with the mean aggregator (Hamilton, Ying & Leskovec 2017):
-- h'_i = W_self·x_i + W_neigh·mean_{j→i} x_j + b. The mean over the
-- in-neighbours is Scatter then Gather "mean" (0 for a node without
-- in-edges); since it is linear, W_neigh is applied first when that makes
-- the edge tensor narrower. Weights as nn.Linear's. opts: bias = true.
local SAGEConv = nn.Module:extend("SAGEConv")

function SAGEConv:__init(in_features, out_features, opts)
  nn.Module.__init(self)
  check_sizes("nn.SAGEConv", in_features, out_features)
  opts = util.check_options(opts, { "bias" }, "nn.SAGEConv")
  self.in_features, self.out_features = in_features, out_features
  local bias = check_bool("nn.SAGEConv", "bias", opts.bias, true)
  self.lin_self = nn.Linear(in_features, out_features, { bias = bias })
  self.lin_neigh = nn.Linear(in_features, out_features, { bias = false })
end

-- mean_{j→i} of rows of x: Scatter (source side), Gather "mean".
local function neighbour_mean(g, x)
  return g:gather(g:scatter(x, "src"), "mean")
end

function SAGEConv:forward(x, g)
  check_call(self, "nn.SAGEConv", x, g)
  local neigh
  if self.out_features < self.in_features then
    neigh = neighbour_mean(g, self.lin_neigh(x))
  else
    neigh = self.lin_neigh(neighbour_mean(g, x))
  end
  return self.lin_self(x) + neigh
end

function SAGEConv:extra_repr()
  return ("%d, %d, aggr=mean"):format(self.in_features, self.out_features)
end

-- GATConv ---------------------------------------------------------------------------

--- Graph attention (Veličković et al. 2018), through the SAGA-NN stages.
-- Per head k: z = x·W_kᵀ; the score of edge j → i is
-- LeakyReLU_0.2(a_srcₖ·z_j + a_dstₖ·z_i) (the two halves of aᵀ[z_i ‖ z_j],
-- computed per node and Scattered onto the edges); α = softmax of the scores
-- over each node's incoming edges (g:edge_softmax); h'_i = Σ_j α_ij z_j
-- (Gather "sum" of the weighted source features, streamed over edge chunks
-- of at most max_edges when given: g:propagate). Self loops are added to the
-- graph first (once per graph), so every node attends to itself. The heads
-- are concatenated (out = heads·out_features) or averaged (concat = false,
-- as in the paper's last layer), then b is added.
-- opts: heads = 1, concat = true, negative_slope = 0.2, dropout = 0 (on the
-- attention weights, in training mode), bias = true, max_edges (nil: all
-- edges at once). W, a_src, a_dst are Glorot-uniform, b zero.
local GATConv = nn.Module:extend("GATConv")

function GATConv:__init(in_features, out_features, opts)
  nn.Module.__init(self)
  local who = "nn.GATConv"
  check_sizes(who, in_features, out_features)
  opts = util.check_options(opts, { "heads", "concat", "negative_slope", "dropout", "bias",
    "max_edges" }, who)
  local heads = opts.heads or 1
  util.check_int(heads, "heads", { min = 1, who = who })
  local slope = opts.negative_slope or 0.2
  if type(slope) ~= "number" or not (slope >= 0 and slope < math.huge) then
    fail(("%s: negative_slope must be a number >= 0, got %s"):format(who, tostring(slope)))
  end
  local p = opts.dropout or 0
  if type(p) ~= "number" or not (p >= 0 and p < 1) then
    fail(("%s: dropout must be a number in [0, 1), got %s"):format(who, tostring(p)))
  end
  if opts.max_edges ~= nil then util.check_int(opts.max_edges, "max_edges", { min = 1, who = who }) end
  self.in_features, self.out_features, self.heads = in_features, out_features, heads
  self.concat = check_bool(who, "concat", opts.concat, true)
  self.negative_slope, self.dropout, self.max_edges = slope, p, opts.max_edges
  self:register_parameter("weight",
    init.xavier_uniform_(venom.empty(heads * out_features, in_features)))
  -- Glorot over (heads, out_features), as the paper's code does for a.
  local a = math.sqrt(6 / (heads + out_features))
  self:register_parameter("att_src", init.uniform_(venom.empty(heads, out_features), -a, a))
  self:register_parameter("att_dst", init.uniform_(venom.empty(heads, out_features), -a, a))
  local bias = check_bool(who, "bias", opts.bias, true)
  local width = self.concat and heads * out_features or out_features
  self:register_parameter("bias", bias and venom.zeros(width) or nil)
end

-- LeakyReLU(x) = slope·x + (1 − slope)·relu(x).
local function leaky_relu(x, slope)
  return x:relu() * (1 - slope) + x * slope
end

function GATConv:forward(x, g)
  check_call(self, "nn.GATConv", x, g)
  local H, C = self.heads, self.out_features
  local gl = derive(g, "add_self_loops")
  local n = x:size(1)
  local z = venom.linear(x, self.weight)         -- (N, H·C)
  local z3 = z:reshape(n, H, C)
  -- Each node's two halves of the score, per head: (N, H).
  local ps, pd = z3 * self.att_src, z3 * self.att_dst
  local s_src, s_dst = ps:sum(3), pd:sum(3)
  local es, ed = gl:scatter(s_src, "src"), gl:scatter(s_dst, "dst") -- (E, H)
  local raw = es + ed
  local scores = leaky_relu(raw, self.negative_slope)
  local soft = gl:edge_softmax(scores)            -- (E, H)
  local alpha = venom.dropout(soft, self.dropout, self.training)
  -- ApplyEdge: each chunk's source features (count, H·C) times its α.
  local function weigh(e, first, last)
    local count = last - first + 1
    local a = alpha:narrow(1, first, count):unsqueeze(3) -- (count, H, 1)
    return (e:reshape(count, H, C) * a):reshape(count, H * C)
  end
  local h = gl:propagate(z, weigh, "sum", { max_edges = self.max_edges }) -- (N, H·C)
  if not self.concat then
    h = h:reshape(n, H, C):mean(2)
  end
  return add_bias(h, self.bias)
end

function GATConv:extra_repr()
  return ("%d, %d, heads=%d, concat=%s"):format(self.in_features, self.out_features, self.heads,
    tostring(self.concat))
end

return { GCNConv = GCNConv, SAGEConv = SAGEConv, GATConv = GATConv }
