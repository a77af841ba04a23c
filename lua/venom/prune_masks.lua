--- venom.prune_masks — the masked modes of venom.prune's GMP ("nm" and
-- "unstructured"): dense weights multiplied by 0/1 masks chosen by
-- magnitude. Part of venom.prune; scripts use prune.GMP.
local venom = require "venom"
local util = require "venom.util"
local fail = util.fail

local is_tensor = venom.is_tensor

local masks = {}

--- x ⊙ mask in place for the parameter, its gradient and every optimizer
-- state tensor of its shape (moments, momentum buffers).
function masks.mask_param(opt, p, mask)
  venom.no_grad(function()
    p:mul_(mask)
    if p.grad then p.grad:mul_(mask) end
    local st = opt.state[p]
    if st then
      for _, v in pairs(st) do
        if is_tensor(v) then v:mul_(mask) end
      end
    end
  end)
end

-- Selection by magnitude has no answer for NaN (it compares false with
-- everything) or ±inf: refuse them with the layer and the 1-based position,
-- in every mode (w: the dense weight). w − w is 0 where w is finite, so one sum tells.
function masks.check_finite(L, w)
  local d = w - w
  local bad = d:sum():item() ~= 0
  d:free()
  if not bad then return end
  local flat = w:reshape(-1):cpu():totable()
  for i, v in ipairs(flat) do
    if v - v ~= 0 then
      fail(("GMP:step: layer '%s': weight (%d, %d) is %s; selection by magnitude needs finite "
        .. "weights")
        :format(L.path, math.floor((i - 1) / L.cols) + 1, (i - 1) % L.cols + 1,
          v ~= v and "nan" or v > 0 and "inf" or "-inf"))
    end
  end
end

-- The N:M mask keeping `keep` of each group of M inputs per row, by
-- magnitude among the alive weights.
function masks.nm_mask(self, L, keep)
  local R, K, M = L.rows, L.cols, self.layout.M
  local score = L.module.weight:detach():abs()
  if L.alive then score = score:masked_fill(L.alive:eq(0), -1) end -- pruned: never chosen
  score = score:reshape(R, K / M, M)
  local dev = score:device()
  local positions = venom.arange(M):long():reshape(1, 1, M):to(dev)
  local mask = venom.zeros(R, K / M, M, { device = dev })
  for _ = 1, keep do
    local idx = score:argmax(3) - 1 -- 0-based, like positions
    local pick = positions:eq(idx:unsqueeze(3))
    mask = mask + pick:float()
    score = score:masked_fill(pick, -2)
  end
  mask = mask:reshape(R, K)
  if L.alive then mask = mask * L.alive end
  return mask
end

-- The k-th smallest number of array a (1 ≤ k ≤ #a), reordering a: Hoare's
-- selection (Wirth's version), linear time on average; runs of equal
-- values split evenly, so ties do not make it quadratic.
local function kth_smallest(a, k)
  local lo, hi = 1, #a
  while lo < hi do
    local pivot = a[math.floor((lo + hi) / 2)]
    local i, j = lo, hi
    while i <= j do
      while a[i] < pivot do i = i + 1 end
      while a[j] > pivot do j = j - 1 end
      if i <= j then
        a[i], a[j] = a[j], a[i]
        i, j = i + 1, j - 1
      end
    end
    if k <= j then hi = j elseif k >= i then lo = i else return a[k] end
  end
  return a[k]
end

-- Magnitude masks keeping size − ⌊s·size⌋ weights (⌊s·size⌋ pruned) per layer or in all the
-- layers together: of the weights still alive, the smallest |w| go until
-- that count is left. The cut is the need-th smallest alive |w|: every
-- weight above it stays, every one below goes, and of those equal to it
-- the lowest indices go first (layers in order, each row-major), so ties
-- prune exactly as many as needed. |w| comes to the CPU as a Lua array for
-- the selection; the masks themselves are tensor comparisons.
function masks.unstructured(self, s)
  local groups = {}
  if self.scope == "global" then
    groups[1] = self.layers
  else
    for i, L in ipairs(self.layers) do groups[i] = { L } end
  end
  for _, group in ipairs(groups) do
    -- |w| with the pruned weights at −1: never counted, never kept.
    local scores, flat, live, size = {}, {}, {}, 0
    for i, L in ipairs(group) do
      local a = L.module.weight:detach():abs()
      if L.alive then a = a:masked_fill(L.alive:eq(0), -1) end
      scores[i] = a:cpu()
      flat[i] = scores[i]:reshape(-1):totable()
      for _, v in ipairs(flat[i]) do
        if v >= 0 then live[#live + 1] = v end
      end
      size = size + L.rows * L.cols
    end
    -- ⌊s·size⌋ weights are pruned in all (1e-9 absorbs
    -- s·size landing a hair under an integer), so size − ⌊s·size⌋ stay.
    local need = #live - (size - math.floor(s * size + 1e-9)) -- how many more go
    local cut, at_cut = -1, 0 -- above cut stays; of the weights equal to it, at_cut go
    if need > 0 then
      cut = kth_smallest(live, need)
      at_cut = need
      for _, v in ipairs(live) do
        if v < cut then at_cut = at_cut - 1 end
      end
    end
    for i, L in ipairs(group) do
      local keep = scores[i]:gt(cut):float()
      if need > 0 then
        for j, v in ipairs(flat[i]) do
          if v == cut then
            if at_cut > 0 then
              at_cut = at_cut - 1 -- goes (gt left it 0)
            else
              keep:set(math.floor((j - 1) / L.cols) + 1, (j - 1) % L.cols + 1, 1)
            end
          end
        end
      end
      L.alive = keep:to(L.module.weight:device())
    end
  end
end

return masks
