-- bench/cnn.lua — time training steps of tutorial 8's CNN (models/cnn.lua:
-- two conv-BN-ReLU-pool stages and a classifier, AdamW, cross-entropy) on
-- real Fashion-MNIST batches, the same measurement as bench/torch_cnn.py.
--
--     venom bench/cnn.lua [--steps 40] [--width 32] [--hidden 128] [--batch-size 128]
--                         [--sparse 64:2:8] [--device cuda]
--
-- 3 untimed warm-up steps (allocator caches, BLAS threads), then --steps
-- timed ones; prints s/step and the epoch time it implies (⌈60000/B⌉
-- steps). --sparse makes the second conv and the first linear layer V:N:M
-- at once (sparse.from_layer), to time the sparse layers. --device cuda
-- trains on the GPU (each batch copied over by the loader, the clock read
-- after a synchronize). Never fails on time.
package.path = "./?.lua;" .. package.path
local venom = require "venom"
local nn = require "venom.nn"
local optim = require "venom.optim"
local data = require "venom.data"
local util = require "venom.util"
local sparse = require "venom.sparse"
local CNN = require "models.cnn"

-- A bad option prints "error: <message>" and exits with status 2 (util.parse_cli).
local opts = util.parse_cli(arg, { steps = 40, width = 32, hidden = 128, batch_size = 128,
  sparse = "", seed = 0, root = data.FASHION_MNIST_ROOT, device = "cpu" }, nil, function(o)
  for _, k in ipairs({ "steps", "width", "hidden", "batch_size" }) do util.check_arg_int(o, k, 1) end
  util.check_arg_int(o, "seed", 0)
  util.check_arg_device(o, "device")
end)
local sync = opts.device == "cuda" and venom.cuda.synchronize or function() end
venom.manual_seed(opts.seed)
local ok, set = pcall(data.fashion_mnist, "train", { root = opts.root })
if not ok then util.die(set) end
local x, n = data.flatten_images(set.images, data.FASHION_MNIST_MEAN, data.FASHION_MNIST_STD)
x = x:reshape(n, 1, 28, 28)
local loader = data.DataLoader({ x, set.labels }, { batch_size = opts.batch_size, shuffle = true,
  device = opts.device })

local model = CNN({ width = opts.width, hidden = opts.hidden })
if opts.sparse ~= "" then
  local V, M = opts.sparse:match("^(%d+):2:(%d+)$")
  for _, name in ipairs(CNN.sparse_layers) do
    local i = tonumber(name)
    model[i] = sparse.from_layer(model[i], { V = tonumber(V), M = tonumber(M) })
  end
end
model:to(opts.device)
local opt = optim.AdamW(model:parameters(), { lr = 1e-3, weight_decay = 0.01 })
local criterion = nn.CrossEntropyLoss()

local k, t0 = 0, nil
for xb, yb in loader:iter() do
  k = k + 1
  if k == 4 then
    sync()
    t0 = venom.clock()
  end
  local loss = criterion(model(xb), yb)
  opt:zero_grad()
  loss:backward()
  opt:step()
  loss:free(); xb:free(); yb:free()
  if k == 3 + opts.steps then break end
end
sync()
local dt = (venom.clock() - t0) / opts.steps
print(("venom width %d%s on %s: %.4f s/step, %.1f s/epoch implied"):format(opts.width,
  opts.sparse ~= "" and " sparse " .. opts.sparse or "", opts.device, dt, dt * #loader))
