-- CSR SpMM on the GPU (cuSPARSE, kernels/csr.cu through engine/sparse/
-- csr_cuda.c) against the CPU: the forward product with A's own values, with
-- all-ones values and with given values, dX = Aᵀ·dY and the SDDMM of the
-- values' gradient, on a random graph with duplicate edges and isolated
-- vertices, odd feature counts, and an edgeless graph; runs twice to check
-- the results are the same bits (deterministic).
local venom = require "venom"
if not venom.cuda.is_available() then print("1..0 # SKIP no CUDA device") os.exit(0) end
package.path = "tests/gpu/?.lua;tests/lua/?.lua;" .. package.path
local tap = require "tap"
local G = require "gpucheck"
local graph = venom.graph
local close = G.close

venom.manual_seed(11)
local TOL = 1e-5

local n, E = 1000, 9000
local src, dst = {}, {}
for k = 1, E do
  src[k] = math.random(1, n - 10) -- the last 10 vertices send nothing
  dst[k] = math.random(1, n - 20) -- and the last 20 receive nothing
end
local plain = graph.from_edges(src, dst, n)
local normed = plain:gcn_norm()

for _, g in ipairs({ plain, normed }) do
  for _, F in ipairs({ 1, 7, 64 }) do
    local what = ("%d edges, F = %d"):format(g:num_edges(), F)
    local x = venom.randn(n, F)
    local w = venom.randn(g:num_edges())
    local xc = x:clone():requires_grad_(true)
    local wc = w:clone():requires_grad_(true)
    local xg = x:cuda():requires_grad_(true)
    local wg = w:cuda():requires_grad_(true)
    close(g:spmm(x:cuda()), g:spmm(x), TOL, "own values, " .. what)
    local yc, yg = g:spmm(xc, wc), g:spmm(xg, wg)
    close(yg, yc, TOL, "given values, " .. what)
    local r = venom.randn(n, F)
    local lc, lg = (yc * r):sum(), (yg * r:cuda()):sum()
    lc:backward()
    lg:backward()
    close(xg.grad, xc.grad, TOL, "dX = Aᵀ·dY, " .. what)
    close(wg.grad, wc.grad, TOL, "dvalues (SDDMM), " .. what)
    local again = g:spmm(xg:detach(), wg:detach())
    tap.ok((again - yg:detach()):abs():max():item() == 0, "same bits twice, " .. what)
  end
end

local empty = graph.from_edges({}, {}, 5)
close(empty:spmm(venom.ones(5, 3):cuda()), venom.zeros(5, 3), 0, "an edgeless graph gives zeros")
tap.done()
