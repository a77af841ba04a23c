--- venom.nn layers for dynamic activation sparsity (reached as
-- nn.SparseInputLinear). The layer fuses an activation whose output is
-- mostly zeros (ReLU, or squared ReLU) with the linear layer that follows
-- it, and computes only on the nonzeros (SparDA / PIT, Zheng et al., SOSP
-- 2023; see vn_act_sparse_linear in venom/dynamic.h):
--
--     local fc2 = nn.SparseInputLinear(4096, 1024, {activation = "relu2"})
--     local y = fc2(fc1(x))                 -- = Linear(relu(fc1(x))²), x (..., 4096)
--
-- Why a layer of its own and not an option of nn.Linear: the backward's
-- saving (dY·W only where the activation is nonzero) is exact only when the
-- layer knows that the activation's derivative is zero there, so the layer
-- must own the activation; a flag on nn.Linear could not know what made its
-- input.
local venom = require "venom"
local util = require "venom.util"
local nn = require "venom.nn"
local fail = util.fail

--- y = act(x)·Wᵀ + b, with act "relu" (default) or "relu2" (max(x, 0)²,
-- Primer), on the nonzeros of act(x) only. x is the activation's INPUT
-- (..., in_features). Options: activation, bias (default true), tile_rows
-- (the micro-tile height, default 128), dense_above (the kept share above
-- which the call runs the dense product, default 0.65). W and b are drawn as
-- nn.Linear draws them. The layer keeps what it saw: self.last_stats
-- ({density, tile_density, dense} of the last call; a call that ran dense
-- has the tile_density of the sample of tiles that chose it, see
-- venom/dynamic.h) and, while
-- self.track_stats is true (the default), running sums read by
-- layer:activation_stats() and reset by layer:reset_stats().
local SparseInputLinear = nn.Module:extend("SparseInputLinear")

--- Running sums of the ops' stats (kept by this layer and by models/gpt.lua's
-- MLP): a new, empty record.
local function new_stats() return { calls = 0, density = 0, tile_density = 0, dense = 0 } end

--- Adds the stats table of one call (venom.act_sparse_linear / _mlp's second
-- result) to the record s.
local function add_stats(s, st)
  s.calls, s.density, s.tile_density = s.calls + 1, s.density + st.density, s.tile_density + st.tile_density
  if st.dense then s.dense = s.dense + 1 end
end

--- The record s as means: {calls, density, tile_density, dense (calls run
-- dense)}; density and tile_density are nil before the first call.
local function mean_stats(s)
  if s.calls == 0 then return { calls = 0, dense = 0 } end
  return { calls = s.calls, density = s.density / s.calls, tile_density = s.tile_density / s.calls,
           dense = s.dense }
end

local ACTS = { relu = true, relu2 = true }

function SparseInputLinear:__init(in_features, out_features, opts)
  local who = "nn.SparseInputLinear"
  opts = util.check_options(opts, { "activation", "bias", "tile_rows", "dense_above" }, who)
  local act = opts.activation or "relu"
  if not ACTS[act] then
    fail(("%s: activation %s, expected \"relu\" or \"relu2\""):format(who, tostring(act)))
  end
  if opts.tile_rows ~= nil then util.check_int(opts.tile_rows, "tile_rows", { min = 1, who = who }) end
  local d = opts.dense_above
  if d ~= nil and (type(d) ~= "number" or not (d >= 0 and d <= 1)) then
    fail(("%s: dense_above %s, expected a number in [0, 1]"):format(who, tostring(d)))
  end
  nn.Linear.__init(self, in_features, out_features, { bias = opts.bias })
  rawset(self, "activation", act)
  rawset(self, "tile_rows", opts.tile_rows)
  rawset(self, "dense_above", opts.dense_above)
  rawset(self, "track_stats", true)
  self:reset_stats()
end

function SparseInputLinear:forward(x)
  if not venom.is_tensor(x) then
    fail("nn.SparseInputLinear: expected a tensor input, got " .. type(x))
  end
  local nd = x:dim()
  if nd == 0 or x:size(nd) ~= self.in_features then
    fail(("nn.SparseInputLinear: expected an input of shape (..., %d), got %s")
      :format(self.in_features, util.format_shape(x)))
  end
  local y, st = venom.act_sparse_linear(x, self.weight, self.bias, self.activation, self.tile_rows,
                                        self.dense_above)
  rawset(self, "last_stats", st)
  if self.track_stats then add_stats(self._stats, st) end
  return y
end

--- The mean, over the calls since the last reset_stats(), of the share of
-- nonzero activations (density) and of kept (row tile, column) pairs
-- (tile_density), and how many calls ran dense: {calls, density,
-- tile_density, dense}; the means are nil before the first call.
function SparseInputLinear:activation_stats()
  return mean_stats(self._stats)
end

--- Starts the running sums of activation_stats() afresh.
function SparseInputLinear:reset_stats()
  rawset(self, "_stats", new_stats())
end

function SparseInputLinear:extra_repr()
  return ("in_features=%d, out_features=%d, bias=%s, activation=%s")
    :format(self.in_features, self.out_features, tostring(self.bias ~= nil), self.activation)
end

return { SparseInputLinear = SparseInputLinear, new_stats = new_stats, add_stats = add_stats,
         mean_stats = mean_stats }
