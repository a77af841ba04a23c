--- venom.nn's transformer layers (nn.Embedding, nn.LayerNorm), loaded on
-- first use through nn's lazy fields; models/gpt.lua builds on them.
local venom = require "venom"
local util = require "venom.util"
local nn = require "venom.nn"
local fail = util.fail

local Module = nn.Module
local is_tensor = venom.is_tensor
local fmt_shape = util.format_shape
local check_opts = util.check_options

local function check_positive_int(who, what, v)
  util.check_int(v, what, { min = 1, who = who })
end

local layers = {}

-- Transformer layers -----------------------------------------------------------

--- Lookup table: row ids[...] of weight (num_embeddings, embedding_dim),
-- drawn from N(0, 1) as in PyTorch. forward(ids) takes an i64/i32 tensor of
-- 1-based ids (any shape) and returns (..., embedding_dim); an id used
-- several times gets all its gradients added into its row.
local Embedding = Module:extend("Embedding")
layers.Embedding = Embedding

function Embedding:__init(num_embeddings, embedding_dim)
  Module.__init(self)
  check_positive_int("nn.Embedding", "num_embeddings", num_embeddings)
  check_positive_int("nn.Embedding", "embedding_dim", embedding_dim)
  self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
  self:register_parameter("weight", venom.randn(num_embeddings, embedding_dim))
end

function Embedding:forward(ids)
  if not is_tensor(ids) then
    fail("nn.Embedding: expected a tensor of 1-based ids, got " .. type(ids))
  end
  return venom.embedding(self.weight, ids)
end

function Embedding:extra_repr()
  return ("%d, %d"):format(self.num_embeddings, self.embedding_dim)
end

--- Layer normalization over the last dim (Ba et al. 2016):
-- y = (x − mean)/sqrt(var + eps)·weight + bias, weight = 1 and bias = 0 at
-- first, both (dim). opts: eps = 1e-5.
local LayerNorm = Module:extend("LayerNorm")
layers.LayerNorm = LayerNorm

function LayerNorm:__init(dim, opts)
  Module.__init(self)
  check_positive_int("nn.LayerNorm", "dim", dim)
  opts = check_opts(opts, { "eps" }, "nn.LayerNorm")
  local eps = opts.eps or 1e-5
  if type(eps) ~= "number" or not (eps > 0 and eps < math.huge) then
    fail("nn.LayerNorm: eps must be a positive number, got " .. tostring(eps))
  end
  self.dim, self.eps = dim, eps
  self:register_parameter("weight", venom.ones(dim))
  self:register_parameter("bias", venom.zeros(dim))
end

function LayerNorm:forward(x)
  if not is_tensor(x) then
    fail("nn.LayerNorm: expected a tensor input, got " .. type(x))
  end
  local nd = x:dim()
  if nd == 0 or x:size(nd) ~= self.dim then
    fail(("nn.LayerNorm: expected an input of shape (..., %d), got %s"):format(self.dim,
      nd == 0 and "a 0-d tensor" or fmt_shape(x)))
  end
  return venom.layer_norm(x, self.weight, self.bias, self.eps)
end

function LayerNorm:extra_repr()
  return ("%d, eps=%g"):format(self.dim, self.eps)
end

return layers
