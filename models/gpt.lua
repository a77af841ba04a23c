--- models/gpt.lua — a GPT-2-style decoder-only language model (Radford et
-- al. 2019): learned token and position embeddings, n_layer pre-LayerNorm
-- blocks of causal self-attention and a GELU MLP, a final LayerNorm, and an
-- output projection tied to the token embedding (Press & Wolf 2017).
--
--     local GPT = require "models.gpt"
--     local model = GPT({vocab_size = 256, block_size = 128, n_layer = 4,
--                        n_head = 4, n_embd = 256, dropout = 0,
--                        mlp = {V = 64, M = 8},        -- optional: V:2:M MLP layers
--                        attn = {V = 64, M = 8},       -- optional: V:2:M attention projections
--                        moe = {experts = 8, k = 1, gate = "topk", every = 2}, -- optional
--                        activation = "gelu"})         -- or "relu", "relu2" (squared ReLU)
--     -- or bitnet = true: BitNet b1.58 (every block Linear an nn.BitLinear,
--     -- the norms nn.RMSNorm; embeddings and the tied head stay f32)
--     local logits = model(idx)                        -- idx i64 (B, T) → (B, T, vocab)
--     local loss = model:loss(idx, targets)            -- mean cross-entropy
--     local out = model:generate({72, 105}, 100, {temperature = 0.8, top_k = 40})
--
-- Weights start as in GPT-2: N(0, 0.02) for embeddings and projections,
-- N(0, 0.02/√(2·n_layer)) for the projections that write into the residual
-- stream, zero biases. emb_std = 0.02 is the embeddings' std (token and
-- position): a BitNet block writes into the residual stream at a scale set
-- by its RMSNorm and γ, not by its input (at width 128, 0.08–0.15 RMS per
-- block against 0.028 for the embeddings at 0.02), so BitNet models train
-- better with larger embeddings (tutorial 5 uses 0.2; bench/RESULTS.md). With `mlp`, each block's two MLP projections are
-- nn.SparseLinear layers (venom.sparse) holding the V:2:M magnitude pruning
-- of those initial weights; without it they are nn.Linear, which
-- venom.prune.GMP can prune during training (gpt:mlp_layers() names them).
-- `attn` does the same for the attention's projections, as VENOM's papers
-- sparsify every linear layer of a block: the fused qkv projection (C → 3C,
-- one V:2:M matrix of 3C rows, so q, k and v share its row blocks) and the
-- output projection (C → C); gpt:attn_layers() names them for GMP. The
-- embeddings and the tied output projection stay dense either way.
-- With `moe`, the MLP of every `every`-th block (blocks every, 2·every, ...)
-- is an nn.MoE layer (lua/venom/nn_moe.lua) of `experts` copies of that MLP
-- and a router; the other keys of `moe` are nn.MoE's options (k, gate,
-- capacity_factor, alpha, z_loss, tau_max, tau_min, anneal_steps,
-- threshold, expert = {V, M} for V:2:M experts, expert_parallel to spread
-- the experts over the ranks of a distributed run). model:loss adds their
-- balance losses in training; model:moe_stats() reports their routing.
--
-- With activation "relu" or "relu2" (max(x, 0)², So et al. 2021, "Primer")
-- the MLP runs as one activation-sparse op (venom.act_sparse_mlp: its second
-- projection and the whole backward skip the hidden units that are zero in
-- a tile of tokens) while its projections are dense nn.Linear layers; the
-- measured sparsity is read with gpt:activation_stats().
local venom = require "venom"
local nn = require "venom.nn"
local util = require "venom.util"

-- util.fail blames the first caller outside lua/venom/; skip the frames of
-- this file as well, so that a bad option points at the user's line.
util.add_internal_source("models[/\\]gpt%.lua$")
local fail = util.fail
local check_options = util.check_options

-- Draws a (rows, cols) N(0, std) tensor from the engine RNG.
local function normal(std, rows, cols)
  local z = venom.randn(rows, cols)
  local t = z * std
  z:free()
  return t
end

-- Re-initialises a Linear as GPT-2 does: N(0, std) weight, zero bias.
local function init_linear(lin, std)
  venom.no_grad(function()
    local w = normal(std, lin.out_features, lin.in_features)
    lin.weight:copy_(w)
    w:free()
    if lin.bias then lin.bias:fill_(0) end
  end)
  return lin
end

-- A dense projection in_f → out_f: nn.Linear, or nn.BitLinear (BitNet b1.58,
-- no bias, its own RMSNorm on the input) when cfg.bitnet.
local function dense(cfg, in_f, out_f, std)
  if cfg.bitnet then return nn.BitLinear(in_f, out_f, { std = std }) end
  return init_linear(nn.Linear(in_f, out_f), std)
end

-- The norm of a block and the final one: LayerNorm, or RMSNorm for BitNet.
local function norm(cfg)
  return cfg.bitnet and nn.RMSNorm(cfg.n_embd) or nn.LayerNorm(cfg.n_embd)
end

-- A projection in_f → out_f: dense, or V:2:M sparse when sp = {V, M} is given
-- (cfg.mlp for the MLP's, cfg.attn for the attention's).
local function projection(cfg, sp, in_f, out_f, std)
  if not sp then return dense(cfg, in_f, out_f, std) end
  local w = normal(std, out_f, in_f)
  local layer = nn.SparseLinear(in_f, out_f, { V = sp.V, M = sp.M, weight = w })
  w:free()
  venom.no_grad(function() layer.bias:fill_(0) end)
  return layer
end

-- Causal self-attention ------------------------------------------------------------

local Attention = nn.Module:extend("CausalSelfAttention")

function Attention:__init(cfg, resid_std)
  nn.Module.__init(self)
  local C = cfg.n_embd
  self.n_head, self.n_embd = cfg.n_head, C
  self:add_module("qkv", projection(cfg, cfg.attn, C, 3 * C, 0.02))
  self:add_module("proj", projection(cfg, cfg.attn, C, C, resid_std))
  self:add_module("drop", nn.Dropout(cfg.dropout))
end

-- x (B, T, C) → (B, T, C). The op splits the fused projection into heads
-- and merges them back itself (on CUDA its kernels read the heads out of
-- qkv through strides: no transpose copies).
function Attention:forward(x)
  local y = venom.causal_self_attention(self.qkv(x), self.n_head)
  return self.drop(self.proj(y))
end

function Attention:extra_repr()
  return ("n_head=%d"):format(self.n_head)
end

-- MLP ---------------------------------------------------------------------------------

local MLP = nn.Module:extend("MLP")
local dynamic = require "venom.nn_dynamic"

function MLP:__init(cfg, resid_std)
  nn.Module.__init(self)
  local C = cfg.n_embd
  self:add_module("fc", projection(cfg, cfg.mlp, C, 4 * C, 0.02))
  if cfg.activation == "gelu" then self:add_module("gelu", nn.GELU()) end
  self:add_module("proj", projection(cfg, cfg.mlp, 4 * C, C, resid_std))
  self:add_module("drop", nn.Dropout(cfg.dropout))
  rawset(self, "activation", cfg.activation)
  rawset(self, "_stats", dynamic.new_stats())
end

-- Looks the layers up on every call: GMP may have replaced them. With
-- relu/relu2 and dense projections, one activation-sparse op; with
-- projections that are no longer plain nn.Linear, the same maths in steps.
-- On the GPU a dense fc's bias add is fused into the GELU (venom.bias_gelu:
-- one pass instead of two); the CPU keeps the unfused ops, whose numbers
-- the tutorials' recorded runs were made with. Two nn.SparseLinear
-- projections on the CPU run as one op (venom.vnm_mlp: the same numbers
-- up to the summation order of fc's values gradient, with the hidden
-- activation kept in the sparse kernels' layout).
function MLP:forward(x)
  local act = self.activation
  local fc, proj = self.fc, self.proj
  if act == "gelu" then
    if fc.__name == "Linear" and fc.bias and x:device() == "cuda" then
      return self.drop(proj(venom.bias_gelu(venom.linear(x, fc.weight), fc.bias)))
    end
    if fc.__name == "SparseLinear" and proj.__name == "SparseLinear" and x:device() == "cpu" then
      return self.drop(venom.vnm_mlp(x, fc.matrix, fc.values, fc.bias, proj.matrix, proj.values,
                                     proj.bias))
    end
    return self.drop(proj(self.gelu(fc(x))))
  end
  if fc.__name == "Linear" and proj.__name == "Linear" then
    local y, st = venom.act_sparse_mlp(x, fc.weight, fc.bias, proj.weight, proj.bias, act)
    dynamic.add_stats(self._stats, st)
    return self.drop(y)
  end
  local h = fc(x):relu()
  if act == "relu2" then h = h * h end
  return self.drop(proj(h))
end

-- Block -------------------------------------------------------------------------------

local Block = nn.Module:extend("Block")

-- An nn.MoE whose experts are this file's MLP (V:2:M with moe.expert) and
-- whose router starts as GPT-2's projections do.
local function moe_layer(cfg, resid_std)
  local opts = { new_expert = function()
    return MLP({ n_embd = cfg.n_embd, dropout = cfg.dropout, mlp = cfg.moe.expert,
                 activation = cfg.activation, bitnet = cfg.bitnet }, resid_std)
  end }
  for k, v in pairs(cfg.moe) do
    if k ~= "every" then opts[k] = v end
  end
  local moe = nn.MoE(cfg.n_embd, 4 * cfg.n_embd, opts)
  init_linear(moe.router, 0.02)
  return moe
end

function Block:__init(cfg, resid_std, use_moe)
  nn.Module.__init(self)
  self:add_module("ln1", norm(cfg))
  self:add_module("attn", Attention(cfg, resid_std))
  self:add_module("ln2", norm(cfg))
  self:add_module("mlp", use_moe and moe_layer(cfg, resid_std) or MLP(cfg, resid_std))
end

-- Pre-LayerNorm residual block: x + attn(ln1(x)), then + mlp(ln2(·)).
function Block:forward(x)
  local h = x + self.attn(self.ln1(x))
  return h + self.mlp(self.ln2(h))
end

-- GPT ---------------------------------------------------------------------------------

local GPT = nn.Module:extend("GPT")

local DEFAULTS = { vocab_size = 256, block_size = 128, n_layer = 4, n_head = 4, n_embd = 256,
                   dropout = 0, activation = "gelu", emb_std = 0.02 }

local function check_config(opts)
  local who = "GPT"
  opts = check_options(opts, { "vocab_size", "block_size", "n_layer", "n_head", "n_embd",
                                    "dropout", "mlp", "attn", "moe", "activation",
                                    "bitnet", "emb_std" }, who)
  local cfg = {}
  for k, v in pairs(DEFAULTS) do
    if opts[k] == nil then cfg[k] = v else cfg[k] = opts[k] end
  end
  for _, k in ipairs({ "vocab_size", "block_size", "n_layer", "n_head", "n_embd" }) do
    util.check_int(cfg[k], k, { min = 1, who = who })
  end
  if cfg.n_embd % cfg.n_head ~= 0 then
    fail(("%s: n_embd (%d) must be a multiple of n_head (%d)"):format(who, cfg.n_embd, cfg.n_head))
  end
  if type(cfg.dropout) ~= "number" or not (cfg.dropout >= 0 and cfg.dropout < 1) then
    fail(("%s: dropout must be a number in [0, 1), got %s"):format(who, tostring(cfg.dropout)))
  end
  local a = cfg.activation
  if a ~= "gelu" and a ~= "relu" and a ~= "relu2" then
    fail(('%s: activation %s, expected "gelu", "relu" or "relu2"'):format(who, tostring(a)))
  end
  for _, k in ipairs({ "mlp", "attn" }) do -- {V, M}, checked by nn.SparseLinear
    if opts[k] ~= nil then
      local m = check_options(opts[k], { "V", "M" }, "GPT: " .. k)
      cfg[k] = { V = m.V or 64, M = m.M or 8 }
    end
  end
  if type(cfg.emb_std) ~= "number" or not (cfg.emb_std > 0 and cfg.emb_std < math.huge) then
    fail(("%s: emb_std must be a positive number, got %s"):format(who, tostring(cfg.emb_std)))
  end
  if opts.bitnet ~= nil and type(opts.bitnet) ~= "boolean" then
    fail(("%s: bitnet must be true or false, got %s"):format(who, tostring(opts.bitnet)))
  end
  cfg.bitnet = opts.bitnet or nil
  for _, k in ipairs({ "mlp", "attn" }) do
    if cfg.bitnet and cfg[k] then
      fail(("%s: bitnet with %s (ternary V:N:M layers) is not implemented; use one or the other")
        :format(who, k))
    end
  end
  if opts.moe ~= nil then
    local m = check_options(opts.moe, { "experts", "k", "gate", "every", "capacity_factor", "alpha",
      "z_loss", "tau_max", "tau_min", "anneal_steps", "threshold", "expert", "expert_parallel" },
      "GPT: moe")
    cfg.moe = {}
    for k, v in pairs(m) do cfg.moe[k] = v end
    cfg.moe.every = m.every or 2
    util.check_int(cfg.moe.every, "every", { min = 1, max = cfg.n_layer, who = "GPT: moe" })
    if cfg.bitnet and cfg.moe.expert then
      fail(("%s: bitnet with moe.expert (ternary V:N:M experts) is not implemented; use one or the other"):format(who))
    end
  end
  return cfg
end

--- Builds the model; opts as in the example above (those are the defaults,
-- without `mlp` and `attn`). Errors name the bad option.
function GPT:__init(opts)
  nn.Module.__init(self)
  local cfg = check_config(opts)
  self.config = cfg
  local resid_std = 0.02 / math.sqrt(2 * cfg.n_layer)
  self:add_module("wte", nn.Embedding(cfg.vocab_size, cfg.n_embd))
  self:add_module("wpe", nn.Embedding(cfg.block_size, cfg.n_embd))
  venom.no_grad(function()
    self.wte.weight:mul_(cfg.emb_std)
    self.wpe.weight:mul_(cfg.emb_std)
  end)
  self:add_module("drop", nn.Dropout(cfg.dropout))
  local blocks = nn.Sequential()
  for i = 1, cfg.n_layer do
    blocks:add(Block(cfg, resid_std, cfg.moe ~= nil and i % cfg.moe.every == 0))
  end
  self:add_module("blocks", blocks)
  self:add_module("ln_f", norm(cfg))
  -- Position ids 1..block_size, narrowed to the sequence length in forward.
  self.positions = venom.arange(1, cfg.block_size + 1, 1, "i64")
end

-- Module:to moves the parameters; the position ids follow them here.
function GPT:_to_device(device)
  self.positions = self.positions:to(device)
end

--- The dotted module paths of the MLP projections ("blocks.1.mlp.fc", ...;
-- an MoE block's are its experts', "blocks.2.mlp.experts.1.fc", ...), for
-- venom.prune.GMP's `layers` option.
function GPT:mlp_layers()
  local out = {}
  for i = 1, self.config.n_layer do
    local mlp = self.blocks[i].mlp
    local prefixes = { ("blocks.%d.mlp"):format(i) }
    if mlp.experts then
      prefixes = {}
      for e = 1, mlp.config.experts do prefixes[e] = ("blocks.%d.mlp.experts.%d"):format(i, e) end
    end
    for _, p in ipairs(prefixes) do
      out[#out + 1] = p .. ".fc"
      out[#out + 1] = p .. ".proj"
    end
  end
  return out
end

--- The dotted module paths of the attention projections ("blocks.1.attn.qkv",
-- "blocks.1.attn.proj", ...), for venom.prune.GMP's `layers` option (with
-- mlp_layers() to prune every linear layer of the blocks).
function GPT:attn_layers()
  local out = {}
  for i = 1, self.config.n_layer do
    out[#out + 1] = ("blocks.%d.attn.qkv"):format(i)
    out[#out + 1] = ("blocks.%d.attn.proj"):format(i)
  end
  return out
end

-- The nn.MoE layers with their block numbers, in order.
local function moe_layers(self)
  local out = {}
  for i = 1, self.config.n_layer do
    local mlp = self.blocks[i].mlp
    if mlp.experts then out[#out + 1] = { block = i, layer = mlp } end
  end
  return out
end

--- The routing of each MoE layer in the last forward pass, a list of
-- {block, load (tokens routed to each expert), kept (after the capacity
-- drop), balance (max load / mean load), experts_per_token,
-- dropped_fraction, capacity, tau (DTS in training)}; {} without `moe` or
-- before the first forward.
function GPT:moe_stats()
  local out = {}
  for _, m in ipairs(moe_layers(self)) do
    local s = m.layer.stats
    if s then
      local row = { block = m.block }
      for k, v in pairs(s) do row[k] = v end
      out[#out + 1] = row
    end
  end
  return out
end

--- The MLPs' measured activation sparsity (relu/relu2 only), one entry
-- per block: {calls, density (share of nonzero hidden activations),
-- tile_density (share of (token tile, hidden unit) pairs computed), dense
-- (calls that ran the dense path)}, means over the forward passes since
-- the last call with {reset = true} (or since the start). nil means for a
-- block that has not run the sparse op.
function GPT:activation_stats(opts)
  opts = check_options(opts, { "reset" }, "GPT:activation_stats")
  local out = {}
  for i = 1, self.config.n_layer do
    local mlp = self.blocks[i].mlp
    out[i] = dynamic.mean_stats(mlp._stats)
    if opts.reset then rawset(mlp, "_stats", dynamic.new_stats()) end
  end
  return out
end

--- idx: i64 (B, T) token ids in 1..vocab_size with T ≤ block_size →
-- logits (B, T, vocab_size). The logits are h·Wteᵀ with the token embedding
-- itself, so its gradient gathers the input and output contributions.
function GPT:forward(idx)
  local cfg = self.config
  if not venom.is_tensor(idx) or idx:dim() ~= 2 then
    fail(("GPT: expected token ids of shape (B, T), got %s"):format(venom.is_tensor(idx)
      and ("a %d-d tensor"):format(idx:dim()) or type(idx)))
  end
  local T = idx:size(2)
  if T > cfg.block_size then
    fail(("GPT: a sequence of %d tokens is longer than block_size %d"):format(T, cfg.block_size))
  end
  local pos = self.positions:narrow(1, 1, T)
  local x = self.drop(self.wte(idx) + self.wpe(pos))
  local h = self.ln_f(self.blocks(x))
  return venom.linear(h, self.wte.weight)
end

--- Mean next-token cross-entropy of the logits for idx against targets,
-- both i64 (B, T).
function GPT:loss(idx, targets)
  local logits = self:forward(idx)
  local V = self.config.vocab_size
  local loss = venom.cross_entropy(logits:reshape(-1, V), targets:reshape(-1), "mean")
  for _, m in ipairs(moe_layers(self)) do -- the MoE balance losses (training only)
    if m.layer.aux_loss then loss = loss + m.layer.aux_loss end
  end
  return loss
end

-- The 1-based index of a draw from the distribution ∝ exp(l / temperature)
-- over the list of logits l, restricted to the top_k largest (all if nil),
-- u a uniform draw in [0, 1) (venom.sample_logits: the rule is written once,
-- in C, for these lists and for the fused decoder's logits, decoder:next). l may have
-- been edited by generate's on_logits, so it is checked whole: n =
-- vocab_size entries, numbers, no NaN or +inf (the binding names the
-- entry), one above -inf.
local function sample(l, n, temperature, top_k, u)
  if #l ~= n then
    error(("GPT:generate: expected %d logits (vocab_size), found %d; did on_logits add or remove entries?")
      :format(n, #l), 0)
  end
  local ok, id = pcall(venom.sample_logits, l, temperature, top_k, u)
  if not ok then -- say where a bad logit can come from (not where in Lua the binding was called)
    id = tostring(id)
    error(("GPT:generate: %s (the weights are not finite, or on_logits wrote it)")
      :format(id:match("sample_logits: .*$") or id), 0)
  end
  return id
end

-- KV cache (GPT:generate) ---------------------------------------------------------------
-- Incremental decoding: each block's attention keeps the qkv projections of
-- the positions so far in a (1, block_size, 3C) cache, so a new token runs
-- one row through the blocks (its query against the cached keys and values,
-- venom.causal_self_attention_last) instead of the whole context. Every other
-- layer (norms, MLPs, nn.BitLinear packed or not, V:N:M, activation-sparse)
-- treats rows independently, so the logits are the full forward's up to f32
-- rounding and greedy decoding picks the same tokens.

-- Whether generate can use the cache: on the CPU (the single-row attention
-- op is CPU only), every block's attention this file's, and no nn.MoE layer
-- with a capacity limit (the full forward drops assignments past it, which
-- depends on the other tokens in the window; a lone token is never dropped,
-- so a cache would change the tokens). Otherwise every token recomputes the
-- whole context, as before.
local function can_cache(self)
  if self.positions:device() ~= "cpu" then return false end
  for i = 1, self.config.n_layer do
    local b = self.blocks[i]
    if getmetatable(b.attn) ~= Attention then return false end
    if b.mlp.experts and b.mlp.config.capacity_factor ~= math.huge then return false end
  end
  return true
end

-- Runs the token `id` at position t through the blocks, appending its qkv
-- row to caches[i] (one per block), and returns its logits (vocab). The
-- prompt too runs one position at a time: every position goes through the
-- same single-row step, so these logits are the fused decoder's bit for bit
-- (a batch of rows would round differently).
local function decode(self, id, t, caches)
  local idx = venom.tensor({ { id } }, "i64")
  local x = self.wte(idx) + self.wpe(self.positions:narrow(1, t, 1))
  for i = 1, self.config.n_layer do
    local b = self.blocks[i]
    local attn = b.attn
    local qkv = attn.qkv(b.ln1(x))
    caches[i]:narrow(2, t, 1):copy_(qkv)
    local y = venom.causal_self_attention_last(caches[i]:narrow(2, 1, t), attn.n_head)
    local h = x + attn.proj(y)
    x = h + b.mlp(b.ln2(h))
  end
  local logits = venom.linear(self.ln_f(x), self.wte.weight):reshape(-1)
  idx:free()
  return logits
end

-- The fused decoder (venom.gpt_decoder: a whole step in one C call, the same
-- logits bit for bit) for the models whose layers it knows: every norm an
-- nn.LayerNorm or nn.RMSNorm, every projection an nn.Linear or a packed
-- nn.BitLinear (after venom.load_ternary), GELU MLPs; nil for the others
-- (V:N:M, activation-sparse, MoE, the BitNet training path, a layer with a
-- forward of its own, a strided weight), which step through the ops with
-- decode() above. At batch 1 on a narrow model the ops'
-- per-call costs outweigh the products (bench/RESULTS.md, issue 20).

-- A decoder is kept on the model between generations (GPT:generate), so
-- it records every model field its spec reads in deps, as (table, key,
-- value) triples (deps.n entries; key META: the metatable, FORWARD: the raw
-- "forward" field), and a later generation checks those reads again
-- (unchanged) instead of building the spec: the same modules, tensors and
-- numbers. Writes into the tensors themselves are the decoder's own check
-- (decoder:current()). The spec's walk and the decoder's making were ~30 µs
-- of a packed generation (bench/RESULTS.md, issue 20).
local META, FORWARD = {}, {}

local function field(o, k)
  if k == META then return getmetatable(o) end
  if k == FORWARD then return rawget(o, "forward") end
  return o[k]
end

local function read(deps, o, k)
  local v, n = field(o, k), deps.n
  deps[n + 1], deps[n + 2], deps[n + 3], deps.n = o, k, v, n + 3
  return v
end

local function unchanged(deps)
  for i = 1, deps.n, 3 do
    if field(deps[i], deps[i + 1]) ~= deps[i + 2] then return false end
  end
  return true
end

-- m's class when m runs its class's own forward; nil when one instance has
-- a forward of its own (GMP's V:N:M shadow gives an nn.Linear one that
-- computes with W⊙m while W stays dense; a script may patch one), which the
-- decoder, reading the weights, would bypass.
local function plain_class(m, deps)
  if type(m) == "table" and read(deps, m, FORWARD) == nil then return read(deps, m, META) end
end

local function fused_norm(n, deps)
  local cls = plain_class(n, deps)
  if cls == nn.LayerNorm and read(deps, n, "weight") then
    return { weight = n.weight, bias = read(deps, n, "bias"), eps = read(deps, n, "eps") }
  end
  if cls == nn.RMSNorm then return { weight = read(deps, n, "weight"), eps = read(deps, n, "eps"), rms = true } end
end

local function fused_linear(l, deps)
  local cls = plain_class(l, deps)
  if cls == nn.Linear then return { weight = read(deps, l, "weight"), bias = read(deps, l, "bias") } end
  if cls == nn.BitLinear and read(deps, l, "packed") then
    local norm = read(deps, l, "norm")
    local n = norm and fused_norm(norm, deps)
    if norm and not (n and n.rms) then return nil end
    return { packed = l.packed, gamma = read(deps, l, "gamma"), norm = n and n.weight, norm_eps = n and n.eps }
  end
end

-- Whether every tensor in the spec (nested tables) is contiguous: the
-- decoder reads plain row-major tensors and refuses others, while the ops
-- take any strides (a weight assigned as a transpose, say), so such a model
-- steps through the ops. (A tensor's strides do not change: the same
-- tensor, recorded in deps, is as contiguous as it was.)
local function contiguous(spec)
  for _, v in pairs(spec) do
    if venom.is_tensor(v) then
      if not v:is_contiguous() then return false end
    elseif type(v) == "table" and not contiguous(v) then
      return false
    end
  end
  return true
end

-- The fused decoder over caches, its reads recorded in deps; nil where it
-- does not apply.
local function fused_decoder(self, caches, deps)
  local cfg = read(deps, self, "config")
  local r = function(o, k) return read(deps, o, k) end
  local wte, wpe, blocks = r(self, "wte"), r(self, "wpe"), r(self, "blocks")
  if plain_class(wte, deps) ~= nn.Embedding or plain_class(wpe, deps) ~= nn.Embedding then return nil end
  -- the attention's own n_head, which the ops use (one for every block)
  local n_head = r(r(r(blocks, 1), "attn"), "n_head")
  local spec = { wte = r(wte, "weight"), wpe = r(wpe, "weight"), n_head = n_head,
                 ln_f = fused_norm(r(self, "ln_f"), deps), blocks = {} }
  if not spec.ln_f then return nil end
  for i = 1, r(cfg, "n_layer") do
    local b = r(blocks, i)
    local mlp, attn = r(b, "mlp"), r(b, "attn")
    if plain_class(mlp, deps) ~= MLP or r(mlp, "activation") ~= "gelu"
      or plain_class(r(mlp, "gelu"), deps) ~= nn.GELU or r(attn, "n_head") ~= n_head then
      return nil
    end
    local blk = { ln1 = fused_norm(r(b, "ln1"), deps), ln2 = fused_norm(r(b, "ln2"), deps),
                  qkv = fused_linear(r(attn, "qkv"), deps), attn_proj = fused_linear(r(attn, "proj"), deps),
                  fc = fused_linear(r(mlp, "fc"), deps), mlp_proj = fused_linear(r(mlp, "proj"), deps),
                  cache = caches[i] }
    for _, k in ipairs({ "ln1", "ln2", "qkv", "attn_proj", "fc", "mlp_proj" }) do
      if not blk[k] then return nil end
    end
    spec.blocks[i] = blk
  end
  -- (the caches' sizes)
  r(cfg, "block_size"); r(cfg, "n_embd")
  if not contiguous(spec) then return nil end
  return venom.gpt_decoder(spec)
end

-- The kept decoder and its caches (rawget(self, "_fused")), let go of.
local function free_kept(kept)
  kept.decoder:free()
  for _, c in ipairs(kept.caches) do c:free() end
end

--- Continues `prompt` (a list of token ids or a (T) or (1, T) integer tensor, at
-- least one token) by n_tokens sampled tokens and returns the whole
-- sequence as a Lua list. Each token is drawn from softmax(logits /
-- temperature) of the last position, keeping only the top_k most likely
-- tokens when top_k is given (top_k = 1 is greedy); the context is the last
-- block_size tokens. Runs in eval mode (switched only when a module's
-- forward runs, and restored) under no_grad; draws come from the
-- engine RNG, so a fixed venom.manual_seed gives the same text.
-- While the sequence fits in block_size, a KV cache (above) runs only each
-- new token through the blocks; once it is longer, the window slides and
-- every position changes (absolute position embeddings), so each further
-- token recomputes the whole window, as without the cache. On CUDA and for
-- MoE models with a capacity limit every token recomputes the context.
-- With the cache, models of f32 Linear or packed ternary BitLinear layers
-- run the new tokens that fit the window in one C call (venom.gpt_decoder's
-- step and draw per token: the same logits, bit for bit, as the ops; the
-- prompt too, one position at a time). That decoder and its caches are
-- kept on the model (its _fused field) for the next generation, which
-- makes them again only where a module, tensor or number the decoder reads
-- was replaced, or a tensor was written in place (an optimizer step,
-- copy_, load_state_dict, load_ternary) or freed: it never runs on stale
-- weights (an on_logits that writes or replaces one sends the later tokens
-- through the ops, on the same caches). It holds the caches (n_layer × block_size × 3C f32) and, for
-- packed weights on a VNNI CPU, a re-laid copy of them, and references to
-- the tensors it read, until a later generation makes it again or the model
-- is collected.
-- opts: temperature = 1 (> 0), top_k = nil, cache = true (false: recompute
-- the context for every token), fused = true (false: step through the ops
-- even where the fused decoder applies; for tests and benchmarks), on_logits = nil (a function called with
-- each step's logits, a Lua list of vocab_size numbers, before the draw; it
-- may edit them in place, e.g. -inf masks a token; a list that is then not
-- vocab_size numbers, has a NaN or +inf, or is all -inf is an error).
function GPT:generate(prompt, n_tokens, opts)
  local who = "GPT:generate"
  opts = check_options(opts, { "temperature", "top_k", "cache", "fused", "on_logits" }, who)
  local use_cache = util.check_bool(opts.cache, "cache", who, true)
  local use_fused = util.check_bool(opts.fused, "fused", who, true)
  local on_logits = opts.on_logits
  if on_logits ~= nil and type(on_logits) ~= "function" then
    fail(who .. ": on_logits must be a function, got " .. type(on_logits))
  end
  local cfg = self.config
  local temperature, top_k = opts.temperature or 1, opts.top_k
  if type(temperature) ~= "number" or not (temperature > 0 and temperature < math.huge) then
    fail(who .. ": temperature must be a positive number, got " .. util.shown(temperature))
  end
  if top_k ~= nil then util.check_int(top_k, "top_k", { min = 1, who = who }) end
  util.check_int(n_tokens, "n_tokens", { min = 0, max = 2 ^ 31, who = who })
  if venom.is_tensor(prompt) and not (prompt:dim() == 1 or prompt:dim() == 2 and prompt:size(1) == 1) then
    -- a batch of prompts flattened into one would be silent garbage
    fail(("%s: a tensor prompt must be 1-D (T) or (1, T), got (%s)"):format(who,
      table.concat(prompt:shape(), ", ")))
  end
  local seq = venom.is_tensor(prompt) and prompt:reshape(-1):totable() or prompt
  if type(seq) ~= "table" or #seq == 0 then
    fail(who .. ": prompt must be a non-empty list or 1-D tensor of token ids")
  end
  for k in pairs(seq) do -- a hole ({1, nil, 3}) would silently cut the prompt
    if not util.is_int(k) or k < 1 or k > #seq then
      fail(("%s: the prompt has a key %s outside 1..%d (a list with a hole?)")
        :format(who, tostring(k), #seq))
    end
  end
  local out = {}
  for i, id in ipairs(seq) do
    if not util.is_int(id) or id < 1 or id > cfg.vocab_size then
      fail(("%s: prompt token %d is %s, expected an id in 1..%d"):format(who, i, tostring(id),
        cfg.vocab_size))
    end
    out[i] = id
  end
  -- eval() and the train() that restores the mode walk every module (tens
  -- of µs for the tiny GPT, about a token's time): only a generation that
  -- runs the modules' forward (not the fused decoder's) switches the mode.
  local was_training, switched = self.training, false
  local function eval_mode()
    if not switched then self:eval(); switched = true end
  end
  local caches -- one (1, block_size, 3C) per block while the cache is in use
  local decoder, deps -- the fused decoder over those caches, where it applies, and its reads
  -- The decoder kept from the last generation, taken off the model while
  -- this one runs (an on_logits that generates with this model makes its own)
  local kept = rawget(self, "_fused")
  if kept then rawset(self, "_fused", nil) end
  local ok, err = pcall(venom.no_grad, function()
    if n_tokens > 0 and use_cache and #out < cfg.block_size and can_cache(self) then
      if use_fused and kept then
        if kept.decoder:current() and unchanged(kept.deps) then
          decoder, caches, deps = kept.decoder, kept.caches, kept.deps
        else
          free_kept(kept)
        end
        kept = nil
      end
      if not caches then
        caches = {}
        -- not zero-filled: a position's row is written before any step reads it
        for i = 1, cfg.n_layer do caches[i] = venom.empty(1, cfg.block_size, 3 * cfg.n_embd) end
        if use_fused then
          deps = { n = 0 }
          decoder = fused_decoder(self, caches, deps)
        end
      end
    end
    local cached = 0 -- positions 1..cached of out are in the caches
    if decoder then
      -- the prompt but its last token, one position at a time, as the
      -- generated tokens (the ops would run it as one batch of rows)
      for i = 1, #out - 1 do decoder:step(out[i], i) end
      cached = #out - 1
    end
    local left = n_tokens
    if decoder and not on_logits then
      -- the steps and draws while the window holds the sequence, in one call
      -- (as decoder:next one token at a time: the same tokens)
      local k = math.min(left, cfg.block_size - #out + 1)
      if k > 0 then
        decoder:generate(out, k, temperature, top_k)
        cached, left = #out - 1, left - k
      end
    end
    for _ = 1, left do
      local fused = decoder and #out == cached + 1 and #out <= cfg.block_size
      if fused and not on_logits then
        -- the step and the draw (u from the engine RNG, as venom.rand) in one call
        cached = #out
        out[#out + 1] = decoder:next(out[#out], #out, temperature, top_k)
      else
        local last, l
        if fused then
          decoder:step(out[#out], #out)
          cached = #out
          l = decoder:logits()
        elseif caches and #out <= cfg.block_size then
          eval_mode()
          for i = cached + 1, #out do
            if last then last:free() end
            last = decode(self, out[i], i, caches)
          end
          cached = #out
        else -- no cache, or the window slides: the whole window again
          eval_mode()
          local first = math.max(1, #out - cfg.block_size + 1)
          local ctx = {}
          for i = first, #out do ctx[#ctx + 1] = out[i] end
          local idx = venom.tensor({ ctx }, "i64"):to(self.positions:device())
          local logits = self:forward(idx)
          last = logits:select(2, #ctx):reshape(-1):cpu()
          idx:free(); logits:free()
        end
        if last then
          l = last:totable()
          last:free()
        end
        if on_logits then
          on_logits(l)
          -- on_logits may have written or replaced what the decoder reads
          -- (an optimizer step, a new weight, n_head): the later tokens go
          -- through the ops, on the same caches, as without the decoder
          if decoder and not (decoder:current() and unchanged(deps)) then
            decoder:free()
            decoder = nil
          end
        end
        local u = venom.rand(1)
        out[#out + 1] = sample(l, cfg.vocab_size, temperature, top_k, u:item())
        u:free()
      end
    end
  end)
  if ok and decoder then -- kept for the next generation (its caches' rows are rewritten from 1)
    if rawget(self, "_fused") then free_kept(rawget(self, "_fused")) end
    rawset(self, "_fused", { decoder = decoder, caches = caches, deps = deps })
  else
    if decoder then decoder:free() end
    for _, c in ipairs(caches or {}) do c:free() end
  end
  if kept then -- not looked at: as it was
    if rawget(self, "_fused") then free_kept(kept) else rawset(self, "_fused", kept) end
  end
  if switched then self:train(was_training) end
  -- (sample()'s own errors already say it, and start with "GPT:generate:")
  local refused = not ok and type(err) == "string" and not err:find("^GPT:generate:")
    and err:match("sample_logits: .*$")
  if refused then -- decoder:next's draw refused the logits: as sample() says, from where
    err = ("GPT:generate: %s (the weights are not finite)"):format(refused)
  end
  if not ok then error(err, 0) end
  return out
end

function GPT:extra_repr()
  local c = self.config
  return ("vocab_size=%d, block_size=%d, n_layer=%d, n_head=%d, n_embd=%d, dropout=%g%s%s%s%s")
    :format(c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd, c.dropout,
      c.mlp and (", mlp=%d:2:%d"):format(c.mlp.V, c.mlp.M) or c.bitnet and ", bitnet" or "",
      c.attn and (", attn=%d:2:%d"):format(c.attn.V, c.attn.M) or "",
      c.moe and (", moe every %d"):format(c.moe.every) or "",
      c.activation ~= "gelu" and (", activation=%s"):format(c.activation) or "")
end

return GPT
