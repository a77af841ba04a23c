--- venom.nn.utils — helpers for training loops.
local venom = require "venom"
local util = require "venom.util"
local fail = util.fail

local utils = {}

-- ‖g‖ as a Lua number (double) for p = 1, 2 or inf, computed as
-- max|g| · ‖g / max|g|‖ so that the f32 sums cannot overflow: a gradient of
-- 1e20 has a 2-norm of 1e20, though 1e20² is past f32's range.
local function grad_norm(g, p)
  local a = g:abs()
  local m = a:max():item()
  a:free()
  if m == 0 or m ~= m or m == math.huge or p == math.huge then return m end
  local scaled = venom.no_grad(function() return g / m end)
  local s
  if p == 1 then
    local sa = scaled:abs()
    s = sa:sum():item()
    sa:free()
  else
    local sq = scaled * scaled
    s = math.sqrt(sq:sum():item())
    sq:free()
  end
  scaled:free()
  return m * s
end

--- total = utils.clip_grad_norm_(params, max_norm, opts) rescales the
-- gradients of `params` (a tensor or a list, e.g. model:parameters();
-- tensors without a gradient are skipped) in place so that their joint
-- norm is at most max_norm, and returns the joint norm before clipping (a
-- Lua number). The norm of all gradients taken as one vector is
-- (Σᵢ ‖gᵢ‖ᵖ)^(1/p), accumulated in double; each gradient is multiplied by
-- max_norm / (total + 1e-6) when that is below 1 (as PyTorch does; Pascanu
-- et al. 2013). opts: norm_type = 2 (or 1, math.huge), error_if_nonfinite
-- = true: a total that is NaN or infinite is an error naming the first
-- parameter whose gradient is not finite, and nothing is changed; with
-- false, the gradients are scaled anyway (by 0 or NaN, as PyTorch does).
function utils.clip_grad_norm_(params, max_norm, opts)
  local who = "nn.utils.clip_grad_norm_"
  opts = util.check_options(opts, { "norm_type", "error_if_nonfinite" }, who)
  if venom.is_tensor(params) then params = { params } end
  if type(params) ~= "table" then fail(("%s: expected a tensor or a list of tensors, got a %s"):format(who, type(params))) end
  if type(max_norm) ~= "number" or max_norm ~= max_norm or max_norm < 0 then
    fail(("%s: max_norm must be a number >= 0, got %s"):format(who, tostring(max_norm)))
  end
  local p = opts.norm_type or 2
  if p ~= 1 and p ~= 2 and p ~= math.huge then
    fail(("%s: norm_type must be 1, 2 or math.huge, got %s"):format(who, tostring(p)))
  end
  local grads, names = {}, {}
  for i, t in ipairs(params) do
    if not venom.is_tensor(t) then fail(("%s: params[%d] is a %s, not a tensor"):format(who, i, type(t))) end
    if t.grad then grads[#grads + 1], names[#grads + 1] = t.grad, i end
  end
  local total, first_bad = 0, nil
  for k, g in ipairs(grads) do
    local n = grad_norm(g, p)
    if not first_bad and (n ~= n or n == math.huge) then first_bad = names[k] end
    if p == math.huge then total = math.max(total, n) elseif p == 1 then total = total + n else total = total + n * n end
  end
  if p == 2 then total = math.sqrt(total) end
  if first_bad and opts.error_if_nonfinite ~= false then
    fail(("%s: the total norm of the gradients is %s (params[%d] has a non-finite gradient); "
      .. "nothing was clipped. Pass {error_if_nonfinite = false} to clip anyway"):format(who, tostring(total), first_bad))
  end
  local coef = max_norm / (total + 1e-6)
  if coef < 1 or coef ~= coef then
    venom.no_grad(function()
      for _, g in ipairs(grads) do g:mul_(coef) end
    end)
  end
  return total
end

return utils
