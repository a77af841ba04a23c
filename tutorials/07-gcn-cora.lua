-- Tutorial 7: graph neural networks on a citation graph (Cora, CiteSeer).
--
-- Cora has 2,708 papers (nodes), 5,278 citations (undirected edges), a
-- 1,433-word bag of words per paper (its features) and 7 topics (classes).
-- Only 140 papers come with their label at training time: the task is to
-- label the other papers, using the words of each paper *and* of the papers
-- it cites or is cited by. A plain MLP on the words alone gets ~59%; a
-- two-layer graph convolutional network (Kipf & Welling 2017) gets ~81%.
--
-- Run it with
--
--     venom tutorials/07-gcn-cora.lua                       # GCN on Cora, seed 0
--     venom tutorials/07-gcn-cora.lua --seeds 10            # mean and spread over 10 seeds
--     venom tutorials/07-gcn-cora.lua --name citeseer
--     venom tutorials/07-gcn-cora.lua --model gat           # graph attention (Veličković et al. 2018)
--     venom tutorials/07-gcn-cora.lua --model sage          # GraphSAGE, mean aggregator
--     venom tutorials/07-gcn-cora.lua --root DIR            # DIR holds cora/ (or cora.* itself)
--
-- The data is the Planetoid release of Cora and CiteSeer (Yang et al. 2016)
-- in the LINQS layout (NAME.content.gz, NAME.cites, NAME.split: see
-- data.planetoid); the repository ships none, --root points at it.
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local data = require "venom.data"
local graph = require "venom.graph"
local util = require "venom.util"

-- 1. Options ------------------------------------------------------------------
--
-- The defaults are the setup of Kipf & Welling: 2 layers, 16 hidden units,
-- dropout 0.5, Adam with lr 0.01, L2 weight decay 5e-4 on the first layer,
-- 200 epochs. --model gat changes them to those of the GAT paper unless they
-- are given (8 heads of 8 units, dropout 0.6, lr 0.005, decay on every layer).
local DEFAULT_ROOT = "../shared/data"
local OPTIONS = {
  root = { DEFAULT_ROOT, "directory holding NAME/ (or NAME.content.gz, NAME.cites, NAME.split)" },
  name = { "cora", "data set: cora, citeseer, or any NAME in the same layout under --root" },
  model = { "gcn", "gcn, sage or gat" },
  epochs = { 200, "full-graph training steps" },
  hidden = { 0, "hidden units (0: 16, or 8 per head for gat)" },
  lr = { 0, "Adam learning rate (0: 0.01, or 0.005 for gat)" },
  dropout = { -1, "dropout rate (-1: 0.5, or 0.6 for gat)" },
  weight_decay = { 5e-4, "L2 penalty (first layer only; every layer for gat)" },
  seeds = { 1, "train this many times, seeds seed .. seed+seeds-1, and report mean and spread" },
  seed = { 0, "first seed of the engine RNG (weights, dropout)" },
  print_every = { 20, "print train loss / val / test accuracy every N epochs (one seed only)" },
}
local defaults, help = {}, {}
for name, o in pairs(OPTIONS) do defaults[name], help[name] = o[1], o[2] end
local opts = util.parse_cli(arg, defaults, help, function(o)
  util.check_arg_int(o, "epochs", 1)
  util.check_arg_int(o, "hidden", 0)
  util.check_arg_int(o, "seeds", 1)
  util.check_arg_int(o, "seed", 0)
  util.check_arg_int(o, "print_every", 1)
  util.check_arg_number(o, "lr", 0, true)
  util.check_arg_number(o, "weight_decay", 0, true)
  if o.model ~= "gcn" and o.model ~= "sage" and o.model ~= "gat" then
    util.fail("--model must be gcn, sage or gat, got " .. o.model)
  end
  if not (o.dropout == -1 or (o.dropout >= 0 and o.dropout < 1)) then
    util.fail("--dropout must be in [0, 1), got " .. o.dropout)
  end
end)
local gat = opts.model == "gat"
if opts.hidden == 0 then opts.hidden = gat and 8 or 16 end
if opts.lr == 0 then opts.lr = gat and 0.005 or 0.01 end
if opts.dropout == -1 then opts.dropout = gat and 0.6 or 0.5 end

-- 2. Data ---------------------------------------------------------------------
--
-- data.planetoid gives the features (each row divided by its sum, as Kipf &
-- Welling do), the labels 1..C, every citation as two directed edges
-- (src → dst and back: messages flow both ways) and the public split: 20
-- labelled nodes per class to train on, 500 to validate, 1000 to test.
local ok, ds = pcall(data.planetoid, opts.root, opts.name)
if not ok then
  util.die(util.error_text(ds) .. (opts.root == DEFAULT_ROOT and
    "\n(the default --root is ../shared/data, relative to the directory you run venom from)" or ""))
end
print(("%s: %d nodes, %d edges (directed), %d features, %d classes; train %d, val %d, test %d")
  :format(opts.name, ds.num_nodes, ds.num_edges, ds.num_features, ds.num_classes,
    ds.train:size(1), ds.val:size(1), ds.test:size(1)))

-- The graph: an edge src → dst is the entry (dst, src) of the sparse
-- adjacency matrix A, so A·X sums each node's in-neighbours' features. The
-- layers derive what they need from it once (GCNConv: D̃^−½ (A + I) D̃^−½).
local g = graph.from_edges(ds.src, ds.dst, ds.num_nodes)
local x, labels = ds.features, ds.labels

-- 3. The model ----------------------------------------------------------------
--
-- Two graph layers with a nonlinearity between them and dropout before each.
-- GCN: h = relu(Â·X·W₁), logits = Â·h·W₂. Each layer mixes every node with
-- its neighbours, so after two layers a node sees its 2-hop neighbourhood.
local Net = nn.Module:extend("Net")

function Net:__init(in_features, hidden, classes, o)
  nn.Module.__init(self)
  self.p = o.dropout
  if o.model == "gcn" then
    self.conv1, self.conv2 = nn.GCNConv(in_features, hidden), nn.GCNConv(hidden, classes)
  elseif o.model == "sage" then
    self.conv1, self.conv2 = nn.SAGEConv(in_features, hidden), nn.SAGEConv(hidden, classes)
  else -- GAT: 8 heads concatenated, then one output head, dropout on attention too.
    self.conv1 = nn.GATConv(in_features, hidden, { heads = 8, dropout = o.dropout })
    self.conv2 = nn.GATConv(hidden * 8, classes, { heads = 1, concat = false, dropout = o.dropout })
  end
  self.elu = o.model == "gat" -- the GAT paper uses ELU, the others ReLU
end

-- ELU(x) = x for x > 0, exp(x) − 1 otherwise: relu(x) + exp(−relu(−x)) − 1.
local function elu(h)
  return h:relu() + (h:neg():relu():neg():exp() - 1)
end

function Net:forward(features, graph_)
  local h = venom.dropout(features, self.p, self.training)
  h = self.conv1(h, graph_)
  h = self.elu and elu(h) or h:relu()
  h = venom.dropout(h, self.p, self.training)
  return self.conv2(h, graph_)
end

-- The fraction of nodes `idx` whose predicted class is their label.
local function accuracy(logits, idx)
  local pred = logits:index_select(1, idx):argmax(2)
  local truth = labels:index_select(1, idx)
  return pred:eq(truth):sum():item() / idx:size(1)
end

-- 4. Training -----------------------------------------------------------------
--
-- One step is one pass over the whole graph (transductive learning: every
-- node's features are used, but only the training nodes' labels enter the
-- loss). The L2 penalty wd/2·‖W‖² goes on the first layer's weights only,
-- as in Kipf & Welling's code (on every weight for GAT). The reported test
-- accuracy is the one at the epoch of best validation accuracy (model
-- selection on the validation set; the test set is only looked at).
local function run(seed, verbose)
  venom.manual_seed(seed)
  local model = Net(ds.num_features, opts.hidden, ds.num_classes, opts)
  local opt = optim.Adam(model:parameters(), { lr = opts.lr })
  local decayed = gat and { model.conv1.weight, model.conv2.weight } or { model.conv1.weight }
  local best = { val = -1 }
  local train_time = 0
  for epoch = 1, opts.epochs do
    local start = venom.clock()
    model:train()
    local logits = model(x, g)
    local loss = venom.cross_entropy(logits:index_select(1, ds.train),
      labels:index_select(1, ds.train))
    for _, w in ipairs(decayed) do
      loss = loss + (w * w):sum() * (opts.weight_decay / 2)
    end
    opt:zero_grad()
    loss:backward()
    opt:step()
    train_time = train_time + venom.clock() - start
    local l = loss:item()
    if l ~= l then util.die(("the loss is NaN at epoch %d (seed %d)"):format(epoch, seed)) end
    -- Evaluation: dropout off, no tape.
    model:eval()
    local out = venom.no_grad(function() return model(x, g) end)
    local acc = { train = accuracy(out, ds.train), val = accuracy(out, ds.val),
                  test = accuracy(out, ds.test) }
    if acc.val > best.val then best = { val = acc.val, test = acc.test, epoch = epoch } end
    best.final = acc.test
    if verbose and (epoch % opts.print_every == 0 or epoch == 1 or epoch == opts.epochs) then
      print(("epoch %3d/%d  loss %.4f  train %.3f  val %.3f  test %.3f  %.1f ms/epoch")
        :format(epoch, opts.epochs, l, acc.train, acc.val, acc.test, 1000 * train_time / epoch))
    end
    collectgarbage()
  end
  best.ms = 1000 * train_time / opts.epochs
  return best
end

print(("model %s, hidden %d, dropout %g, lr %g, weight decay %g, %d epochs")
  :format(opts.model, opts.hidden, opts.dropout, opts.lr, opts.weight_decay, opts.epochs))
local results = {}
local bar = opts.seeds > 1 and util.ProgressBar(opts.seeds, { desc = "seeds" }) or nil
for k = 1, opts.seeds do
  local seed = opts.seed + k - 1
  local r = run(seed, opts.seeds == 1)
  results[k] = r
  if bar then bar:update(1, { test = r.test }) end
  if opts.seeds == 1 then
    print(("seed %d: test accuracy %.1f%% (at the best val accuracy %.1f%%, epoch %d); "
      .. "%.2f ms per training epoch"):format(seed, 100 * r.test, 100 * r.val, r.epoch, r.ms))
  end
end
if bar then bar:close() end

-- 5. Mean and spread over seeds ------------------------------------------------
if opts.seeds > 1 then
  local sum, final, ms, lo, hi = 0, 0, 0, math.huge, -math.huge
  for _, r in ipairs(results) do
    sum, final, ms = sum + r.test, final + r.final, ms + r.ms
    lo, hi = math.min(lo, r.test), math.max(hi, r.test)
  end
  local mean = sum / #results
  local var = 0
  for _, r in ipairs(results) do var = var + (r.test - mean) ^ 2 end
  local std = math.sqrt(var / (#results - 1))
  for k, r in ipairs(results) do
    print(("seed %d: test %.1f%% (val %.1f%%, epoch %d); at the last epoch %.1f%%")
      :format(opts.seed + k - 1, 100 * r.test, 100 * r.val, r.epoch, 100 * r.final))
  end
  print(("%s on %s over %d seeds: test accuracy %.1f%% ± %.1f%% (mean ± std; min %.1f%%, "
    .. "max %.1f%%); at the last epoch %.1f%%; %.2f ms per training epoch"):format(
    opts.model:upper(), opts.name, #results, 100 * mean, 100 * std, 100 * lo, 100 * hi,
    100 * final / #results, ms / #results))
end
