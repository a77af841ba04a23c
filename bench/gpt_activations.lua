-- bench/gpt_activations.lua — the real activation zeros of a trained GPT
-- for bench/dynamic_sparsity's "gpt" rows: loads a checkpoint written by
-- tutorial 3 (`--save`, a ReLU/ReLU² model), runs one batch of validation
-- windows through it (eval mode, no graph) and saves, for each block b,
-- what its MLP computes its hidden layer from: the MLP's input x_b
-- (tokens × n_embd, the LayerNorm's output), fc.weight w1_b (4·n_embd ×
-- n_embd) and fc.bias b1_b, to a safetensors file.
--
--     venom tutorials/03-tiny-gpt.lua --activation relu2 --steps 300 --save relu2.st
--     venom bench/gpt_activations.lua --checkpoint relu2.st --out relu2-mlp.st
--     build/bench/dynamic_sparsity --real relu2-mlp.st
--
-- The model options must be the ones the checkpoint was trained with
-- (defaults: tutorial 3's). tokens = --batch-size × --block-size (2,048 by
-- default, the benchmark's row count).
local venom = require "venom"
local data = require "venom.data"
local util = require "venom.util"
local root = arg[0]:match("^(.*)/bench/[^/]*$") or "."
package.path = root .. "/?.lua;" .. package.path
local GPT = require "models.gpt"

local opts = util.parse_cli(arg, {
  checkpoint = "", out = "", batch_size = 32, block_size = 64, n_layer = 4, n_head = 4,
  n_embd = 128, activation = "relu2", text = "", seed = 0,
}, {
  checkpoint = "a tutorial 3 checkpoint (--save FILE) of a relu or relu2 model",
  out = "the safetensors file to write (x_b, w1_b, b1_b per block b)",
  batch_size = "validation windows (tokens = batch_size × block_size)",
  block_size = "context length in bytes, as trained",
  n_layer = "transformer blocks, as trained",
  n_head = "attention heads, as trained",
  n_embd = "width, as trained",
  activation = "relu or relu2, as trained",
  text = "the --text file the model was trained on (default: the fortunes corpus)",
  seed = "seed of the draw of the validation windows",
}, function(o)
  if o.checkpoint == "" or o.out == "" then util.fail("--checkpoint and --out are required") end
  util.check_arg_file(o, "checkpoint")
end)

local function die(e) util.die(util.error_text(e)) end
local ok, _, val = pcall(data.corpus, opts.text)
if not ok then die(_) end
local ok_model, model = pcall(GPT, {
  vocab_size = data.TEXT_VOCAB, block_size = opts.block_size, n_layer = opts.n_layer,
  n_head = opts.n_head, n_embd = opts.n_embd, activation = opts.activation,
})
if not ok_model then die(model) end
-- The checkpoint's "model." entries are the weights; the rest (optimizer,
-- schedules, RNG) is not needed here.
local ok_load, sd = pcall(venom.load, opts.checkpoint)
if not ok_load then die(sd) end
local weights = {}
for k, t in pairs(sd) do
  local name = type(k) == "string" and k:match("^model%.(.*)$")
  if name then weights[name] = t end
end
local ok_sd, err = pcall(model.load_state_dict, model, weights)
if not ok_sd then die(err) end

-- Each MLP's input is recorded on its way in.
local out = {}
for b = 1, opts.n_layer do
  local mlp = model.blocks[b].mlp
  local forward = mlp.forward
  rawset(mlp, "forward", function(self, x)
    out["x_" .. b] = x:reshape(-1, opts.n_embd):contiguous()
    return forward(self, x)
  end)
  out["w1_" .. b] = mlp.fc.weight:detach():contiguous()
  out["b1_" .. b] = mlp.fc.bias:detach():contiguous()
end
venom.manual_seed(opts.seed)
model:eval()
venom.no_grad(function()
  local x = data.random_windows(val, opts.batch_size, opts.block_size)
  model(x)
end)
local ok_save, serr = pcall(venom.save, opts.out, out)
if not ok_save then die(serr) end
print(("%s: x_b, w1_b, b1_b of %d blocks, %d tokens"):format(opts.out, opts.n_layer,
  opts.batch_size * opts.block_size))
