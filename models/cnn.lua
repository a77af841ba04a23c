--- models/cnn.lua — a small convolutional network for 28×28 grey images
-- (Fashion-MNIST): two stages of 3×3 convolution, batch normalisation,
-- ReLU and 2×2 max pooling, then a classifier of two linear layers.
--
--     local CNN = require "models.cnn"
--     local model = CNN({width = 32, hidden = 128, classes = 10})
--     local logits = model(x)            -- x f32 (B, 1, 28, 28) → (B, classes)
--
-- The layers, for width C and hidden H (the numbers are module names):
--   1 Conv2d(1, C, 3, padding 1)   2 BatchNorm2d(C)   3 ReLU   4 MaxPool2d(2)   28 → 14
--   5 Conv2d(C, 2C, 3, padding 1)  6 BatchNorm2d(2C)  7 ReLU   8 MaxPool2d(2)   14 → 7
--   9 Flatten   10 Linear(2C·7·7, H)   11 ReLU   12 Dropout(p)   13 Linear(H, classes)
-- The convolutions have no bias: the batch norm right after them has one.
-- cnn.sparse_layers names the layers prune.GMP or sparse.sparsify may make
-- V:N:M ("5", "10": the second conv and the first linear layer; the first
-- conv, 9 weights per output, and the classifier stay dense).
local nn = require "venom.nn"
local util = require "venom.util"

util.add_internal_source("models[/\\]cnn%.lua$")

local cnn = {}

--- Builds the network. opts: width = 32 (channels of the first conv; the
-- second has twice as many), hidden = 128, classes = 10, dropout = 0.25,
-- in_channels = 1, size = 28 (the image side; a multiple of 4).
function cnn.new(opts)
  local who = "models.cnn"
  opts = util.check_options(opts, { "width", "hidden", "classes", "dropout", "in_channels", "size" },
    who)
  local C = util.check_int(opts.width or 32, "width", { min = 1, who = who })
  local H = util.check_int(opts.hidden or 128, "hidden", { min = 1, who = who })
  local K = util.check_int(opts.classes or 10, "classes", { min = 1, who = who })
  local cin = util.check_int(opts.in_channels or 1, "in_channels", { min = 1, who = who })
  local size = util.check_int(opts.size or 28, "size", { min = 4, who = who })
  if size % 4 ~= 0 then
    util.fail(("%s: size must be a multiple of 4 (two 2×2 poolings), got %d"):format(who, size))
  end
  local side = size / 4
  return nn.Sequential(
    nn.Conv2d(cin, C, 3, { padding = 1, bias = false }), nn.BatchNorm2d(C), nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Conv2d(C, 2 * C, 3, { padding = 1, bias = false }), nn.BatchNorm2d(2 * C), nn.ReLU(),
    nn.MaxPool2d(2),
    nn.Flatten(), nn.Linear(2 * C * side * side, H), nn.ReLU(), nn.Dropout(opts.dropout or 0.25),
    nn.Linear(H, K))
end

--- The layers a sparse run makes V:N:M (module names for prune.GMP's
-- `layers`): the second convolution and the first linear layer.
cnn.sparse_layers = { "5", "10" }

return setmetatable(cnn, { __call = function(_, opts) return cnn.new(opts) end })
