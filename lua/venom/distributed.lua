--- venom.distributed — training on several processes and hosts over MPI.
--
--     local dist = require "venom.distributed"
--     dist.init()                                  -- under mpirun; alone: a world of 1
--     local dp = dist.DataParallel(model)          -- rank 0's weights everywhere
--     local loader = data.DataLoader({x, y}, {batch_size = B / dist.world_size(),
--                                            sampler = data.DistributedSampler(n)})
--     ... loss:backward() ...                      -- gradients averaged over the ranks
--
-- Start P processes with `mpirun -np P venom script.lua` (Open MPI; see the
-- README for several hosts). Every rank runs the whole script; ranks are
-- numbered 0..P-1 as MPI numbers them (rank 0 writes checkpoints and
-- prints). Collectives take CPU tensors (f32, i32, i64; u8 for broadcast,
-- all_gather and all_to_all), and CUDA tensors through NCCL when venom was
-- built with it (is_nccl_available()), and must be called by every rank in the same
-- order; before moving data they compare the ranks' shapes, so a mismatch
-- is an error on every rank rather than a hang. venom built without MPI
-- (VENOM_MPI=OFF, or no libopenmpi-dev) answers init() with an error that
-- says so.
local ffi = require "ffi"
local venom = require "venom"
local util = require "venom.util"
local core = venom.core
local fail = util.fail

local dist = {}

-- Calls a venom.core function and re-raises its error at the user's line,
-- under the name the user called ('dist.scale_grad', not the binding's
-- 'dist_scale_grad').
local function call(fn, ...)
  local res = { pcall(fn, ...) }
  if not res[1] then fail((util.error_text(res[2]):gsub("'dist_([%w_]+)'", "'dist.%1'"))) end
  return unpack(res, 2, table.maxn(res))
end

--- For util.parse_cli's check of a script that takes --distributed and
-- --batch-size (the global batch): with o.distributed, joins the world
-- (init) and requires o.batch_size to be a multiple of the number of
-- processes, each taking its share; a failure is util.fail's usage error.
function dist.check_arg(o)
  if not o.distributed then return end
  local ok, err = pcall(core.dist_init)
  if not ok then fail("--distributed: " .. util.error_text(err)) end
  if o.batch_size % core.dist_world_size() ~= 0 then
    fail(("--batch-size %d must be a multiple of the %d processes"):format(o.batch_size,
      core.dist_world_size()))
  end
end

--- True when venom was built with MPI (VENOM_MPI, see the README).
function dist.is_available() return core.dist_built() end

--- True when venom was built with NCCL (VENOM_NCCL), so that the
-- collectives take CUDA tensors too (each process on its device 0: give
-- each rank its own GPU with CUDA_VISIBLE_DEVICES).
function dist.is_nccl_available() return core.dist_nccl_built() end

--- Joins the world of the processes mpirun started (MPI_Init). Outside
-- mpirun the process is a world of one (rank 0, world size 1), where every
-- collective is a copy and DataParallel changes nothing, so a script runs
-- the same with and without mpirun. Again: a no-op. Without MPI: an error
-- saying venom was built without MPI.
function dist.init() call(core.dist_init) end

--- True between init() and finalize().
function dist.is_initialized() return core.dist_is_initialized() end

--- Leaves the world (MPI_Finalize); it also happens at exit.
function dist.finalize() core.dist_finalize() end

--- This process's rank, 0..world_size()-1 (0 before init()).
function dist.rank() return core.dist_rank() end

--- The number of processes (1 before init()).
function dist.world_size() return core.dist_world_size() end

--- The rank among the processes on this host, 0-based: the GPU to use
-- when each host runs one process per GPU.
function dist.local_rank() return core.dist_local_rank() end

--- True on rank 0 (and outside a distributed run): the rank that prints
-- and writes files.
function dist.is_main() return core.dist_rank() == 0 end

--- Waits until every rank has reached it.
function dist.barrier() call(core.dist_barrier) end

--- t = op over the ranks' t, in place; op "sum" (default), "avg" or "max".
-- Returns t. t must be contiguous and not a parameter that requires grad
-- (wrap such a call in venom.no_grad).
function dist.all_reduce(t, op) return call(core.dist_all_reduce, t, op) end

--- t = rank root's t (root 0-based, default 0), in place. Returns t.
function dist.broadcast(t, root) return call(core.dist_broadcast, t, root) end

--- The ranks' tensors stacked along dim 1 in rank order: (n, ...) on each of
-- P ranks → (P·n, ...); a 0-d tensor → (P).
function dist.all_gather(t) return call(core.dist_all_gather, t) end

--- op over the ranks ("sum", "avg", "max"), of which rank r keeps the r-th
-- of P equal slices along dim 1: (P·n, ...) → (n, ...).
function dist.reduce_scatter(t, op) return call(core.dist_reduce_scatter, t, op) end

--- Exchange of rows with per-rank counts (MoE expert parallelism): counts
-- is a list of P row counts summing to t:size(1); rows are sent to ranks
-- 0, 1, ... in order. Returns the rows received (in rank order) and the
-- list of how many came from each rank. Differentiable: the backward sends
-- the rows' gradient back where they came from, times grad_scale (default
-- 1), and is itself a collective, so every rank must reach it.
function dist.all_to_all(t, counts, grad_scale)
  return call(core.dist_all_to_all, t, counts, grad_scale)
end

--- The identity whose backward multiplies the gradient by `scale` (a
-- finite number): dist.scale_grad(x, s) has x's values (no copy), and
-- x.grad gets s · the gradient that reaches it. Expert replicas use it
-- (venom.nn_moe_parallel); not a collective.
function dist.scale_grad(t, scale) return call(core.dist_scale_grad, t, scale) end

-- A double and its two 32-bit halves, to move Lua numbers exactly.
local bits = ffi.new("union { double d; uint32_t w[2]; }")

--- A Lua number combined over the ranks: "sum" (default), "avg" or "max",
-- for global metrics (losses, correct counts). Exact in double precision:
-- each rank's number travels bit for bit (all_gather) and every rank adds
-- them in rank order, so all ranks get the same result. Outside a
-- distributed run: x itself.
function dist.all_reduce_number(x, op)
  op = op or "sum"
  if type(x) ~= "number" then
    fail(("distributed.all_reduce_number: expected a number, got %s"):format(type(x)))
  end
  if op ~= "sum" and op ~= "avg" and op ~= "max" then
    fail(("distributed.all_reduce_number: op must be 'sum', 'avg' or 'max', got %s")
      :format(tostring(op)))
  end
  if not core.dist_is_initialized() then return x end
  bits.d = x
  local t = venom.tensor({ bits.w[0], bits.w[1] }, { dtype = "i64" })
  local ok, all = pcall(core.dist_all_gather, t)
  t:free()
  if not ok then fail(util.error_text(all)) end
  local words = all:totable()
  all:free()
  local acc
  for r = 0, #words / 2 - 1 do
    bits.w[0], bits.w[1] = words[2 * r + 1], words[2 * r + 2]
    local v = bits.d
    if not acc then acc = v
    elseif op == "max" then acc = math.max(acc, v)
    else acc = acc + v end
  end
  return op == "avg" and acc / (#words / 2) or acc
end

--- The mean over all ranks of `value` weighted by `weight` (Σ value·weight
-- / Σ weight): the global mean loss from each rank's mean over its samples
-- and their number, or the global accuracy. Outside a distributed run:
-- value itself.
function dist.mean(value, weight)
  if not core.dist_is_initialized() then return value end
  return dist.all_reduce_number(value * weight) / dist.all_reduce_number(weight)
end

--- This rank's share of a batch every rank holds whole: rows
-- r·n/P + 1 .. (r+1)·n/P of t (a view). With DataParallel, the ranks'
-- shares of the same global batch make one step on that batch. The first
-- dim must be a multiple of the world size.
function dist.share(t)
  if not venom.is_tensor(t) or t:dim() < 1 then
    fail("distributed.share: expected a tensor with rows, got " .. (venom.is_tensor(t) and "a 0-d tensor" or type(t)))
  end
  local P, n = core.dist_world_size(), t:size(1)
  if n % P ~= 0 then
    fail(("distributed.share: %d rows cannot be shared by %d ranks"):format(n, P))
  end
  return t:narrow(1, core.dist_rank() * n / P + 1, n / P)
end

--- ZeRO stage 1: dist.ZeroRedundancyOptimizer(params, optim.AdamW, opts)
-- shards the optimizer state over the ranks (venom.distributed_zero).
local Group = {} -- what dist.new_group returns
Group.__index = Group

--- A group of ranks (an MPI sub-communicator): its collectives move data
-- among its members alone, e.g. the replicas of a FlexMoE expert averaging
-- their gradients (venom.nn_moe_parallel). `ranks` lists distinct 0-based
-- world ranks; new_group is a collective over the whole world: every rank
-- calls it, in the same order, with the same list (different lists are an
-- error on every rank). Every rank gets the object; only members call
-- group:all_reduce(t, op) (in place, contiguous f32 CPU; op "sum", "avg"
-- (over the group's size) or "max"). group:size(), group:rank() (this
-- rank's place in the list, 0-based; nil outside), group:contains(rank),
-- group:free() (idempotent; the collector frees it too).
function dist.new_group(ranks)
  local g = call(core.dist_group, ranks)
  local copy = {}
  for i, q in ipairs(ranks) do copy[i] = q end
  return setmetatable({ handle = g, ranks = copy }, Group)
end
function Group:size() return (call(core.dist_group_info, self.handle)) end
function Group:rank()
  local _, place = call(core.dist_group_info, self.handle)
  return place >= 0 and place or nil
end
function Group:contains(q)
  for _, h in ipairs(self.ranks) do if h == q then return true end end
  return false
end
function Group:all_reduce(t, op) return call(core.dist_group_all_reduce, self.handle, t, op) end
function Group:free() core.dist_group_free(self.handle) end
function Group:__tostring()
  return ("distributed.Group{%s}"):format(table.concat(self.ranks, ", "))
end

dist.ZeroRedundancyOptimizer = require "venom.distributed_zero"

-- DataParallel ----------------------------------------------------------------------

local DataParallel = {}

local DEFAULT_BUCKET_MB = 25

-- Every DataParallel not yet freed. The hooks it sets on the parameters
-- must outlive the script's reference to it: `dist.DataParallel(model)`
-- without keeping the result is the usual call (the model is what gets
-- trained), and if the garbage collector took the wrapper, its reducer's
-- __gc would remove the hooks at some step that depends on the memory in
-- use, after which every rank trains silently on its own gradients. So the
-- wrappers live here until dp:free().
local live = {}

-- The model's parameters held whole on every rank, in order: all but the
-- experts of expert-parallel nn.MoE layers (each rank holds its own; see
-- venom.nn_moe_parallel for how their gradients are averaged).
-- This rank's own part of the model: the experts of expert-parallel nn.MoE
-- layers. Returns the set of their parameters and the list of their
-- state-dict prefixes ("2.experts.").
local function rank_own(model)
  local params, prefixes = {}, {}
  local function walk(m, prefix)
    if m.replicas and m.experts then
      for _, p in ipairs(m.experts:parameters()) do params[p] = true end
      prefixes[#prefixes + 1] = prefix .. "experts."
    end
    for _, nc in ipairs(m:named_children()) do walk(nc[2], prefix .. tostring(nc[1]) .. ".") end
  end
  walk(model, "")
  return params, prefixes
end

local function replicated_parameters(model)
  local own = rank_own(model)
  local out = {}
  for _, p in ipairs(model:parameters()) do
    if not own[p] then out[#out + 1] = p end
  end
  return out
end

-- A new reducer over the model's present parameters, in their order.
local function attach(self)
  if self.reducer then core.dist_reducer_free(self.reducer) end
  self.params = replicated_parameters(self.module)
  self.reducer = call(core.dist_reducer, self.params, self.bucket_mb * 2 ^ 20)
end

--- Wraps `model` (a venom.nn module) for data parallelism: every rank holds
-- the whole model and trains on its own share of each batch. At wrap time
-- rank 0's parameters (and buffers) are broadcast, so all ranks start from
-- the same weights. Then each backward averages the gradients over the
-- ranks as it runs: the gradients are laid into buckets of at most
-- opts.bucket_mb megabytes (default 25; a large one cut across several),
-- last layers first, and a bucket
-- whose gradients are all final starts a non-blocking all-reduce
-- (MPI_Iallreduce) while the backward goes on; when the backward is done,
-- each .grad holds the mean over the ranks, so opt:step() moves every
-- rank's weights identically. With the per-rank batch B/P and a loss that
-- is a mean over the batch, that is the gradient of the global batch of B.
-- dp(x, ...) calls model(x, ...), and dp:name(...) the model's method (dp:loss,
-- dp:train, dp:state_dict...); the model itself can be called too. If
-- the model's parameters are replaced (a pruning step that changes a
-- sparse layer's layout), dp(x) notices and re-attaches; after calling the
-- model directly call dp:refresh() yourself. A step in which some parameter
-- gets no gradient needs dp:sync() before opt:step() (the missing ones
-- count as zeros). The experts of an nn.MoE with expert_parallel are left
-- out (each rank holds its own). The averaging lasts until dp:free(), whether or not the
-- script keeps dp (`dist.DataParallel(model)` alone is enough). Errors:
-- venom.distributed not initialized; ranks whose models differ (on every
-- rank); parameters on both the CPU and CUDA; CUDA parameters in a build
-- without NCCL. CUDA parameters (a build with NCCL) are averaged by NCCL
-- on its own stream, bucket by bucket during the backward, as CPU ones by MPI.
function dist.DataParallel(model, opts)
  local who = "distributed.DataParallel"
  if type(model) ~= "table" or type(model.parameters) ~= "function" then
    fail(("%s: expected a venom.nn module, got %s"):format(who, type(model)))
  end
  opts = util.check_options(opts, { "bucket_mb" }, who)
  local mb = opts.bucket_mb or DEFAULT_BUCKET_MB
  if type(mb) ~= "number" or not (mb > 0 and mb < 2 ^ 20) then
    fail(("%s: bucket_mb must be a number of megabytes > 0, got %s"):format(who, tostring(mb)))
  end
  if not core.dist_is_initialized() then
    fail(who .. ": call venom.distributed.init() first")
  end
  local self = setmetatable({ module = model, bucket_mb = mb }, DataParallel)
  attach(self) -- first: it compares the ranks' parameter lists
  live[self] = true
  self:broadcast_parameters()
  return self
end

--- Copies rank 0's parameters and buffers (the whole state dict's tensors
-- but each rank's own experts) to every rank, in place.
function DataParallel:broadcast_parameters()
  local sd, _, own = self.module:state_dict(), rank_own(self.module)
  local function replicated(name)
    for _, prefix in ipairs(own) do
      if name:sub(1, #prefix) == prefix then return false end
    end
    return true
  end
  venom.no_grad(function()
    for _, name in ipairs(util.sorted_keys(sd)) do
      if venom.is_tensor(sd[name]) and replicated(name) then call(core.dist_broadcast, sd[name], 0) end
    end
  end)
end

-- True when the model's parameters are no longer those the reducer hooks.
local function stale(self)
  local now = replicated_parameters(self.module)
  if #now ~= #self.params then return true end
  for i, p in ipairs(now) do
    if not rawequal(p, self.params[i]) then return true end
  end
  return false
end

--- Re-attaches the reducer to the model's present parameters (after a
-- layer was replaced). Every rank must call it at the same point.
function DataParallel:refresh()
  if stale(self) then attach(self) end
end

--- Calls the model (after refresh()).
function DataParallel:__call(...)
  self:refresh()
  return self.module(...)
end

--- Finishes this step's gradient averaging: starts what the backward did
-- not (parameters that got no gradient count as zeros) and waits for it.
-- A no-op when the backward finished it, as it does when every parameter
-- got a gradient.
function DataParallel:sync() call(core.dist_reducer_finish, self.reducer) end

--- {steps, buckets, bytes_per_step, wait_seconds, bytes_reduced,
-- pieces_early, bytes_started_early}: completed steps, the number of buckets, the gradient bytes
-- all-reduced per step (the sum of the parameters' sizes: each rank sends
-- and receives that payload through MPI's all-reduce), the seconds spent
-- waiting for all-reduces after the backward had nothing left to overlap
-- them with, the bytes copied into the buckets in all (steps ×
-- bytes_per_step: each element once per step) and the bucket pieces handed
-- over from a linear layer's weight-gradient GEMM while it ran (a large
-- layer's dW arrives slice by slice, so its all-reduce overlaps its own
-- computation), and the bytes whose all-reduce started while some gradient
-- was still being computed (the most the backward can hide).
function DataParallel:stats() return call(core.dist_reducer_stats, self.reducer) end

--- Removes the gradient hooks; the model trains alone again (and the
-- wrapper can be collected).
function DataParallel:free()
  if self.reducer then core.dist_reducer_free(self.reducer) end
  self.reducer = nil
  live[self] = nil
end

-- Any other method is the module's (dp:loss(x, y), dp:train(), dp:state_dict()...),
-- called after refresh().
DataParallel.__index = function(self, k)
  local own = rawget(DataParallel, k)
  if own ~= nil then return own end
  local f = self.module[k]
  if type(f) ~= "function" then return f end
  return function(dp, ...)
    if rawequal(dp, self) then
      dp:refresh()
      return f(dp.module, ...)
    end
    return f(dp, ...)
  end
end

function DataParallel:__tostring()
  return ("DataParallel(%d ranks, %d buckets of <= %g MB)\n%s"):format(core.dist_world_size(),
    self:stats().buckets, self.bucket_mb, tostring(self.module))
end

return dist
