-- models/gpt.lua with `moe`: every `every`-th block's MLP is an nn.MoE,
-- the training loss adds the balance losses (the eval loss does not), a
-- few steps lower the loss for each gate, model:moe_stats() reports each
-- MoE layer, mlp_layers() names the experts' projections (GMP can find
-- them), and bad moe options are errors that name them.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local optim = require "venom.optim"
local GPT = require "models.gpt"

venom.manual_seed(5)

local base = { vocab_size = 16, block_size = 8, n_layer = 2, n_head = 2, n_embd = 16 }
local function config(moe)
  local c = { moe = moe }
  for k, v in pairs(base) do c[k] = v end
  return c
end

local idx = venom.randint(1, 17, { 4, 8 }, "i64")
local tgt = venom.randint(1, 17, { 4, 8 }, "i64")

for _, moe in ipairs({ { experts = 4, k = 1, gate = "topk" }, { experts = 4, k = 2, gate = "topk", every = 1 },
                       { experts = 4, k = 1, gate = "dts", anneal_steps = 5, expert = { V = 8, M = 8 } } }) do
  local name = ("%s k=%d every=%d%s"):format(moe.gate, moe.k, moe.every or 2, moe.expert and " V:N:M" or "")
  local model = GPT(config(moe))
  tap.ok(model.blocks[1].mlp.experts == nil == (moe.every == nil), name .. ": block 1 is an MoE only with every = 1")
  tap.ok(model.blocks[2].mlp.experts ~= nil, name .. ": block 2 is an MoE")
  local opt = optim.AdamW(model:parameters(), { lr = 3e-3 })
  local first, last
  for step = 1, 12 do
    local loss = model:loss(idx, tgt)
    opt:zero_grad()
    loss:backward()
    opt:step()
    if step == 1 then first = loss:item() end
    last = loss:item()
  end
  tap.ok(last < first, ("%s: 12 steps lower the loss (%.3f → %.3f)"):format(name, first, last))
  local stats = model:moe_stats()
  tap.is(#stats, moe.every == 1 and 2 or 1, name .. ": one stats row per MoE layer")
  local s = stats[#stats]
  local routed = 0
  for _, v in ipairs(s.load) do routed = routed + v end
  tap.ok(s.block == 2 and #s.load == 4 and s.balance >= 1 and s.experts_per_token >= moe.k
    and math.abs(routed - s.experts_per_token * 32) < 1e-9 and s.dropped_fraction >= 0,
    ("%s: stats (balance %.2f, %.2f experts per token, %.3f dropped)"):format(name, s.balance,
      s.experts_per_token, s.dropped_fraction))
  -- The training loss is the eval loss plus the balance losses.
  local aux = 0
  local train_loss = venom.no_grad(function() return model:loss(idx, tgt):item() end)
  for i = 1, 2 do
    local a = model.blocks[i].mlp.aux_loss
    if a then aux = aux + a:item() end
  end
  model:eval()
  local eval_loss = venom.no_grad(function() return model:loss(idx, tgt):item() end)
  if moe.gate == "topk" then -- (DTS routes differently in training: Gumbel noise)
    tap.near(train_loss - eval_loss, aux, 1e-5, name .. ": training loss = eval loss + balance losses")
  else
    tap.is(model:moe_stats()[1].experts_per_token, 1, name .. ": eval routes top-1")
  end
  local paths = model:mlp_layers()
  tap.ok(paths[#paths] == "blocks.2.mlp.experts.4.proj", name .. ": mlp_layers names the experts")
end

tap.error_like(function() GPT(config({ every = 0 })) end, "every must be", "moe.every = 0")
tap.error_like(function() GPT(config({ experts = 2, k = 3 })) end, "k = 3 experts per token", "moe.k > experts")
tap.error_like(function() GPT(config({ capacity_factor = -1 })) end, "capacity_factor", "moe capacity ≤ 0")
tap.error_like(function() GPT(config({ routers = 2 })) end, "GPT: moe: unknown option 'routers'", "unknown moe option")

tap.done()
