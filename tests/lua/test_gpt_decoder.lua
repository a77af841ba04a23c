-- The fused decoding step (venom.gpt_decoder, engine/decode.c) that
-- GPT:generate runs for f32 and packed ternary models: every step's logits
-- bit for bit those of the step through the ops (fused = false), for a
-- LayerNorm f32 model and a packed BitNet model (RMSNorm, SubLN) whose
-- widths are not multiples of the packing's 128 columns, through the slide
-- past block_size; the fused step really replaces the ops; a layer with a
-- forward of its own (GMP's shadow) or a strided weight is left to the
-- ops; the tokens a fixed seed gives are those the code before the fused
-- decoder gave; a fused generation makes no mode switch; a temperature of
-- 1e-310 is greedy; bad specs and
-- steps are errors that name what is wrong, and a refused decoder:next
-- changes nothing; decoder:generate gives decoder:next's tokens.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local GPT = require "models.gpt"
local optim = require "venom.optim"
local prune = require "venom.prune"

local function model(extra)
  local cfg = { vocab_size = 64, block_size = 24, n_layer = 2, n_head = 2, n_embd = 32, emb_std = 0.25 }
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

-- Tokens, every step's logits (with hook; without, the fused path draws
-- from the decoder's own logits) and the calls of the single-row attention
-- op (the ops' step) of one generation.
local function run(m, fused, n, hook)
  local steps, attn = {}, 0
  local op = venom.causal_self_attention_last
  venom.causal_self_attention_last = function(...)
    attn = attn + 1
    return op(...)
  end
  venom.manual_seed(5)
  local ok, out = pcall(m.generate, m, { 7, 40, 3 }, n, { temperature = 0.9, fused = fused,
    on_logits = hook ~= false and function(l) steps[#steps + 1] = l end or nil })
  venom.causal_self_attention_last = op
  assert(ok, out)
  return out, steps, attn
end

-- The first step and logit where two runs differ at all, or nil.
local function first_difference(a, b)
  if #a ~= #b then return "step count" end
  for s = 1, #a do
    for i = 1, #a[s] do
      if a[s][i] ~= b[s][i] then
        return ("step %d, logit %d: %.9g against %.9g"):format(s, i, a[s][i], b[s][i])
      end
    end
  end
end

-- What the generation above gave before the fused decoder existed (models/
-- gpt.lua stepping through the ops, main at 263124f).
local BEFORE = {
  f32 = { 7, 40, 3, 3, 34, 34, 34, 34, 47, 47, 47, 47, 47, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
          64, 64, 46, 46, 46, 46, 46, 46 },
  packed = { 7, 40, 3, 3, 26, 43, 43, 43, 46, 46, 46, 46, 46, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
             64, 64, 36, 36, 36, 36, 36, 36 },
}

tap.plan(43)

venom.manual_seed(11)
local models = { f32 = model() }
venom.manual_seed(11)
models.packed = packed_ternary()
for _, kind in ipairs({ "f32", "packed" }) do
  local m = models[kind]
  local ops_out, ops_steps, ops_attn = run(m, false, 28) -- 3 + 28 > 24: the last 7 steps slide
  local out, steps, attn = run(m, true, 28)
  tap.is(first_difference(steps, ops_steps), nil, kind .. ": every step's logits equal the ops' bit for bit")
  tap.is(table.concat(out, ","), table.concat(ops_out, ","), kind .. ": the same tokens")
  -- the ops: 24 positions (the 3 of the prompt too) × 2 blocks; fused: none
  tap.ok(ops_attn == 48 and attn == 0,
    ("%s: the fused step replaces the ops' (%d and %d single-row attentions)"):format(kind, ops_attn, attn))
  tap.is(table.concat(out, ","), table.concat(BEFORE[kind], ","), kind .. ": the tokens of the code before")
  local plain = run(m, true, 28, false)
  tap.is(table.concat(plain, ","), table.concat(BEFORE[kind], ","),
    kind .. ": the tokens of the code before, drawn in C from the decoder's logits")
end

-- A layer with a forward of its own is left to the ops: GMP's V:N:M shadow
-- computes an nn.Linear's output with W⊙m while W stays dense (the decoder,
-- reading W, gave other logits).
do
  venom.manual_seed(11)
  local sm = model()
  local g = prune.GMP(sm, { optimizer = optim.AdamW(sm:parameters(), { lr = 1e-3 }), pattern = "32:2:8",
                            layers = sm:mlp_layers(), t0 = 0, n = 3, dt = 1 })
  g:step() -- the first event: the shadow's masked forward
  local _, ops_steps = run(sm, false, 4)
  local _, steps = run(sm, true, 4)
  tap.is(first_difference(steps, ops_steps), nil, "GMP's V:N:M shadow: the logits of the ops")
  -- A weight with strides of its own (the decoder reads row-major ones only)
  -- also steps through the ops, as it did before the decoder.
  local nc = model()
  nc.blocks[2].mlp.fc.weight = nc.blocks[2].mlp.fc.weight:t():contiguous():t()
  local ops_out = run(nc, false, 4)
  tap.is(table.concat(run(nc, true, 4), ","), table.concat(ops_out, ","), "a transposed weight: the ops' tokens")
  -- The attention's own n_head is the one the ops use: blocks that differ step through them.
  local heads = model()
  heads.blocks[2].attn.n_head = 4
  _, ops_steps = run(heads, false, 4)
  _, steps = run(heads, true, 4)
  tap.is(first_difference(steps, ops_steps), nil, "blocks of different n_head: the logits of the ops")
end

-- The mode switch (eval, then train to restore: a walk of every module)
-- only where a module's forward runs: a fused generation within the window
-- makes none; through the ops, one of each, and every module is back in
-- training mode.
do
  local m, calls = models.f32, {}
  m.train = function(self, mode)
    calls[#calls + 1] = mode
    return GPT.train(self, mode)
  end
  m:train()
  calls = {}
  m:generate({ 7, 40, 3 }, 5)
  tap.is(#calls, 0, "a fused generation does not switch the mode")
  m:generate({ 7, 40, 3 }, 5, { fused = false })
  tap.ok(#calls == 2 and calls[1] == false and calls[2] == true and m.blocks[2].mlp.fc.training,
    "through the ops: eval, then training mode restored")
  m.train = nil
end

-- A temperature whose inverse overflows a double (1e-310) is greedy: the
-- tokens of top_k = 1, fused and through the ops (the draw gave the first
-- token every time).
do
  local m, prompt = models.f32, { 7, 40, 3 }
  local function tokens(o)
    venom.manual_seed(5)
    return table.concat(m:generate(prompt, 8, o), " ")
  end
  local greedy = tokens({ top_k = 1 })
  tap.ok(tokens({ temperature = 1e-310 }) == greedy and tokens({ temperature = 1e-310, fused = false }) == greedy,
    "temperature 1e-310: the greedy tokens, fused and through the ops")
end

-- Bad input: a spec built from the f32 model, broken one field at a time.
local m = models.f32
local caches = { venom.zeros(1, 24, 96), venom.zeros(1, 24, 96) }
local function spec(edit)
  local s = { wte = m.wte.weight, wpe = m.wpe.weight, n_head = 2, blocks = {},
              ln_f = { weight = m.ln_f.weight, bias = m.ln_f.bias, eps = 1e-5 } }
  for i = 1, 2 do
    local b = m.blocks[i]
    s.blocks[i] = { ln1 = { weight = b.ln1.weight, bias = b.ln1.bias }, ln2 = { weight = b.ln2.weight },
                    qkv = { weight = b.attn.qkv.weight, bias = b.attn.qkv.bias },
                    attn_proj = { weight = b.attn.proj.weight }, fc = { weight = b.mlp.fc.weight },
                    mlp_proj = { weight = b.mlp.proj.weight, bias = b.mlp.proj.bias }, cache = caches[i] }
  end
  if edit then edit(s) end
  return s
end
local dec = venom.gpt_decoder(spec())
dec:step(1, 1)
tap.is(#dec:logits(), 64, "a valid spec makes a decoder; a step gives vocab_size logits")
tap.error_like(function() dec:step(65, 1) end, "token 65 at position 1, expected a token in 1..64",
  "a token past the vocabulary")
tap.error_like(function() dec:step(1, 25) end, "position 25, expected .* 1..24", "a position past block_size")
-- A bad temperature or top_k is refused before the step: the cache row and
-- the RNG's next draw are what they were (the step ran and a draw was spent).
venom.manual_seed(3)
local want_u = venom.rand(1):item()
venom.manual_seed(3)
tap.error_like(function() dec:next(5, 2, 0) end, "temperature 0, top_k 0: expected a positive",
  "next: temperature 0")
tap.error_like(function() dec:next(5, 2, 1, -1) end, "top_k %-1: expected", "next: top_k -1")
tap.ok(caches[1]:narrow(2, 2, 1):abs():sum():item() == 0 and venom.rand(1):item() == want_u,
  "next with bad options leaves the cache and the RNG as they were")
-- decoder:generate: n draws of decoder:next in one call, the same tokens
-- for the same seed (top_k and not), up to the last position.
for _, top_k in ipairs({ false, 5 }) do
  venom.manual_seed(11)
  local one = { 7, 3 }
  for pos = 2, 24 do one[pos + 1] = dec:next(one[pos], pos, 0.7, top_k or nil) end
  venom.manual_seed(11)
  local all = { 7, 3 }
  dec:generate(all, 23, 0.7, top_k or nil)
  tap.is(table.concat(all, ","), table.concat(one, ","),
    "generate(out, n) gives decoder:next's tokens" .. (top_k and " (top_k)" or ""))
end
tap.error_like(function() dec:generate({ 7, 3 }, 24, 1) end,
  "generate 24 tokens after 2, expected .* within block_size 24", "generate past block_size")
tap.error_like(function() dec:generate({ 7, "x" }, 1, 1) end, "out%[2%] is a string, expected a token id in 1..64",
  "generate from a list whose last entry is not a token")
-- a whole number past int64 was cast to one (undefined behaviour) before the check
tap.error_like(function() dec:generate({ 2 ^ 63 }, 1, 1) end, "out%[1%] is 9.22.*e%+18, expected a token id",
  "generate from a token past 2^53")
tap.error_like(function() dec:generate({ 7, 1.5 }, 1, 1) end, "out%[2%] is 1.5, expected a token id",
  "generate from a fractional token")
dec:free()
tap.error_like(function() dec:step(1, 1) end, "freed decoder", "a step on a freed decoder")
tap.error_like(function() dec:generate({ 1 }, 1, 1) end, "freed decoder", "generate on a freed decoder")
local function bad(edit) return function() venom.gpt_decoder(spec(edit)) end end
tap.error_like(bad(function(s) s.blocks[2].fc.weight = venom.zeros(128, 16) end),
  "block 2 of 2: fc weight of shape %(128, 16%), expected %(128, 32%)",
  "a weight of the wrong shape is named")
tap.error_like(bad(function(s) s.blocks[1].qkv.packed = venom.zeros(96, 32, "u8") end),
  "block 1 of 2: qkv has both", "weight and packed together")
tap.error_like(bad(function(s) s.blocks[1].qkv = { packed = venom.zeros(96, 32, "u8") } end),
  "block 1 of 2: qkv gamma = %-?nan, expected a finite", "packed weights without their gamma")
tap.error_like(bad(function(s) s.blocks[1].cache = venom.zeros(1, 24, 95) end),
  "block 1 of 2: cache of shape %(1, 24, 95%), expected %(1, 24, 96%)", "a cache of the wrong width")
tap.error_like(bad(function(s)
  for i = 1, 2 do
    s.blocks[i].fc, s.blocks[i].mlp_proj = { weight = venom.zeros(0, 32) }, { weight = venom.zeros(32, 0) }
  end
end), "hidden width %(fc's rows%) is 0", "an MLP of width 0")
-- A step writes into the caches: one that shares memory with another
-- tensor of the spec would overwrite it.
tap.error_like(bad(function(s) s.blocks[2].cache = s.blocks[1].cache end),
  "block 1 of 2: cache shares memory with another tensor", "one cache for two blocks")
tap.error_like(bad(function(s) s.wpe = caches[2]:reshape(24 * 96):narrow(1, 97, 24 * 32):reshape(24, 32) end),
  "block 2 of 2: cache shares memory", "a weight inside a cache")
tap.error_like(bad(function(s) s.n_head = nil end), "n_head: expected a whole number, found nil",
  "n_head missing")
tap.error_like(bad(function(s) s.n_head = 5 end),
  "n_head = 5, expected a divisor of C = 32", "n_head not dividing C")
tap.error_like(bad(function(s) s.blocks[2].ln1 = "norm" end),
  "blocks%[2%]%.ln1: expected a table, found string", "a field of the wrong Lua type")
-- A decoder reads the tensors it was given at every step: one freed since is an error, not a crash.
local w = m.wpe.weight:clone()
dec = venom.gpt_decoder(spec(function(s) s.wpe = w end))
w:free()
tap.error_like(function() dec:step(1, 1) end, "a tensor it reads was freed",
  "a tensor freed after the decoder was made")
-- A spec whose fields are computed (__index) hands over tensors nothing
-- else refers to, and a collection may come between two reads: each is
-- kept alive until the decoder holds it (they were freed under its pointers).
local function computed(t)
  if type(t) ~= "table" or venom.is_tensor(t) then return t end
  local fields = {}
  for k, v in pairs(t) do fields[k] = v end
  return setmetatable({}, { __index = function(_, k)
    collectgarbage()
    local v = fields[k]
    return venom.is_tensor(v) and k ~= "cache" and v:clone() or computed(v)
  end })
end
local s = spec()
local blocks = { computed(s.blocks[1]), computed(s.blocks[2]) } -- a list: read with rawgeti
s.blocks = nil
s = computed(s)
rawset(s, "blocks", blocks)
dec = venom.gpt_decoder(s)
dec:step(1, 1)
local ref = venom.gpt_decoder(spec())
ref:step(1, 1)
tap.is(first_difference({ dec:logits() }, { ref:logits() }), nil,
  "a spec of computed fields: the logits of the plain spec")
tap.error_like(function() venom.sample_logits({ 1, 0 / 0 }, 1, nil, 0.5) end, "logit 2 is %-?nan",
  "sample_logits: a NaN logit, by its 1-based position")
for _, c in ipairs(caches) do c:free() end
tap.done()
