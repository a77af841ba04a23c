-- GPT:generate keeps its fused decoder (venom.gpt_decoder) on the model
-- between generations: a second generation makes none; and it never runs on
-- stale weights. After a packed weight written in place, a packed weight
-- or γ replaced, a load_ternary, an f32 optimizer step, a load_state_dict
-- and a layer given a forward of its own, the tokens are those of a fresh
-- model holding the same weights (one that never generated), and the
-- decoder is made again; decoder:current() says when a tensor was written
-- or freed.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local GPT = require "models.gpt"
local optim = require "venom.optim"

local CFG = { vocab_size = 64, block_size = 24, n_layer = 2, n_head = 2, n_embd = 32, emb_std = 0.25 }

local function model(bitnet)
  local cfg = {}
  for k, v in pairs(CFG) do cfg[k] = v end
  cfg.bitnet = bitnet
  return GPT(cfg)
end

-- A packed ternary model loaded from m (a BitNet model, packed or not: a
-- packed one exports what it runs).
local function packed_from(m)
  local path = os.tmpname()
  venom.export_ternary(m, path)
  local p = venom.load_ternary(model(true), path)
  os.remove(path)
  return p
end

-- venom.gpt_decoder's calls during fn.
local made = 0
local make = venom.gpt_decoder
venom.gpt_decoder = function(...)
  made = made + 1
  return make(...)
end
local function decoders_made(fn)
  made = 0
  fn()
  return made
end

local function tokens(m)
  venom.manual_seed(3)
  return table.concat(m:generate({ 7, 40, 3 }, 18, { temperature = 0.9 }), ",")
end

-- m's tokens, with the decoder it kept from an earlier generation, against
-- a fresh model's (fresh(m): the same weights, no generation yet).
local function same_as_fresh(m, fresh, what)
  local kept
  local n = decoders_made(function() kept = tokens(m) end)
  tap.is(kept, tokens(fresh(m)), what .. ": the tokens of a fresh model")
  tap.is(n, 1, what .. ": the decoder is made again")
end

tap.plan(23)

venom.manual_seed(11)
local bit = model(true)
local pm = packed_from(bit)
local first = tokens(pm)
local n = decoders_made(function() tap.is(tokens(pm), first, "packed: a second generation, the same tokens") end)
tap.is(n, 0, "packed: a second generation makes no decoder")
tap.ok(rawget(pm, "_fused").decoder:current(), "decoder:current() before any write")

-- A packed weight written in place (another layer's codes, same shape).
venom.no_grad(function() pm.blocks[1].attn.proj.packed:copy_(pm.blocks[2].attn.proj.packed) end)
tap.ok(not rawget(pm, "_fused").decoder:current(), "decoder:current() is false after a copy_ into a packed weight")
same_as_fresh(pm, packed_from, "packed weight written in place")

-- An on_logits that writes a packed weight (and one that replaces an f32
-- one) in the middle of a generation: the later steps read the new
-- weights, as the ops do (the decoder's re-laid copy would be stale).
local function logits_with_write(m, fused, write)
  local seen, steps = {}, 0
  venom.manual_seed(3)
  local out = m:generate({ 7, 40 }, 8, { fused = fused, temperature = 0.9, on_logits = function(l)
    steps = steps + 1
    if steps == 3 then write(m) end
    seen[#seen + 1] = table.concat(l, ",")
  end })
  return table.concat(seen, ";") .. "|" .. table.concat(out, ",")
end
local donor = pm.blocks[2].mlp.fc.packed:clone()
local function write_packed(m) venom.no_grad(function() m.blocks[1].mlp.fc.packed:copy_(donor) end) end
tap.is(logits_with_write(packed_from(pm), true, write_packed), logits_with_write(packed_from(pm), false, write_packed),
  "a packed weight written by on_logits mid-generation: the logits of the ops")
local function replace_f32(m) m.blocks[2].mlp.fc.weight = m.blocks[2].mlp.fc.weight * 2 end
venom.manual_seed(14)
local f1 = model()
local f2 = model()
f2:load_state_dict(f1:state_dict())
tap.is(logits_with_write(f1, true, replace_f32), logits_with_write(f2, false, replace_f32),
  "an f32 weight replaced by on_logits mid-generation: the logits of the ops")

-- A packed weight replaced, then a γ replaced (a number: the decoder keeps a copy).
pm.blocks[2].mlp.fc.packed = pm.blocks[1].mlp.fc.packed:clone()
same_as_fresh(pm, packed_from, "packed weight replaced")
pm.blocks[1].mlp.proj.gamma = pm.blocks[1].mlp.proj.gamma * 3
same_as_fresh(pm, packed_from, "gamma replaced")

-- Another model's weights loaded into this one.
venom.manual_seed(12)
local other = model(true)
local path = os.tmpname()
venom.export_ternary(other, path)
venom.load_ternary(pm, path)
os.remove(path)
same_as_fresh(pm, packed_from, "load_ternary")
tap.is(tokens(pm), tokens(packed_from(other)), "load_ternary: the loaded model's tokens")

-- An f32 model: an optimizer step, then a load_state_dict.
local function f32_from(m)
  local f = model()
  f:load_state_dict(m:state_dict())
  return f
end
venom.manual_seed(11)
local fm = model()
tokens(fm)
local opt = optim.AdamW(fm:parameters(), { lr = 1e-2 })
local x = venom.tensor({ { 7, 40, 3, 9, 12 } }, "i64")
local y = venom.tensor({ { 40, 3, 9, 12, 5 } }, "i64")
fm:loss(x, y):backward()
opt:step()
same_as_fresh(fm, f32_from, "f32 optimizer step")
venom.manual_seed(13)
fm:load_state_dict(model():state_dict())
same_as_fresh(fm, f32_from, "f32 load_state_dict")

-- A layer given a forward of its own (as GMP's shadow does) steps through
-- the ops: the tokens of the ops, and no decoder.
local fc = fm.blocks[1].mlp.fc
local Linear = getmetatable(fc)
fc.forward = function(self, h) return Linear.forward(self, h) * 0.5 end
local ops
n = decoders_made(function() ops = tokens(fm) end)
venom.manual_seed(3)
tap.is(ops, table.concat(fm:generate({ 7, 40, 3 }, 18, { temperature = 0.9, fused = false }), ","),
  "a forward of its own: the ops' tokens")
tap.ok(n == 0 and rawget(fm, "_fused") == nil, "a forward of its own: no decoder made or kept")
fc.forward = nil

-- A weight freed after a generation: the next one says so.
tokens(fm)
local dec = rawget(fm, "_fused").decoder
fm.blocks[2].attn.qkv.bias:free()
tap.ok(not dec:current(), "decoder:current() is false after a weight was freed")
tap.error_like(function() tokens(fm) end, "freed", "a freed weight: the next generation is an error")
tap.done()
