-- BitLinear on the GPU (the quantisers as elementwise ops and reductions,
-- then cuBLAS; engine/quant/bitlinear.c) against the CPU loops: the output
-- and both STE gradients for odd sizes, an all-zero row, a zero weight
-- matrix, and a bitnet GPT's loss and gradients after one step; the fake
-- quantisers with γ over a count, and nn.SparseBitLinear (ternary V:N:M:
-- the Sparse Tensor Core path rounds to bf16, hence the looser tolerance).
local venom = require "venom"
if not venom.cuda.is_available() then print("1..0 # SKIP no CUDA device") os.exit(0) end
package.path = "tests/gpu/?.lua;tests/lua/?.lua;" .. package.path
local tap = require "tap"
local G = require "gpucheck"
local GPT = require "models.gpt"
local nn = require "venom.nn"
local close = G.close

venom.manual_seed(3)
local TOL = 1e-4 -- cuBLAS sums in another order; γ is summed in f32 on the device

for _, sz in ipairs({ { 5, 37, 11 }, { 64, 300, 129 } }) do
  local B, K, N = sz[1], sz[2], sz[3]
  local what = ("x (%d, %d), W (%d, %d)"):format(B, K, N, K)
  local x, w = venom.randn(B, K), venom.randn(N, K) * 0.1
  venom.no_grad(function() x:narrow(1, 2, 1):fill_(0) end) -- an all-zero row
  local xc, wc = x:clone():requires_grad_(true), w:clone():requires_grad_(true)
  local xg, wg = x:cuda():requires_grad_(true), w:cuda():requires_grad_(true)
  local yc, yg = venom.bitlinear(xc, wc), venom.bitlinear(xg, wg)
  close(yg, yc, TOL, "forward, " .. what)
  local r = venom.randn(B, N)
  ;(yc * r):sum():backward()
  ;(yg * r:cuda()):sum():backward()
  close(xg.grad, xc.grad, TOL, "dX (STE), " .. what)
  close(wg.grad, wc.grad, TOL, "dW (STE), " .. what)
end
local zero = venom.bitlinear(venom.randn(3, 8):cuda(), venom.zeros(4, 8):cuda())
close(zero, venom.zeros(3, 4), 0, "γ = 0 gives zeros, not NaN")

local cfg = { vocab_size = 16, block_size = 8, n_layer = 1, n_head = 2, n_embd = 32, bitnet = true }
venom.manual_seed(7)
local mc = GPT(cfg)
local mg = GPT(cfg)
mg:load_state_dict(mc:state_dict())
mg:cuda()
local idx, tgt = venom.randint(1, 17, { 2, 8 }, "i64"), venom.randint(1, 17, { 2, 8 }, "i64")
local lc, lg = mc:loss(idx, tgt), mg:loss(idx:cuda(), tgt:cuda())
close(lg, lc, TOL, "a bitnet GPT's loss on the GPU")
lc:backward()
lg:backward()
close(mg.blocks[1].mlp.fc.weight.grad, mc.blocks[1].mlp.fc.weight.grad, 1e-3, "and a BitLinear's gradient")

local w = venom.randn(40, 24)
close(venom.ternary_fake_quant(w:cuda(), 300), venom.ternary_fake_quant(w, 300), TOL,
  "ternary_fake_quant with γ over a count")
local x = venom.randn(6, 24)
close(venom.int8_fake_quant(x:cuda()), venom.int8_fake_quant(x), TOL, "int8_fake_quant")
local sc = nn.SparseBitLinear(24, 32, { V = 16, M = 8 })
local sg = nn.SparseBitLinear(24, 32, { V = 16, M = 8 })
sg:load_state_dict(sc:state_dict())
sg:cuda()
local ysc, ysg = sc(x), sg(x:cuda())
close(ysg, ysc, 2e-2, "nn.SparseBitLinear forward (bf16 Sparse Tensor Cores)")
local r = venom.randn(6, 32)
;(ysc * r):sum():backward()
;(ysg * r:cuda()):sum():backward()
close(sg.values.grad, sc.values.grad, 2e-2, "and its values' gradient")
tap.done()
