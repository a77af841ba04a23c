-- Resuming pruned training: GMP:state_dict / load_state_dict round trips in
-- the vnm, nm and unstructured modes mid-schedule (layouts, masks, schedule
-- position, and the optimizer holding the rebuilt layers' parameters), its
-- errors, and a short GMP run stopped and resumed through venom.checkpoint
-- (at an event step and between events) that computes the same losses, bit
-- for bit, and ends with the same checkpoint as the run that never stopped.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local testutil = require "testutil"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local prune = require "venom.prune"
local checkpoint = require "venom.checkpoint"

local dir = testutil.tmpdir()
local function path(name) return dir .. "/" .. name end

local slurp = testutil.slurp

local STEPS = 14
-- vnm: with the dense shadow (compressed at step 10), fisher scores and
-- doubling stages; vnm_compress: without the shadow.
local GMP_OPTS = {
  vnm = { mode = "vnm", pattern = "4:2:8", t0 = 2, n = 4, dt = 2, score = "fisher",
          progression = "doubling" },
  vnm_compress = { mode = "vnm", shadow = false, pattern = "4:2:8", t0 = 2, n = 4, dt = 2 },
  nm = { mode = "nm", pattern = "2:8", t0 = 2, n = 4, dt = 2 },
  unstructured = { mode = "unstructured", s_f = 0.8, t0 = 2, n = 4, dt = 2 },
}

-- A fresh run: model (with dropout, which draws from the RNG), AdamW, a
-- cosine schedule and GMP, all from the same seed.
local function setup(mode)
  venom.manual_seed(11)
  local model = nn.Sequential(nn.Linear(16, 24), nn.ReLU(), nn.Dropout(0.1),
    nn.Linear(24, 24), nn.ReLU(), nn.Linear(24, 4))
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2, weight_decay = 0.01 })
  local sched = optim.CosineWarmup(opt, { warmup_steps = 2, total_steps = STEPS })
  local o = { optimizer = opt }
  for k, v in pairs(GMP_OPTS[mode]) do o[k] = v end
  local gmp = prune.GMP(model, o)
  return { model = model, optim = opt, sched = sched, gmp = gmp }
end

-- Steps from+1 .. to, each on a fresh random batch; appends the losses.
local crit = nn.CrossEntropyLoss()
local function train(parts, from, to, losses)
  for _ = from + 1, to do
    local x = venom.randn(8, 16)
    local y = x:narrow(2, 1, 4):argmax(2)
    local loss = crit(parts.model(x), y)
    parts.optim:zero_grad(); loss:backward(); parts.optim:step()
    parts.sched:step(); parts.gmp:step()
    losses[#losses + 1] = loss:item()
  end
end

local function describe(parts)
  local out = {}
  for _, r in ipairs(parts.gmp:report()) do
    out[#out + 1] = ("%s %s %d"):format(r.name, r.pattern, r.nnz)
  end
  return table.concat(out, ", ")
end

local function same_list(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do
    if a[i] ~= b[i] then return false end
  end
  return true
end

-- The optimizer's parameters are exactly the model's, in order.
local function opt_holds_model(parts)
  local ps = parts.model:parameters()
  if #ps ~= #parts.optim.params then return false end
  for i, p in ipairs(ps) do
    if parts.optim.params[i] ~= p then return false end
  end
  return true
end

for _, mode in ipairs({ "vnm", "vnm_compress", "nm", "unstructured" }) do
  -- Round trip of the scheduler alone, at step 5 (after events 2 and 4).
  local a = setup(mode)
  train(a, 0, 5, {})
  local sd = a.gmp:state_dict()
  local b = setup(mode)
  b.gmp:load_state_dict(sd)
  tap.ok(b.gmp.t == 5 and b.gmp:sparsity() == a.gmp:sparsity() and a.gmp:sparsity() > 0,
    mode .. ": the schedule position and current target round trip")
  tap.is(describe(b), describe(a), mode .. ": every layer's layout and alive count round trip")
  if mode == "vnm" then
    local m1 = b.gmp.layers[1].alive
    tap.ok(getmetatable(b.model[1]) == nn.Linear and rawget(b.model[1], "forward") ~= nil
      and m1:eq(a.gmp.layers[1].alive):sum():item() == m1:numel() and opt_holds_model(b),
      "vnm shadow: the layers stay dense, compute through the saved pattern, the optimizer "
      .. "holds them")
  elseif mode == "vnm_compress" then
    tap.ok(getmetatable(b.model[1]) == getmetatable(a.model[1]) and b.model[1].M == a.model[1].M
      and b.model[4].M == a.model[4].M and opt_holds_model(b),
      "vnm: the layers are rebuilt as SparseLinear of the saved M, and the optimizer holds them")
  else
    local m1 = b.gmp.layers[1].alive
    tap.ok(m1 ~= a.gmp.layers[1].alive and m1:eq(a.gmp.layers[1].alive):sum():item() == m1:numel(),
      mode .. ": the masks are copied in equal")
  end

  -- The whole run split at step 4 (an event) and at step 5, through files.
  local full = setup(mode)
  local want = {}
  train(full, 0, STEPS, want)
  checkpoint.save(path(mode .. "-full.st"), full)
  for _, stop in ipairs({ 4, 5 }) do
    local first = setup(mode)
    local got = {}
    train(first, 0, stop, got)
    checkpoint.save(path(mode .. "-stop.st"), first)
    local second = setup(mode)
    checkpoint.load(path(mode .. "-stop.st"), second)
    train(second, stop, STEPS, got)
    tap.ok(same_list(got, want), ("%s: stopped after step %d and resumed, the %d losses are "
      .. "bit for bit those of the uninterrupted run"):format(mode, stop, STEPS))
    checkpoint.save(path(mode .. "-resumed.st"), second)
    tap.ok(slurp(path(mode .. "-resumed.st")) == slurp(path(mode .. "-full.st")),
      ("%s: resumed after step %d, the final checkpoint equals the uninterrupted run's")
        :format(mode, stop))
  end
end

-- Errors: nothing changes when an entry is refused.
do
  local a = setup("vnm")
  train(a, 0, 5, {})
  local sd = a.gmp:state_dict()
  local b = setup("nm")
  tap.error_like(function() b.gmp:load_state_dict(sd) end,
    "GMP:load_state_dict: the checkpoint is for mode vnm, this scheduler's is nm",
    "a vnm checkpoint into an nm scheduler names both modes")
  local c = setup("vnm")
  sd["layers.1.alive"] = venom.zeros(3, 3)
  tap.error_like(function() c.gmp:load_state_dict(sd) end,
    "'layers%.1%.alive' must be an f32 tensor of shape %(24, 16%), got f32 %(3, 3%)",
    "a mask of the wrong shape is named with both shapes")
  tap.ok(getmetatable(c.model[1]) == nn.Linear and c.gmp.t == 0, "and nothing changed")
  sd["layers.1.alive"] = a.gmp.layers[1].alive
  sd["layers.9.M"] = 8
  tap.error_like(function() c.gmp:load_state_dict(sd) end, "unexpected entry 'layers%.9%.M'",
    "an entry for a layer the scheduler does not prune is refused")
  sd["layers.9.M"] = nil
  sd["layers.1.M"] = 16
  tap.error_like(function() c.gmp:load_state_dict(sd) end,
    "'layers%.1%.M' must be an integer in %[4, 8%], got 16", "a stage beyond the pattern is refused")
  sd["layers.1.M"] = a.gmp.layers[1].M
  local keep = sd["layers.1.alive"]
  sd["layers.1.alive"] = venom.full(keep:shape(), 0 / 0)
  tap.error_like(function() c.gmp:load_state_dict(sd) end, "must hold only 0 and 1",
    "a mask holding NaN is refused")
  sd["layers.1.alive"] = keep
  sd.shadow = 0
  tap.error_like(function() c.gmp:load_state_dict(sd) end,
    "written with shadow = false, this scheduler has shadow = true",
    "a checkpoint without the shadow into a scheduler with it is refused")
  tap.ok(getmetatable(c.model[1]) == nn.Linear and c.gmp.t == 0
    and rawget(c.model[1], "forward") == nil, "and nothing changed")
  tap.error_like(function() c.gmp:load_state_dict({ mode = "vnm", t = 6, current = 0.5,
    shadow = 1 }) end,
    "no entry for layer '1'", "a pruned target without layer entries is refused")
end

os.execute("rm -rf '" .. dir .. "'")
tap.done()
