-- train.lua — the Lua half of drive_lua.c: a training script that a C
-- program loads through the bridge (venom_lua.h) and then calls into.
--
-- The host hands its own tensors in (no copy: Lua sees the very tensors
-- the C side holds) and gets tensors back. Class ids cross the boundary
-- 0-based, as C counts; Lua counts from 1, so train() adds 1 on the way in
-- and subtracts 1 from its predictions on the way out.
--
-- It also runs on its own, on random data: venom train.lua
local venom = require "venom"
local nn, optim = venom.nn, venom.optim

--- Standardize each column of x in place: subtract the column mean, divide
-- by the column standard deviation. Returns x itself, so the host can see
-- that it got its own tensor (and storage) back.
-- @param x (n, d) f32
function standardize_(x)
  venom.no_grad(function()
    x:sub_(x:mean(1, true))
    x:div_((x * x):mean(1, true):sqrt())
  end)
  return x
end

--- Train a small MLP classifier on (x, y) with Adam, full batch.
-- The number of epochs comes from the global EPOCHS (the host may set it
-- with vn_lua_run_string), 60 by default.
-- @param x (n, d) f32 features
-- @param y (n) i64 class ids, 0-based
-- @return losses (epochs) f32, the training loss before each step
-- @return pred (n) i64, the predicted class ids after training, 0-based
function train(x, y)
  local epochs = EPOCHS or 60
  local target = y + 1
  local classes = target:max():item()
  local model = nn.Sequential(nn.Linear(x:size(2), 32), nn.ReLU(), nn.Linear(32, classes))
  local opt = optim.Adam(model:parameters(), { lr = 0.02 })
  local losses = venom.zeros(epochs)
  for e = 1, epochs do
    local loss = venom.cross_entropy(model(x), target)
    opt:zero_grad()
    loss:backward()
    opt:step()
    losses:set(e, loss:item())
  end
  local pred = venom.no_grad(function() return model(x):argmax(2) end)
  return losses, pred - 1
end

-- Run as a script (venom train.lua): make up a problem and train on it.
if not HOSTED then
  venom.manual_seed(0)
  local x = venom.randn(200, 2) * 5 + 100
  local y = (x:select(2, 1):gt(100)):long()
  local losses, pred = train(standardize_(x), y)
  local acc = pred:eq(y):float():mean():item()
  print(string.format("loss %.4f -> %.4f, accuracy %.3f", losses:get(1), losses:get(losses:size(1)), acc))
end
