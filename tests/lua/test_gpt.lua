-- models/gpt.lua and its pieces: nn.Embedding and nn.LayerNorm against
-- plain references, byte-level text data and random windows, the GPT's
-- causality, weight tying (one tensor whose gradient is the sum of both
-- uses), overfitting one batch, deterministic generation, sparse MLPs and
-- GMP on them, sparse attention projections (finite differences, a
-- checkpoint round trip, GMP), and the missing-corpus error.
package.path = "tests/lua/?.lua;" .. package.path
local tap = require "tap"
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local data = require "venom.data"
local prune = require "venom.prune"
local GPT = require "models.gpt"

venom.manual_seed(11)

local function max_abs_diff(a, b)
  local d = (a - b):abs():max()
  return d:item()
end

-- nn.Embedding, nn.LayerNorm ------------------------------------------------------
do
  local emb = nn.Embedding(5, 3)
  local ids = venom.tensor({ { 2, 5 }, { 2, 1 } }, "i64")
  local out = emb(ids)
  local w = emb.weight:detach()
  local ok = out:size(1) == 2 and out:size(2) == 2 and out:size(3) == 3
  for i, row in ipairs({ { 2, 5 }, { 2, 1 } }) do
    for j, id in ipairs(row) do
      for k = 1, 3 do ok = ok and out:get(i, j, k) == w:get(id, k) end
    end
  end
  tap.ok(ok, "nn.Embedding: out[i][j] is row ids[i][j] (1-based) of the weight")
  tap.error_like(function() emb(venom.tensor({ 6 }, "i64")) end, "embedding",
    "nn.Embedding: an id past num_embeddings is an error")

  local ln = nn.LayerNorm(4)
  venom.no_grad(function()
    ln.weight:copy_(venom.tensor({ 1, 2, 3, 4 }))
    ln.bias:copy_(venom.tensor({ 0.5, 0, 0, -1 }))
  end)
  local x = venom.tensor({ { 1, 2, 3, 6 }, { -1, 0, 0, 5 } })
  local y = ln(x)
  local worst = 0
  for i = 1, 2 do
    local r = { x:get(i, 1), x:get(i, 2), x:get(i, 3), x:get(i, 4) }
    local mu = (r[1] + r[2] + r[3] + r[4]) / 4
    local var = 0
    for k = 1, 4 do var = var + (r[k] - mu) ^ 2 / 4 end
    for k = 1, 4 do
      local want = (r[k] - mu) / math.sqrt(var + 1e-5) * ln.weight:get(k) + ln.bias:get(k)
      worst = math.max(worst, math.abs(y:get(i, k) - want))
    end
  end
  tap.ok(worst < 1e-5, ("nn.LayerNorm matches (x − mean)/√(var + eps)·w + b (max error %.2g)")
    :format(worst))
  tap.error_like(function() ln(venom.zeros(2, 3)) end, "%(%.%.%., 4%)",
    "nn.LayerNorm: a wrong last dim names the expected shape")
end

-- Text data ----------------------------------------------------------------------------
local tmp = os.tmpname()
do
  local text = "Hello, world! The quick brown fox.\n\0\255"
  local f = assert(io.open(tmp, "wb"))
  f:write(text)
  f:close()
  local train, val = data.text(tmp, { split = 0.5 })
  local n_train = math.floor(0.5 * #text)
  tap.ok(train:dtype() == "i64" and train:size(1) == n_train and val:size(1) == #text - n_train,
    "data.text: i64 train/val tensors split at ⌊split·n⌋")
  local all, t = true, train:totable()
  for _, v in ipairs(val:totable()) do t[#t + 1] = v end
  for i = 1, #text do all = all and t[i] == text:byte(i) + 1 end
  tap.ok(all, "data.text: token = byte + 1, 1..256, in file order (NUL and 0xFF included)")

  venom.manual_seed(5)
  local x, y = data.random_windows(train, 6, 4)
  local xt, yt = x:totable(), y:totable()
  local shifted, inside = true, true
  local tt = train:totable()
  for b = 1, 6 do
    for i = 1, 3 do shifted = shifted and xt[b][i + 1] == yt[b][i] end
    -- The window must be somewhere in the training text.
    local found = false
    for s = 1, #tt - 4 do
      local m = true
      for i = 1, 4 do m = m and tt[s + i - 1] == xt[b][i] end
      m = m and tt[s + 4] == yt[b][4]
      found = found or m
    end
    inside = inside and found
  end
  tap.ok(shifted and inside, "random_windows: y is x shifted by one, both from one window")
  venom.manual_seed(5)
  local x2 = data.random_windows(train, 6, 4)
  tap.ok(max_abs_diff(x:float(), x2:float()) == 0, "random_windows: the same seed, the same batch")
  tap.error_like(function() data.random_windows(val, 2, #text) end, "fewer than a window",
    "random_windows: a text shorter than a window is refused")
  tap.error_like(function() data.text(tmp .. ".missing") end, "cannot open .*missing",
    "data.text: a missing file is named")
end
os.remove(tmp)
do -- the real corpus, when the fortunes package is installed.
  local total, first = 0, nil
  for _, name in ipairs(data.FORTUNES_FILES) do
    local fh = io.open(data.FORTUNES_ROOT .. "/" .. name, "rb")
    if not fh then total = nil break end
    local s = fh:read("*a")
    fh:close()
    first = first or s:byte(1)
    total = total + #s
  end
  if total then
    local train, val = data.fortunes()
    tap.ok(train:size(1) == math.floor(0.9 * total) and val:size(1) == total - train:size(1)
      and train:get(1) == first + 1,
      ("data.fortunes: the %d bytes of the %d files, split 90/10"):format(total,
        #data.FORTUNES_FILES))
  else
    tap.skip("the fortunes package is not installed", 1)
  end
end
tap.error_like(function() data.fortunes({ root = "/nonexistent/fortunes" }) end,
  "install the Debian package fortunes", "data.fortunes: a missing corpus names the package")

-- The model ----------------------------------------------------------------------------
local cfg = { vocab_size = 32, block_size = 8, n_layer = 2, n_head = 2, n_embd = 16 }

do -- emb_std: the embeddings' init std (GPT-2's 0.02 by default)
  local function std(t) return math.sqrt((t * t):mean():item()) end
  venom.manual_seed(1)
  local base = GPT({ vocab_size = 256, block_size = 64, n_layer = 1, n_head = 2, n_embd = 32 })
  venom.manual_seed(1)
  local big = GPT({ vocab_size = 256, block_size = 64, n_layer = 1, n_head = 2, n_embd = 32, emb_std = 0.2 })
  local s1, s2 = std(base.wte.weight:detach()), std(big.wte.weight:detach())
  tap.ok(math.abs(s1 - 0.02) < 0.002 and math.abs(s2 - 0.2) < 0.02
    and math.abs(std(big.wpe.weight:detach()) - 0.2) < 0.02,
    ("emb_std sets the token and position embeddings' std (%.4f by default, %.4f at 0.2)"):format(s1, s2))
  tap.ok(max_abs_diff(big.blocks[1].attn.qkv.weight, base.blocks[1].attn.qkv.weight) == 0,
    "and nothing else: the other weights are drawn as before")
  tap.error_like(function() GPT({ vocab_size = 8, block_size = 4, n_layer = 1, n_head = 1, n_embd = 4, emb_std = 0 }) end,
    "emb_std must be a positive number, got 0", "emb_std = 0 is refused by name")
end

do -- causality: a later token never changes an earlier position's logits.
  venom.manual_seed(1)
  local model = GPT(cfg)
  local a = venom.tensor({ { 3, 1, 4, 1, 5, 9, 2, 6 } }, "i64")
  local b = venom.tensor({ { 3, 1, 4, 1, 5, 9, 2, 27 } }, "i64")
  local c = venom.tensor({ { 3, 1, 4, 30, 5, 9, 2, 6 } }, "i64")
  local la, lb, lc = model(a), model(b), model(c)
  tap.is(max_abs_diff(la:narrow(2, 1, 7), lb:narrow(2, 1, 7)), 0,
    "causal: changing the last token leaves positions 1..7 unchanged")
  tap.ok(max_abs_diff(la:narrow(2, 8, 1), lb:narrow(2, 8, 1)) > 1e-4,
    "causal: ... and changes position 8")
  tap.is(max_abs_diff(la:narrow(2, 1, 3), lc:narrow(2, 1, 3)), 0,
    "causal: changing token 4 leaves positions 1..3 unchanged")
  tap.ok(max_abs_diff(la:narrow(2, 4, 5), lc:narrow(2, 4, 5)) > 1e-4,
    "causal: ... and changes positions 4..8")
  tap.error_like(function() model(venom.ones(1, 9):long()) end, "longer than block_size",
    "a sequence longer than block_size is refused")
end

do -- weight tying: one tensor, gradient = input use + output use.
  venom.manual_seed(2)
  local model = GPT(cfg)
  local W = model.wte.weight
  local n_vocab_sized = 0
  for _, p in ipairs(model:parameters()) do
    if p:dim() == 2 and p:size(1) == cfg.vocab_size then n_vocab_sized = n_vocab_sized + 1 end
  end
  tap.is(n_vocab_sized, 1, "tying: the token embedding is the only (vocab, n_embd) parameter")
  local idx = venom.tensor({ { 1, 2, 3, 2, 5, 6, 2, 8 }, { 4, 4, 3, 7, 1, 9, 2, 2 } }, "i64")
  local tgt = venom.tensor({ { 2, 3, 2, 5, 6, 2, 8, 20 }, { 4, 3, 7, 1, 9, 2, 2, 31 } }, "i64")
  model:loss(idx, tgt):backward()
  local tied = W.grad:clone()
  -- The same computation with the output use on a separate copy of W.
  model:zero_grad()
  local W2 = W:detach():clone()
  W2:requires_grad_(true)
  local pos = venom.arange(1, 9, 1, "i64")
  local h = model.ln_f(model.blocks(model.wte(idx) + model.wpe(pos)))
  local logits = venom.linear(h, W2)
  venom.cross_entropy(logits:reshape(-1, cfg.vocab_size), tgt:reshape(-1), "mean"):backward()
  local g_in, g_out = W.grad, W2.grad
  tap.ok(max_abs_diff(tied, g_in + g_out) < 1e-6 and max_abs_diff(g_in, 0 * g_in) > 1e-4
    and max_abs_diff(g_out, 0 * g_out) > 1e-4,
    "tying: the embedding's gradient is the sum of its input and output gradients")
end

do -- a tiny model overfits one batch.
  venom.manual_seed(3)
  local model = GPT({ vocab_size = 64, block_size = 16, n_layer = 2, n_head = 2, n_embd = 32 })
  local win = (venom.rand(2, 17) * 63):long()
  win:add_(1)
  local x, y = win:narrow(2, 1, 16):contiguous(), win:narrow(2, 2, 16):contiguous()
  local opt = optim.AdamW(model:parameters(), { lr = 1e-2, weight_decay = 0 })
  local first, last
  for i = 1, 150 do
    local loss = model:loss(x, y)
    opt:zero_grad(); loss:backward(); opt:step()
    last = loss:item()
    first = first or last
  end
  tap.ok(first > 3.5 and last < 0.05,
    ("overfitting one batch: loss %.3f → %.4f after 150 steps"):format(first, last))

  local prompt = { 5, 9, 2 }
  venom.manual_seed(42)
  local g1 = model:generate(prompt, 12, { temperature = 1.5, top_k = 20 })
  venom.manual_seed(42)
  local g2 = model:generate(prompt, 12, { temperature = 1.5, top_k = 20 })
  venom.manual_seed(43)
  local g3 = model:generate(prompt, 12, { temperature = 1.5, top_k = 20 })
  local same, differ, in_range = #g1 == 15 and #g2 == 15, false, true
  for i = 1, 15 do
    same = same and g1[i] == g2[i]
    differ = differ or g1[i] ~= g3[i]
    in_range = in_range and g1[i] >= 1 and g1[i] <= 64
  end
  tap.ok(same and in_range and g1[1] == 5 and g1[3] == 2,
    "generate: the prompt then 12 tokens, the same for the same seed")
  tap.ok(differ, "generate: another seed samples other tokens")
  -- top_k = 1 is greedy: token 4 is the argmax of the logits after the prompt.
  local greedy = model:generate(prompt, 1, { top_k = 1 })
  local logits = venom.no_grad(function() return model(venom.tensor({ prompt }, "i64")) end)
  tap.is(greedy[4], logits:select(2, 3):argmax(2):item(), "generate: top_k = 1 takes the argmax")
  tap.ok(model.training, "generate restores training mode")
  tap.error_like(function() model:generate({ 65 }, 1) end, "expected an id in 1%.%.64",
    "generate: an id outside the vocabulary is refused")
  tap.error_like(function() model:generate({ 1 }, math.huge) end, "n_tokens must be an integer",
    "generate: an endless n_tokens is refused (it would never return)")
  tap.error_like(function() model:generate({ 1, nil, 3 }, 1) end, "a list with a hole",
    "generate: a prompt with a hole is refused")
  local w = model.wte.weight
  local saved = w:clone()
  venom.no_grad(function() w:fill_(0 / 0) end)
  tap.error_like(function() model:generate({ 1 }, 1) end, "not finite",
    "generate: NaN weights are an error, not a stream of token 1")
  venom.no_grad(function() w:copy_(saved) end)
end

do -- sparse MLPs: built sparse, or pruned by GMP through mlp_layers().
  venom.manual_seed(4)
  local sp = GPT({ vocab_size = 32, block_size = 8, n_layer = 1, n_head = 2, n_embd = 32,
                   mlp = { V = 64, M = 8 } })
  local fc = sp.blocks[1].mlp.fc
  local st = fc:stats()
  tap.ok(getmetatable(fc) == nn.SparseLinear and st.M == 8 and st.sparsity == 0.75,
    "mlp = {V=64, M=8}: the MLP projections are 2:8 SparseLinear layers (75% sparse)")
  local idx = venom.tensor({ { 1, 2, 3, 4, 5, 6, 7, 8 } }, "i64")
  sp:loss(idx, idx):backward()
  tap.ok(fc.values.grad ~= nil and sp.blocks[1].mlp.proj.values.grad ~= nil,
    "sparse MLP values receive gradients")

  local model = GPT({ vocab_size = 32, block_size = 8, n_layer = 2, n_head = 2, n_embd = 32 })
  local opt = optim.AdamW(model:parameters(), { lr = 1e-3 })
  local gmp = prune.GMP(model, { optimizer = opt, pattern = "64:2:8",
                                 layers = model:mlp_layers(), t0 = 1, n = 2, dt = 1 })
  for _ = 1, 4 do
    local loss = model:loss(idx, idx)
    opt:zero_grad(); loss:backward(); opt:step(); gmp:step()
  end
  local all_sparse = true
  for _, r in ipairs(gmp:report()) do all_sparse = all_sparse and r.pattern == "64:2:8" end
  tap.ok(#gmp:report() == 4 and all_sparse
    and getmetatable(model.blocks[2].mlp.proj) == nn.SparseLinear
    and getmetatable(model.blocks[2].attn.qkv) == nn.Linear,
    "GMP over mlp_layers() prunes the 4 MLP projections to 64:2:8 and leaves attention dense")
end

do -- V:N:M attention projections (attn = {V, M}): the gradient of the loss with
  -- respect to the compressed values and biases of qkv (3C rows, one matrix)
  -- and of the output projection against central finite differences; a
  -- checkpoint round trip gives the same logits bit for bit.
  venom.manual_seed(5)
  local cfg = { vocab_size = 16, block_size = 8, n_layer = 1, n_head = 2, n_embd = 16,
                emb_std = 0.5, attn = { V = 16, M = 8 } }
  local model = GPT(cfg)
  local attn = model.blocks[1].attn
  tap.ok(getmetatable(attn.qkv) == nn.SparseLinear and getmetatable(attn.proj) == nn.SparseLinear
    and attn.qkv.out_features == 48 and attn.qkv:stats().sparsity == 0.75
    and getmetatable(model.blocks[1].mlp.fc) == nn.Linear,
    "attn = {V=16, M=8}: qkv (48 rows) and proj are 2:8 SparseLinear layers, the MLP stays dense")
  tap.ok(tostring(model):find("attn=16:2:8", 1, true) ~= nil, "the model's repr names the attn pattern")
  -- Larger weights than GPT-2's init, so that every gradient is far from 0.
  venom.no_grad(function()
    for _, l in ipairs({ attn.qkv, attn.proj }) do
      l.values:mul_(20)
      local b = venom.randn(l.out_features) * 0.3
      l.bias:copy_(b)
    end
  end)
  local idx = venom.tensor({ { 3, 1, 4, 1, 5, 9, 2, 6 }, { 5, 3, 5, 8, 9, 7, 9, 3 } }, "i64")
  local tgt = venom.tensor({ { 1, 4, 1, 5, 9, 2, 6, 5 }, { 3, 5, 8, 9, 7, 9, 3, 2 } }, "i64")
  local function loss() return venom.no_grad(function() return model:loss(idx, tgt):item() end) end
  model:zero_grad()
  model:loss(idx, tgt):backward()
  local eps, worst, biggest, checked = 1e-2, 0, 0, 0
  for _, p in ipairs({ attn.qkv.values, attn.proj.values, attn.qkv.bias, attn.proj.bias }) do
    local g = p.grad
    local n = p:numel()
    local flat = p:reshape(-1)
    for i = 1, n, math.max(1, math.floor(n / 9)) do
      local v = flat:get(i)
      venom.no_grad(function() flat:set(i, v + eps) end)
      local up = loss()
      venom.no_grad(function() flat:set(i, v - eps) end)
      local down = loss()
      venom.no_grad(function() flat:set(i, v) end)
      local want = g:reshape(-1):get(i)
      worst = math.max(worst, math.abs((up - down) / (2 * eps) - want))
      biggest = math.max(biggest, math.abs(want))
      checked = checked + 1
    end
  end
  tap.ok(checked >= 36 and biggest > 1e-1 and worst < 1e-3,
    ("finite differences of %d values and biases of the sparse qkv and proj (worst %.2g, largest "
      .. "gradient %.2g)"):format(checked, worst, biggest))

  local path = os.tmpname()
  local checkpoint = require "venom.checkpoint"
  checkpoint.save(path, { model = model })
  venom.manual_seed(6) -- another init, another pattern
  local fresh = GPT(cfg)
  checkpoint.load(path, { model = fresh })
  os.remove(path)
  local a, b = model(idx), fresh(idx)
  tap.ok(a:ne(b):sum():item() == 0 and fresh.blocks[1].attn.qkv:mask():ne(attn.qkv:mask()):sum():item() == 0,
    "a checkpoint of the sparse-attention model loads into a fresh one: same pattern, same logits")

  -- GMP over attn_layers() prunes the attention projections of a dense model.
  local dense = GPT({ vocab_size = 16, block_size = 8, n_layer = 2, n_head = 2, n_embd = 16 })
  local opt = optim.AdamW(dense:parameters(), { lr = 1e-3 })
  local layers = dense:mlp_layers()
  for _, name in ipairs(dense:attn_layers()) do layers[#layers + 1] = name end
  local gmp = prune.GMP(dense, { optimizer = opt, pattern = "16:2:8", layers = layers, t0 = 1,
                                 n = 2, dt = 1 })
  for _ = 1, 4 do
    local l = dense:loss(idx, tgt)
    opt:zero_grad(); l:backward(); opt:step(); gmp:step()
  end
  tap.ok(#gmp:report() == 8 and getmetatable(dense.blocks[2].attn.qkv) == nn.SparseLinear
    and dense.blocks[2].attn.qkv:stats().M == 8,
    "GMP over mlp_layers() and attn_layers() prunes all 8 block projections to 16:2:8")
  tap.error_like(function() GPT({ attn = { V = 16, K = 3 } }) end, "K",
    "GPT: an unknown key in attn is named")
end

tap.error_like(function() GPT({ n_embd = 30, n_head = 4 }) end, "multiple of n_head",
  "GPT: n_embd not divisible by n_head is refused")

tap.done()
