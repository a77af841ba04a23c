-- Helpers of the venom.prune tests (test_prune*.lua): a small MLP, one
-- training step, and the checks of a V:2:M pattern's exact counts.
local nn = require "venom.nn"

local M = {}

--- Linear(a, b), ReLU, Linear(b, c), ReLU, Linear(c, d).
function M.mlp(a, b, c, d)
  return nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Linear(b, c), nn.ReLU(), nn.Linear(c, d))
end

--- One optimizer step on (x, y) with the cross-entropy loss; returns the loss.
local crit = nn.CrossEntropyLoss()
function M.train_step(model, opt, x, y)
  local loss = crit(model(x), y)
  opt:zero_grad(); loss:backward(); opt:step()
  return loss:item()
end

--- Weights alive per row of a V:2:M layer with K inputs: 2 in each group of
-- M, fewer only in a last group of fewer than 2 real columns.
function M.vnm_row_nnz(K, Mg)
  local n = 0
  for g = 0, math.ceil(K / Mg) - 1 do n = n + math.min(2, K - g * Mg) end
  return n
end

--- Whether every row of the (R, K) 0/1 mask has exactly min(2, real
-- columns) alive in each group of M.
function M.exact_pattern(mask, Mg)
  local R, K = mask:size(1), mask:size(2)
  local m = mask:totable()
  for r = 1, R do
    for g = 0, math.ceil(K / Mg) - 1 do
      local c = 0
      for k = g * Mg + 1, math.min(K, g * Mg + Mg) do c = c + m[r][k] end
      if c ~= math.min(2, K - g * Mg) then return false end
    end
  end
  return true
end

return M
