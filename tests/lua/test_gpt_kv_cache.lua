-- GPT:generate's KV cache (models/gpt.lua): for a tiny model of each kind
-- (f32, BitNet training path, packed ternary, V:N:M MLPs, ReLU² activation-
-- sparse MLPs, packed ternary 2:8 MLPs, MoE without and with a capacity
-- limit), the logits of every step within f32 rounding of the no-cache
-- path (which reruns the whole context), the same greedy tokens and the same
-- sampled tokens for a seed, through the slide past block_size; the cache is
-- really used (the full forward runs only once the window slides); bad
-- options.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local nn = require "venom.nn"
local GPT = require "models.gpt"

venom.manual_seed(3)
local BLOCK, PROMPT, N = 12, { 5, 17, 2 }, 14 -- 3 + 14 > 12: the last 5 steps slide

-- Larger embeddings than GPT-2's spread the untrained logits, so that no
-- two are within rounding of each other and greedy picks are stable.
local function model(extra)
  local cfg = { vocab_size = 32, block_size = BLOCK, n_layer = 2, n_head = 2, n_embd = 16, emb_std = 1 }
  for k, v in pairs(extra or {}) do cfg[k] = v end
  return GPT(cfg)
end

local function packed_ternary()
  local bit = model({ bitnet = true })
  local path = os.tmpname()
  venom.export_ternary(bit, path)
  local m = venom.load_ternary(model({ bitnet = true }), path)
  os.remove(path)
  return m
end

local function packed_28()
  local m = model({ bitnet = true })
  for i = 1, 2 do
    local mlp = m.blocks[i].mlp
    mlp:add_module("fc", nn.SparseBitLinear(16, 64, { V = 8, M = 8 }):pack())
    mlp:add_module("proj", nn.SparseBitLinear(64, 16, { V = 8, M = 8 }):pack())
  end
  return m
end

-- Generates with opts (plus cache = use_cache), returning the tokens, every
-- step's logits and the number of full forward passes.
local function run(m, use_cache, opts, seed)
  local steps, forwards = {}, 0
  rawset(m, "forward", function(self, idx)
    forwards = forwards + 1
    return GPT.forward(self, idx)
  end)
  local o = { cache = use_cache, on_logits = function(l) steps[#steps + 1] = l end }
  for k, v in pairs(opts) do o[k] = v end
  venom.manual_seed(seed)
  local out = m:generate(PROMPT, N, o)
  rawset(m, "forward", nil)
  return out, steps, forwards
end

local function max_diff(a, b)
  local d = 0
  for s = 1, #a do
    for i = 1, #a[s] do d = math.max(d, math.abs(a[s][i] - b[s][i]) / (1 + math.abs(b[s][i]))) end
  end
  return d
end

local kinds = {
  { "f32", function() return model() end },
  { "BitNet (training path)", function() return model({ bitnet = true }) end },
  { "packed ternary", packed_ternary },
  { "V:N:M MLPs", function() return model({ mlp = { V = 8, M = 8 } }) end },
  { "V:N:M MLPs and attention projections", function() return model({ mlp = { V = 8, M = 8 }, attn = { V = 8, M = 8 } }) end },
  { "ReLU² (activation-sparse MLPs)", function() return model({ activation = "relu2" }) end },
  { "packed ternary 2:8 MLPs", packed_28 },
  { "MoE, no capacity limit", function()
    return model({ moe = { experts = 4, k = 2, every = 1, capacity_factor = math.huge } })
  end, true },
  { "MoE, capacity 1.25 (no cache)", function() return model({ moe = { experts = 4, k = 1 } }) end, false },
}

for _, kind in ipairs(kinds) do
  local name, make, cached = kind[1], kind[2], kind[3]
  if cached == nil then cached = true end
  local m = make()
  local want, wl = run(m, false, { top_k = 1 }, 1)
  local got, gl, forwards = run(m, true, { top_k = 1 }, 1)
  tap.is(table.concat(got, ","), table.concat(want, ","), name .. ": the same greedy tokens with the cache")
  tap.ok(#gl == N and max_diff(gl, wl) < 1e-5, name .. ": every step's logits within rounding")
  if max_diff(gl, wl) >= 1e-5 then tap.diag("max relative difference %g", max_diff(gl, wl)) end
  -- the cache serves the steps whose context fits in block_size (the last
  -- token drawn needs no step); once the window slides, full passes
  tap.is(forwards, cached and #PROMPT + N - 1 - BLOCK or N, name .. ": full forward passes")
  local s1 = run(m, false, { temperature = 0.9, top_k = 10 }, 5)
  local s2 = run(m, true, { temperature = 0.9, top_k = 10 }, 5)
  tap.is(table.concat(s2, ","), table.concat(s1, ","), name .. ": the same sampled tokens for a seed")
end

do
  local m = model()
  tap.error_like(function() m:generate({ 1 }, 2, { cache = "yes" }) end, "cache",
    "generate: a cache option that is not a boolean is refused")
  tap.error_like(function() m:generate({ 1 }, 2, { on_logits = 3 }) end, "on_logits must be a function",
    "generate: on_logits must be a function")
  tap.error_like(function() m:generate({ 1 }, 2, { temperature = "1" }) end,
    'temperature must be a positive number, got string "1"', "generate: a string temperature is named as one")
  local long = {}
  for i = 1, BLOCK + 3 do long[i] = i end -- a prompt longer than the window: no cache, no error
  tap.is(#m:generate(long, 2, { top_k = 1 }), BLOCK + 5, "generate: a prompt longer than block_size")
  tap.error_like(function() m:generate(venom.tensor({ { 1, 2 }, { 3, 4 } }, "i64"), 2) end,
    "a tensor prompt must be 1%-D %(T%) or %(1, T%), got %(2, 2%)", "generate: a batch of prompts is refused")
  tap.is(#m:generate(venom.tensor({ { 1, 2 } }, "i64"), 2), 4, "generate: a (1, T) tensor prompt")
  -- on_logits may edit the list (masking), but what it leaves must be a
  -- draw's worth of logits, else an error rather than token 1 every time.
  local function edited(f) return function() m:generate({ 1 }, 2, { on_logits = f }) end end
  tap.error_like(edited(function(l) for i = 1, #l do l[i] = -math.huge end end),
    "every logit is %-inf", "generate: on_logits masking every token is an error")
  tap.error_like(edited(function(l) l[#l] = nil end), "expected %d+ logits %(vocab_size%), found",
    "generate: on_logits removing an entry is an error")
  tap.error_like(edited(function(l) l[#l + 1] = 9 end), "expected %d+ logits %(vocab_size%), found",
    "generate: on_logits adding an entry is an error")
  tap.error_like(edited(function(l) l[2] = "x" end), "logit 2 is a string",
    "generate: on_logits writing a string is an error")
  tap.error_like(edited(function(l) l[3] = 0 / 0 end), "logit 3 is %-?nan",
    "generate: a NaN logit is an error")
  -- (once: not wrapped again on the way out, and without a Lua position)
  local ok, err = pcall(edited(function(l) l[3] = 0 / 0 end))
  local _, said = tostring(err):gsub("the weights are not finite", "")
  tap.ok(not ok and said == 1 and err:find("^GPT:generate: sample_logits: logit 3 is") ~= nil
    and err:find("or on_logits wrote it%)$") ~= nil,
    "generate: a NaN logit's error says once where it can come from: " .. tostring(err))
  local masked = m:generate({ 1 }, 3, { on_logits = function(l)
    for i = 1, #l do if i ~= 4 then l[i] = -math.huge end end end })
  tap.is(table.concat(masked, ","), "1,4,4,4", "generate: on_logits masking all but one token draws it")
end

tap.done()
