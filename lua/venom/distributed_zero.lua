--- venom.distributed_zero — ZeRO stage 1 (Rajbhandari et al., "ZeRO:
-- Memory Optimizations Toward Training Trillion Parameter Models", SC 2020):
-- the optimizer state sharded over the ranks. Reached as
-- venom.distributed.ZeroRedundancyOptimizer (PyTorch's name).
--
--     local zero = dist.ZeroRedundancyOptimizer(model:parameters(), optim.AdamW, {lr = 1e-3})
--     zero:zero_grad(); loss:backward(); zero:step()     -- no DataParallel around the model
--
-- The parameters are laid end to end in one flat vector of n elements,
-- padded with zeros to N = P·⌈n/P⌉, and rank r owns elements
-- [r·N/P, (r+1)·N/P). step() averages the gradients with one
-- reduce_scatter, so that each rank receives the mean of its own slice
-- only; the wrapped optimizer steps that slice (its state is 1/P of the
-- whole); one all_gather brings every rank's updated slice to all ranks,
-- which copy it into their parameters. For an element-wise optimizer (SGD,
-- Adam, AdamW) that is the arithmetic of DataParallel followed by the same
-- optimizer on every rank: the same numbers, with 1/P of the state
-- memory. The padding stays zero (zero gradient and weight).
local venom = require "venom"
local util = require "venom.util"
local fail = util.fail

local Zero = {}
Zero.__index = Zero

-- The tensors `of(p)` (nil: zeros) of every parameter end to end, padded
-- with zeros to N elements: a new (N) f32 tensor.
function Zero:flatten(of)
  local pieces = {}
  for i, p in ipairs(self.params) do
    local t = of(p)
    pieces[i] = t and t:detach():contiguous():reshape(p:numel()) or venom.zeros(p:numel())
  end
  if self.N > self.n then pieces[#pieces + 1] = venom.zeros(self.N - self.n) end
  return venom.cat(pieces, 1)
end

-- Copies flat (N) back into the parameters, in place.
function Zero:unflatten(flat)
  venom.no_grad(function()
    local at = 1
    for _, p in ipairs(self.params) do
      p:copy_(flat:narrow(1, at, p:numel()):reshape(p:shape()))
      at = at + p:numel()
    end
  end)
end

--- Drops the gradients of the parameters.
function Zero:zero_grad()
  for _, p in ipairs(self.params) do p:zero_grad() end
end

--- One step: reduce_scatter of the gradients (mean over the ranks), the
-- wrapped optimizer on this rank's slice, all_gather of the slices into
-- the parameters. Every rank must call it.
function Zero:step()
  local dist = require "venom.distributed"
  local grads = self:flatten(function(p) return p.grad end)
  self.shard.grad = dist.reduce_scatter(grads, "avg")
  self.optimizer:step()
  self:unflatten(dist.all_gather(self.shard:detach()))
end

--- Elements of optimizer state this rank holds per state field (N / P),
-- and the N of all ranks together: the memory ZeRO-1 saves is 1 − 1/P.
function Zero:shard_size() return self.N / venom.core.dist_world_size(), self.N end

--- params: a list of CPU f32 leaf tensors (the same shapes, in the same
-- order, on every rank: checked); make_optimizer: an optimizer
-- constructor such as optim.AdamW, called as make_optimizer({shard},
-- opts). Rank 0's parameter values are broadcast first, so every rank
-- starts from the same weights. A parameter without a gradient at step()
-- counts as zeros. The parameter list is fixed: layers that replace their
-- parameters (GMP turning a layer V:N:M) are not supported.
local function new(params, make_optimizer, opts)
  local dist = require "venom.distributed"
  local who = "distributed.ZeroRedundancyOptimizer"
  if type(params) ~= "table" or #params == 0 then
    fail(("%s: expected a non-empty list of parameters, got %s"):format(who, type(params)))
  end
  if type(make_optimizer) ~= "function" then
    fail(("%s: expected an optimizer constructor (such as optim.AdamW), got %s")
      :format(who, type(make_optimizer)))
  end
  if not dist.is_initialized() then fail(who .. ": call venom.distributed.init() first") end
  local P, r = dist.world_size(), dist.rank()
  local n, seen = 0, {}
  for i, p in ipairs(params) do
    if not venom.is_tensor(p) or p:dtype() ~= "f32" or p:device() ~= "cpu" then
      fail(("%s: params[%d] must be a CPU f32 tensor, got %s"):format(who, i,
        venom.is_tensor(p) and p:device() .. " " .. p:dtype() or type(p)))
    end
    -- as optim's own checks: a repeated or computed tensor would be
    -- written back twice, or into a copy that no loss reaches
    if seen[p] then fail(("%s: params[%d] appears twice in the list"):format(who, i)) end
    if not p:is_leaf() or not p:requires_grad() then
      fail(("%s: params[%d] must be a leaf tensor that requires a gradient (the parameter "
        .. "itself, as model:parameters() gives)"):format(who, i))
    end
    seen[p] = true
    n = n + p:numel()
  end
  -- Every rank must hold the same parameter sizes (an error on every rank).
  local sizes = {}
  for i, p in ipairs(params) do sizes[i] = p:numel() end
  local all = dist.all_gather(venom.tensor(sizes, { dtype = "i64" })):totable()
  for i = 1, #all do
    if all[i] ~= sizes[(i - 1) % #sizes + 1] then
      fail(("%s: the ranks' parameters differ (rank %d's parameter %d has %d elements, rank 0's %d)")
        :format(who, math.floor((i - 1) / #sizes), (i - 1) % #sizes + 1, all[i], all[(i - 1) % #sizes + 1]))
    end
  end
  local N = P * math.ceil(n / P)
  local self = setmetatable({ params = params, n = n, N = N, who = who }, Zero)
  -- Rank 0's weights everywhere.
  local flat = self:flatten(function(p) return p end)
  dist.broadcast(flat, 0)
  self:unflatten(flat)
  self.shard = flat:narrow(1, r * N / P + 1, N / P):clone():requires_grad_(true)
  self.optimizer = make_optimizer({ self.shard }, opts)
  if type(self.optimizer) ~= "table" or type(self.optimizer.step) ~= "function" then
    fail(("%s: make_optimizer returned %s, expected an optimizer (such as optim.AdamW's)")
      :format(who, type(self.optimizer)))
  end
  return self
end

return new
