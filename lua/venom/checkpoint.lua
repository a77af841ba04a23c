--- venom.checkpoint — a whole training state in one safetensors file.
--
--     local checkpoint = require "venom.checkpoint"
--     local parts = { model = model, optim = opt, sched = sched }
--     checkpoint.save("run.safetensors", parts, { epoch = epoch })   -- after an epoch
--     local meta = checkpoint.load("run.safetensors", parts)         -- meta.epoch == "3"
--
-- Each part is an object with state_dict() and load_state_dict(sd) (a
-- module, an optimizer, a learning-rate schedule, a pruning scheduler...).
-- A pruning scheduler (venom.prune.GMP, e.g. parts.gmp) is loaded before
-- the model and the optimizer, so that they load into the sparse layers it
-- rebuilds.
-- A part's entries are stored under "<part>.<name>": tensors as tensors,
-- strings and numbers in the file's metadata (numbers written so they read back
-- exactly). The engine RNG state is stored too ("rng_state"), so that a run
-- resumed at an epoch boundary draws the same shuffles and dropout masks as
-- the uninterrupted run, and (on the CPU) computes the same losses bit for
-- bit. A checkpoint is written atomically (venom.save): an interrupted save
-- leaves the previous file intact.
local venom = require "venom"
local nn = require "venom.nn"
local util = require "venom.util"
local fail = util.fail

local checkpoint = {}

local RNG = "rng_state"
local WORLD = "world_size" -- in a distributed run's checkpoint: the number of ranks
local PLACEMENT = "expert_placement" -- in an expert-parallel run's: where the experts live

-- This process's rank and the world size (0 and 1 outside a distributed run).
local function world()
  local core = venom.core
  return core.dist_rank(), core.dist_world_size()
end

-- Calls a venom.core function and re-raises its error at the user's line.
local function call(fn, ...)
  local ok, a, b = pcall(fn, ...)
  if not ok then fail(util.error_text(a)) end
  return a, b
end

local function check_parts(who, parts)
  if type(parts) ~= "table" then
    fail(("%s: parts must be a table such as {model = model, optim = opt}, got %s")
      :format(who, type(parts)))
  end
  local names = {}
  for name, obj in pairs(parts) do
    if type(name) ~= "string" or name:find(".", 1, true) or name == "" or name == RNG then
      fail(("%s: part names must be non-empty strings without dots (and not '%s'), got %s")
        :format(who, RNG, tostring(name)))
    end
    if type(obj) ~= "table" or type(obj.state_dict) ~= "function"
        or type(obj.load_state_dict) ~= "function" then
      fail(("%s: part '%s' has no state_dict/load_state_dict methods"):format(who, name))
    end
    names[#names + 1] = name
  end
  -- Parts that restructure the model (load_before_model, e.g. a pruning
  -- scheduler turning layers sparse) first, then modules: an optimizer
  -- checks its state against the shapes of parameters that a module's extra
  -- state may have just changed.
  local function rank(obj)
    if obj.load_before_model then return 0 end
    return nn.is_module(obj) and 1 or 2
  end
  table.sort(names, function(a, b)
    local ra, rb = rank(parts[a]), rank(parts[b])
    if ra ~= rb then return ra < rb end
    return a < b
  end)
  return names
end

-- A function that puts part `obj` back as it is now: its own snapshot()
-- when it has one (a pruning scheduler, which rebuilds modules), else a
-- load_state_dict of a copy of its present state (tensors cloned: loading
-- writes into the parameters in place).
local function snapshot(obj)
  if type(obj.snapshot) == "function" then return obj:snapshot() end
  local sd = {}
  for k, v in pairs(obj:state_dict()) do sd[k] = venom.is_tensor(v) and v:clone() or v end
  return function() obj:load_state_dict(sd) end
end

-- The expert placement of the expert-parallel nn.MoE layers among the
-- parts' modules (a DataParallel part: its model), as a string, or nil when
-- there are none: then every rank holds the same state.
local function expert_placement(parts)
  local parallel = require "venom.nn_moe_parallel"
  local found = {}
  local names = {}
  for name in pairs(parts) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local m = rawget(parts[name], "module") or parts[name]
    if nn.is_module(m) and parallel.is_sharded(m) then found[#found + 1] = parallel.describe(m) end
  end
  return #found > 0 and table.concat(found, "; ") or nil
end

-- The file of rank q in an expert-parallel checkpoint: `path` itself for
-- rank 0, `path.rank<q>` for the others.
local function shard_path(path, q) return q == 0 and path or ("%s.rank%d"):format(path, q) end

-- Every rank's outcome reaches every rank, so that none carries on alone:
-- raises this rank's error, or says which rank failed.
local function all_or_none(who, ok, err, what)
  local dist = require "venom.distributed"
  local failed = dist.all_reduce_number(ok and -1 or dist.rank(), "max")
  if failed < 0 then return end
  if not ok then fail(util.error_text(err)) end
  fail(("%s: rank %d could not %s (its error says why)"):format(who, failed, what))
end

--- Writes every part's state, the RNG state and `meta` (extra string or
-- number entries such as {epoch = 3}; names without dots) to `path`. In a
-- distributed run (venom.distributed with more than one rank) rank 0 writes
-- the file, with the world size in its metadata (the ranks hold the same
-- weights), and every rank returns once it is written. A model with
-- expert-parallel nn.MoE layers holds different experts (and optimizer
-- state) on each rank: then every rank writes its own state, rank 0 to
-- `path` and rank q to `path.rank<q>`, each with the world size and the
-- expert placement; a save that fails on any rank fails on all.
function checkpoint.save(path, parts, meta)
  local who = "checkpoint.save"
  local tensors, metadata = {}, {}
  for _, name in ipairs(check_parts(who, parts)) do
    for k, v in pairs(parts[name]:state_dict()) do
      local key = name .. "." .. k
      if venom.is_tensor(v) then tensors[key] = v else metadata[key] = v end
    end
  end
  for k, v in pairs(meta or {}) do
    if type(k) ~= "string" or k:find(".", 1, true) or k == RNG then
      fail(("%s: meta keys must be strings without dots (and not '%s'), got %s")
        :format(who, RNG, tostring(k)))
    end
    metadata[k] = v
  end
  tensors[RNG] = venom.get_rng_state()
  local rank, size = world()
  local placement = expert_placement(parts)
  if size == 1 and not placement then return call(venom.save, path, tensors, metadata) end
  for _, k in ipairs({ WORLD, PLACEMENT }) do
    if metadata[k] ~= nil then fail(("%s: meta key '%s' is taken by distributed runs"):format(who, k)) end
  end
  metadata[WORLD] = size
  metadata[PLACEMENT] = placement
  local ok, err = true, nil
  if placement then
    ok, err = pcall(venom.save, shard_path(path, rank), tensors, metadata)
  elseif rank == 0 then
    ok, err = pcall(venom.save, path, tensors, metadata)
  end
  all_or_none(who, ok, err, ("write its part of '%s'"):format(path))
end

-- Loads `path` into the parts (all or nothing); returns the extra metadata
-- and a function that puts back what was there before. `placement`: the
-- model's expert placement (nil without expert-parallel layers), which the
-- file must have been written with.
local function load_file(who, path, parts, names, placement)
  local tensors, metadata = call(venom.load, path)
  if not tensors[RNG] then
    fail(("%s: '%s' has no '%s' (not a checkpoint written by checkpoint.save?)")
      :format(who, path, RNG))
  end
  -- A distributed run resumes on as many ranks as it had: its data shards
  -- and batch shares depend on the world size.
  local saved_world, _, size = tonumber(metadata[WORLD] or 1), world()
  if saved_world ~= size then
    fail(("%s: '%s' was written by a run of %d rank%s and this run has %d; resume on the same "
      .. "world size (mpirun -np %d)"):format(who, path, saved_world, saved_world == 1 and "" or "s",
      size, saved_world))
  end
  if metadata[PLACEMENT] ~= placement then
    fail(metadata[PLACEMENT] and placement and
      ("%s: '%s' was written with the expert placement %s and the model has %s; build the model "
        .. "with the saved placement to resume"):format(who, path, metadata[PLACEMENT], placement)
      or ("%s: '%s' was written by a model %s expert-parallel nn.MoE layers and this one has %s")
        :format(who, path, placement and "without" or "with", placement and "some" or "none"))
  end
  metadata[WORLD], metadata[PLACEMENT] = nil, nil
  local sds = {}
  for _, name in ipairs(names) do sds[name] = {} end
  local meta = {}
  local function route(key, v)
    local part, rest = key:match("^([^.]+)%.(.+)$")
    if part and sds[part] then
      sds[part][rest] = v
    elseif part then
      fail(("%s: '%s' holds '%s', but no part named '%s' was given"):format(who, path, key, part))
    else
      meta[key] = v
    end
  end
  for k, v in pairs(tensors) do
    if k ~= RNG then route(k, v) end
  end
  for k, v in pairs(metadata) do route(k, v) end
  for _, name in ipairs(names) do
    if next(sds[name]) == nil then
      fail(("%s: '%s' holds nothing for part '%s'"):format(who, path, name))
    end
  end
  -- All or nothing: a part is checked only as it loads (the model's and the
  -- optimizer's entries against the layers a pruning scheduler rebuilds
  -- first), so each part's present state is kept and, if any part or the
  -- RNG state is refused, every part loaded so far is put back.
  local undo = {}
  for i, name in ipairs(names) do undo[i] = snapshot(parts[name]) end
  local rng = venom.get_rng_state()
  local ok, err = pcall(function()
    for _, name in ipairs(names) do parts[name]:load_state_dict(sds[name]) end
    venom.set_rng_state(tensors[RNG])
  end)
  if not ok then
    -- In load order: a scheduler's structure first, so that the model's and
    -- the optimizer's saved states fit their parameters again.
    for _, restore in ipairs(undo) do restore() end
    venom.set_rng_state(rng)
    fail(util.error_text(err))
  end
  return meta, function()
    for _, restore in ipairs(undo) do restore() end
    venom.set_rng_state(rng)
  end
end

--- Restores every part and the RNG state from `path`; returns the extra
-- metadata saved with it (values as strings). Errors name the entry: a
-- part with no entries in the file, an entry for a part not given, or
-- whatever a part's load_state_dict refuses. A load that fails changes
-- nothing: the parts loaded before the refusal are put back (a part may
-- define snapshot(), returning a function that restores it; otherwise a
-- copy of its state_dict is loaded back), and so is the RNG state. A
-- distributed run resumes on the world size that saved it; with
-- expert-parallel nn.MoE layers each rank loads its own file (see save),
-- which must hold the model's expert placement, and a load that fails on
-- any rank changes nothing on every rank.
function checkpoint.load(path, parts)
  local who = "checkpoint.load"
  local names = check_parts(who, parts)
  local placement = expert_placement(parts)
  if not placement then return (load_file(who, path, parts, names)) end
  local rank, size = world()
  local mine = shard_path(path, rank)
  local ok, meta, undo = pcall(function()
    local f = io.open(mine, "rb")
    if not f then
      fail(("%s: no '%s' for rank %d of %d: an expert-parallel checkpoint has one file per rank "
        .. "(written by a run of fewer ranks?)"):format(who, mine, rank, size))
    end
    f:close()
    return load_file(who, mine, parts, names, placement)
  end)
  if not ok then undo = nil end
  local dist = require "venom.distributed"
  if dist.all_reduce_number(ok and -1 or rank, "max") >= 0 and undo then undo() end
  all_or_none(who, ok, meta, ("load its part of '%s'; nothing was loaded"):format(path))
  return meta
end

--- checkpoint.options_meta(opts, names) → a string recording the values of
-- the command-line options `names` (a list of keys of opts, as
-- util.parse_cli gives them) for a training script's checkpoint metadata,
-- {options = ...}, so that checkpoint.check_options can refuse a resumed run
-- whose options would make it a different run (its losses not those of the
-- run never stopped). Leave out the options a resume may change (output
-- files, the device, the seed: the RNG state comes from the checkpoint).
function checkpoint.options_meta(opts, names)
  local lines = {}
  for i, k in ipairs(names) do lines[i] = k .. "=" .. tostring(opts[k]) end
  return table.concat(lines, "\n")
end

--- checkpoint.check_options(meta, opts, path) → nil when every option that
-- meta.options (checkpoint.options_meta, in the metadata checkpoint.load
-- returns) records has the same value in opts, else a message naming the
-- differences ("run.st: the run that wrote it had --lr 0.001; this one has
-- --lr 0.5 (...)"). A checkpoint written without meta.options is not checked.
function checkpoint.check_options(meta, opts, path)
  if type(meta.options) ~= "string" then return nil end
  local had, has = {}, {}
  local function shown(v) return v == "" and "''" or v end
  for k, saved in meta.options:gmatch("([%w_]+)=([^\n]*)") do
    local now = tostring(opts[k])
    if now ~= saved then
      local flag = "--" .. k:gsub("_", "-")
      had[#had + 1], has[#has + 1] = flag .. " " .. shown(saved), flag .. " " .. shown(now)
    end
  end
  if #had == 0 then return nil end
  return ("%s: the run that wrote it had %s; this one has %s (resume with the same options)")
    :format(path, table.concat(had, " "), table.concat(has, " "))
end

return checkpoint
