--- venom.nn Mixture-of-Experts layer: nn.MoE (reached as nn.MoE).
--
--     local moe = nn.MoE(64, 256, {experts = 8, k = 1, gate = "topk"})
--     local y = moe(x)                 -- x (..., 64) → (..., 64)
--     local loss = task_loss + moe.aux_loss   -- the balance (and z) loss of the last training call
--     print(moe.stats.balance, moe.stats.dropped_fraction)
--
-- Each token goes to k of E experts (two-layer GELU MLPs, dense or V:N:M);
-- a router Linear(d_model, E) scores them. The dispatch is a sparse–dense
-- transformation done in C: each expert's tokens are gathered into a dense
-- block (index_select), run through the expert's GEMMs, and scatter-added
-- back weighted by their combine weights (venom.scatter_add_rows), so the
-- router learns through those weights. The Lua loop is over experts only.
--
-- Gates:
--   "topk"  top-k of the router logits. k = 1 is the Switch Transformer
--           (Fedus et al. 2021): the combine weight is the router
--           probability p_e, so the router gets a gradient; k ≥ 2 is
--           GShard-style (Lepikhin et al. 2020): softmax over the k
--           selected logits.
--   "dts"   the Dense-To-Sparse gate (Nie et al., arXiv 2112.14397): in
--           training p = softmax((logits + Gumbel noise) / τ), τ falling
--           linearly from tau_max to tau_min over anneal_steps training
--           calls; a token goes to every expert with p > threshold, at
--           least k, with p itself as the combine weight (no
--           renormalisation): dense at first, sparse at the end. In eval,
--           plain top-k of the logits with softmax over the selected.
-- Both add the load-balancing loss α·E·Σᵢ fᵢ·Pᵢ (fᵢ the fraction of tokens
-- whose first choice is i, Pᵢ the mean router probability of i) and, with
-- z_loss > 0, the router z-loss z_loss·mean(logsumexp(logits)²) (ST-MoE,
-- Zoph et al. 2022) into self.aux_loss. Each expert keeps at most
-- ⌈capacity_factor · assignments / E⌉ assignments; the others are dropped
-- and those tokens pass through the layer's residual (the layer adds
-- nothing for them).
local venom = require "venom"
local util = require "venom.util"
local nn = require "venom.nn"
local parallel = require "venom.nn_moe_parallel"
local fail = util.fail

--- nn.MoE(d_model, d_hidden, opts): E experts d_model → d_hidden → d_model.
-- opts (defaults): experts = 8, k = 1, gate = "topk" | "dts",
-- capacity_factor = 1.25 (math.huge: none), alpha = 0.01 (balance loss),
-- z_loss = 0, tau_max = 2, tau_min = 0.3, anneal_steps = 1000,
-- threshold = 0.001 (DTS's γ), expert = {V = 64, M = 8} for V:N:M experts,
-- new_expert = function(e) → module to build the experts yourself,
-- expert_parallel = true | {owner rank of each expert} (in a distributed
-- run: each rank keeps only its experts and exchanges tokens with the
-- others; an entry may be a list of ranks, the expert's replicas, which
-- split its tokens; see venom.nn_moe_parallel).
-- After each call, self.stats = {load (tokens routed to each expert, a
-- list), kept (after the capacity drop), balance (max load / mean load),
-- experts_per_token, dropped_fraction, capacity, tau (DTS in training)};
-- in training self.aux_loss is the balance (+ z) loss to add to the task
-- loss (nil in eval). With expert_parallel, stats also has rank_load (rows
-- the experts of each rank processed, a list over ranks 0..P-1) and
-- rank_balance (its max / mean: FlexMoE's balance ratio), and
-- self.replicas[e] lists the ranks that hold expert e (ascending);
-- self.experts holds this rank's only.
local MoE = nn.Module:extend("MoE")

local DEFAULTS = { experts = 8, k = 1, gate = "topk", capacity_factor = 1.25, alpha = 0.01,
                   z_loss = 0, tau_max = 2, tau_min = 0.3, anneal_steps = 1000,
                   threshold = 0.001 }

local function check_number(who, name, v, ok, what)
  if type(v) ~= "number" or v ~= v or not ok(v) then
    fail(("%s: %s must be %s, got %s"):format(who, name, what, tostring(v)))
  end
end

-- The options with defaults filled in; every bad value is refused by name.
local function check_config(d_model, d_hidden, opts)
  local who = "nn.MoE"
  util.check_int(d_model, "d_model", { min = 1, who = who })
  util.check_int(d_hidden, "d_hidden", { min = 1, who = who })
  opts = util.check_options(opts, { "experts", "k", "gate", "capacity_factor", "alpha", "z_loss",
    "tau_max", "tau_min", "anneal_steps", "threshold", "expert", "new_expert", "expert_parallel" },
    who)
  local c = {}
  for key, v in pairs(DEFAULTS) do
    if opts[key] == nil then c[key] = v else c[key] = opts[key] end
  end
  util.check_int(c.experts, "experts", { min = 1, who = who })
  util.check_int(c.k, "k", { min = 1, who = who })
  if c.k > c.experts then
    fail(("%s: k = %d experts per token, but there are only %d experts"):format(who, c.k, c.experts))
  end
  if c.gate ~= "topk" and c.gate ~= "dts" then
    fail(("%s: gate must be \"topk\" or \"dts\", got %s"):format(who, tostring(c.gate)))
  end
  if c.gate ~= "dts" then
    for _, key in ipairs({ "threshold", "tau_max", "tau_min", "anneal_steps" }) do
      if opts[key] ~= nil then
        fail(("%s: %s is an option of the \"dts\" gate; gate %q does not use it")
          :format(who, key, c.gate))
      end
    end
  end
  check_number(who, "capacity_factor", c.capacity_factor, function(v) return v > 0 end,
    "a number > 0 (math.huge: no capacity limit)")
  check_number(who, "alpha", c.alpha, function(v) return v >= 0 and v < math.huge end, "a number >= 0")
  check_number(who, "z_loss", c.z_loss, function(v) return v >= 0 and v < math.huge end, "a number >= 0")
  check_number(who, "tau_min", c.tau_min, function(v) return v > 0 and v < math.huge end, "a number > 0")
  check_number(who, "tau_max", c.tau_max, function(v) return v < math.huge end, "a finite number")
  if c.tau_min > c.tau_max then
    fail(("%s: tau_min = %g is above tau_max = %g; the temperature falls from tau_max to tau_min")
      :format(who, c.tau_min, c.tau_max))
  end
  util.check_int(c.anneal_steps, "anneal_steps", { min = 1, who = who })
  check_number(who, "threshold", c.threshold, function(v) return v >= 0 and v < 1 end,
    "a probability in [0, 1)")
  if opts.expert ~= nil then
    local e = util.check_options(opts.expert, { "V", "M" }, who .. ": expert")
    c.expert = { V = e.V or 64, M = e.M or 8 }
  end
  if opts.new_expert ~= nil and type(opts.new_expert) ~= "function" then
    fail(("%s: new_expert must be a function(index) returning a module, got %s")
      :format(who, type(opts.new_expert)))
  end
  c.new_expert = opts.new_expert
  c.expert_parallel = opts.expert_parallel
  return c
end

-- The default expert: Linear(d_model, d_hidden) → GELU → Linear(d_hidden,
-- d_model), the Linears V:N:M SparseLinear when `sp` is given.
local function default_expert(d_model, d_hidden, sp)
  local function linear(i, o)
    if sp then return nn.SparseLinear(i, o, { V = sp.V, M = sp.M }) end
    return nn.Linear(i, o)
  end
  return nn.Sequential(linear(d_model, d_hidden), nn.GELU(), linear(d_hidden, d_model))
end

-- Builds the router and the experts (options: see nn.MoE above).
function MoE:__init(d_model, d_hidden, opts)
  nn.Module.__init(self)
  local c = check_config(d_model, d_hidden, opts)
  self.d_model, self.d_hidden, self.config = d_model, d_hidden, c
  self.steps = 0 -- training calls so far: the DTS temperature schedule
  self:add_module("router", nn.Linear(d_model, c.experts, { bias = false }))
  if c.expert_parallel then
    self.replicas = parallel.placement(c.expert_parallel, c.experts, "nn.MoE")
    self.expert_numel = {} -- each expert's parameter count (known on every rank)
  end
  local me = self.replicas and require("venom.distributed").rank()
  local experts = nn.Module()
  for e = 1, c.experts do -- all are built (the same random draws on every rank), the local ones kept
    local m = self:build_expert(e)
    if self.replicas then
      local n = 0
      for _, p in ipairs(m:parameters()) do n = n + p:numel() end
      self.expert_numel[e] = n
    end
    if not self.replicas or parallel.holds(self.replicas, e, me) then experts:add_module(e, m) end
  end
  self:add_module("experts", experts)
end

--- A new expert e (new_expert(e), or the default two-layer MLP).
function MoE:build_expert(e)
  local c = self.config
  return c.new_expert and c.new_expert(e) or default_expert(self.d_model, self.d_hidden, c.expert)
end

--- Expert-parallel layers: FlexMoE's dynamic placement. From the rows each
-- rank sent each expert in the training calls since the last rebalance,
-- plans Expand (a new replica of a hot expert), Shrink (drop a replica)
-- and Migrate moves when the balance ratio is above opts.threshold and
-- applies them (weights, and their state in optimizer `opt`); every rank
-- must call it at the same point, between a step and the next forward.
-- Returns the plan {moves, ratio, planned_ratio, cost, planned_cost}; see
-- venom.nn_moe_placement for the cost model and the options.
function MoE:rebalance(opt, opts)
  return require("venom.nn_moe_placement").rebalance(self, opt, opts)
end

--- The DTS temperature after `steps` training calls: linear from tau_max
-- to tau_min over anneal_steps, then tau_min.
function MoE:temperature(steps)
  local c = self.config
  local s = math.min((steps or self.steps) / c.anneal_steps, 1)
  return c.tau_max + (c.tau_min - c.tau_max) * s
end

-- Gumbel(0, 1) noise of the given shape: −log(−log u), u uniform in (0, 1).
local function gumbel(rows, cols)
  local u = venom.rand(rows, cols):clamp(1e-9, 1 - 1e-7)
  return -(-u:log()):log()
end

-- Softmax of the logits over each token's chosen experts (mask u8 (T, E)).
local function softmax_over(logits, mask)
  local off = (mask:to("f32") - 1) * 1e9 -- 0 where chosen, −1e9 elsewhere
  return (logits + off):softmax(2)
end

-- The combine weights (T, E) and the routing for this call.
function MoE:route(logits)
  local c = self.config
  if self.training and c.gate == "dts" then
    local tau = self:temperature()
    local p = ((logits + gumbel(logits:size(1), c.experts)) / tau):softmax(2)
    return p, venom.moe_route(p:detach(), c.k, c.threshold, c.capacity_factor), tau
  end
  local r = venom.moe_route(logits:detach(), c.k, nil, c.capacity_factor)
  if c.gate == "topk" and c.k == 1 then return logits:softmax(2), r end -- Switch: p_e
  return softmax_over(logits, r.mask), r
end

-- α·E·Σ fᵢ·Pᵢ (+ the z-loss) for the routing r of the (T, E) logits.
function MoE:balance_loss(logits, probs, r)
  local c = self.config
  local T = logits:size(1)
  local f = r.first:to("f32") / T
  local loss = (f * probs:mean(1)):sum() * (c.alpha * c.experts)
  if c.z_loss > 0 then
    local m = logits:detach():max(2, true) -- a constant shift: the gradient is softmax either way
    local lse = (logits - m):exp():sum(2, true):log() + m -- (T, 1)
    loss = loss + (lse * lse):mean() * c.z_loss
  end
  return loss
end

-- The experts' outputs combined (T, d_model): one dense block per expert
-- (gather, GEMMs, weighted scatter-add), for r's kept assignments and their
-- combine weights w.
function MoE:dispatch(xf, r, w, T)
  local load = r.load:totable()
  local out, start = nil, 1
  for e = 1, self.config.experts do
    local n = load[e]
    if n > 0 then
      local idx = r.tokens:narrow(1, start, n)
      local y = self.experts[e](xf:index_select(1, idx))
      local part = venom.scatter_add_rows(y, idx, w:narrow(1, start, n), T)
      out = out and out + part or part
      start = start + n
    end
  end
  return out or venom.zeros(T, self.d_model)
end

function MoE:forward(x)
  if not venom.is_tensor(x) or x:dim() < 1 or x:size(x:dim()) ~= self.d_model then
    fail(("nn.MoE: expected an input of shape (..., %d), got %s"):format(self.d_model,
      venom.is_tensor(x) and util.format_shape(x) or type(x)))
  end
  local shape = x:shape()
  local xf = x:reshape(-1, self.d_model)
  local T = xf:size(1)
  local logits = self.router(xf)
  local weights, r, tau = self:route(logits)
  local w = weights:reshape(-1):index_select(1, r.slots)
  local out, rank_load
  if self.replicas then -- the experts on several ranks: venom.nn_moe_parallel
    out, rank_load = parallel.forward(self, xf, r, w, T)
  else
    out = self:dispatch(xf, r, w, T)
  end
  if self.training then
    self.aux_loss = self:balance_loss(logits, logits:softmax(2), r)
    self.steps = self.steps + 1
  else
    self.aux_loss = nil
  end
  self:record_stats(r, T, tau, rank_load)
  return out:reshape(shape)
end

-- max / mean of a list of counts (0 when all are 0).
local function balance(counts)
  local max, total = 0, 0
  for _, v in ipairs(counts) do
    max, total = math.max(max, v), total + v
  end
  return total > 0 and max / (total / #counts) or 0
end

function MoE:record_stats(r, T, tau, rank_load)
  local routed = r.mask:to("f32"):sum(1):totable()
  self.stats = { load = routed, kept = r.load:totable(), balance = balance(routed),
                 rank_load = rank_load, rank_balance = rank_load and balance(rank_load),
                 experts_per_token = T > 0 and r.selected / T or 0,
                 dropped_fraction = r.selected > 0 and r.dropped / r.selected or 0,
                 capacity = r.capacity, tau = tau }
end

function MoE:extra_repr()
  local c = self.config
  return ("d_model=%d, d_hidden=%d, experts=%d, k=%d, gate=%s, capacity_factor=%g%s")
    :format(self.d_model, self.d_hidden, c.experts, c.k, c.gate, c.capacity_factor,
      c.expert and (", expert=%d:2:%d"):format(c.expert.V, c.expert.M) or "")
end

return { MoE = MoE }
