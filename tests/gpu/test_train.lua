-- The main job on the GPU: tutorial 1 (an MLP on Fashion-MNIST) for one
-- epoch on 6000 images with --device cuda reaches the test accuracy of the
-- same command on the CPU, within 1.5 points, dense and with --sparse
-- 64:2:8 (Sparse Tensor Cores in bf16 against the f32 CPU kernels); and
-- tutorial 2 (GMP during training) ends within 2 points of its CPU run.
-- Both runs start from the same weights and batches (same seed;
-- initialisation and shuffling draw on the CPU), so they differ only by
-- floating-point rounding. Skipped when the dataset package is not
-- installed.
local venom = require "venom"
if not venom.cuda.is_available() then print("1..0 # SKIP no CUDA device") os.exit(0) end
package.path = "tests/gpu/?.lua;tests/lua/?.lua;" .. package.path
local tap = require "tap"
local data = require "venom.data"

local f = io.open(data.FASHION_MNIST_ROOT .. "/train-labels-idx1-ubyte.gz", "rb")
if not f then
  print("1..0 # SKIP dataset-fashion-mnist is not installed (" .. data.FASHION_MNIST_ROOT .. ")")
  os.exit(0)
end
f:close()

local exe = os.getenv("VENOM_EXE") or arg[-1]

local function run(script, device, extra)
  local t0 = venom.clock()
  local p = io.popen(("'%s' tutorials/%s --device %s --limit 6000 %s 2>&1; echo \"rc=$?\"")
    :format(exe, script, device, extra))
  local out = p:read("*a")
  p:close()
  return out, tonumber(out:match("rc=(%d+)\n$")), venom.clock() - t0
end
local function tutorial(device, extra)
  return run("01-fashion-mnist.lua", device, "--epochs 1 " .. extra)
end

-- The dense model, then the hidden layers V:N:M sparse (on the GPU: the
-- Sparse Tensor Core kernels in bf16).
for _, extra in ipairs({ "", "--sparse 64:2:8" }) do
  local what = extra == "" and "tutorial 1" or "tutorial 1 " .. extra
  local out_cpu, rc_cpu, t_cpu = tutorial("cpu", extra)
  tap.is(rc_cpu, 0, what .. " on the CPU" .. (rc_cpu ~= 0 and ": " .. out_cpu or ""))
  local out_gpu, rc_gpu, t_gpu = tutorial("cuda", extra)
  tap.is(rc_gpu, 0, what .. " with --device cuda" .. (rc_gpu ~= 0 and ": " .. out_gpu or ""))

  local acc_cpu = tonumber(out_cpu:match("test accuracy ([%d.]+)%%"))
  local acc_gpu = tonumber(out_gpu:match("test accuracy ([%d.]+)%%"))
  local loss_cpu = tonumber(out_cpu:match("train loss ([%d.]+)"))
  local loss_gpu = tonumber(out_gpu:match("train loss ([%d.]+)"))
  tap.diag("%s, CPU: test accuracy %s%%, train loss %s, %.1f s", what, tostring(acc_cpu),
    tostring(loss_cpu), t_cpu)
  tap.diag("%s, GPU: test accuracy %s%%, train loss %s, %.1f s", what, tostring(acc_gpu),
    tostring(loss_gpu), t_gpu)
  tap.ok(acc_cpu and acc_cpu > 70, what .. ": the CPU run learns (test accuracy above 70%)")
  tap.ok(acc_cpu and acc_gpu and math.abs(acc_gpu - acc_cpu) <= 1.5,
    what .. ": the GPU run's test accuracy is within 1.5 points of the CPU run's")
  tap.ok(loss_cpu and loss_gpu and math.abs(loss_gpu - loss_cpu) <= 0.02 * loss_cpu,
    what .. ": the GPU run's train loss is within 2% of the CPU run's")
end

-- Tutorial 2 (GMP to 64:2:8 during training) on a CUDA model: the layers
-- turn sparse on the GPU as on the CPU, and the accuracies agree.
local gmp_args = "--epochs 2 --prune-start 0.1 --prune-end 0.5"
local out_cpu, rc_cpu = run("02-sparse-fashion-mnist.lua", "cpu", gmp_args)
local out_gpu, rc_gpu = run("02-sparse-fashion-mnist.lua", "cuda", gmp_args)
tap.is(rc_cpu, 0, "tutorial 2 on the CPU" .. (rc_cpu ~= 0 and ": " .. out_cpu or ""))
tap.is(rc_gpu, 0, "tutorial 2 with --device cuda" .. (rc_gpu ~= 0 and ": " .. out_gpu or ""))
-- The last "test accuracy" line is the final one.
local acc_cpu = tonumber(out_cpu:match(".*test accuracy ([%d.]+)%%"))
local acc_gpu = tonumber(out_gpu:match(".*test accuracy ([%d.]+)%%"))
tap.diag("tutorial 2: CPU %s%%, GPU %s%%", tostring(acc_cpu), tostring(acc_gpu))
tap.ok(acc_cpu and acc_gpu and math.abs(acc_gpu - acc_cpu) <= 2,
  "tutorial 2: the GPU run's final test accuracy is within 2 points of the CPU run's")
tap.is(out_gpu:match("\n1%s+(64:2:8)"), "64:2:8", "tutorial 2 on CUDA: layer 1 ends 64:2:8")

tap.done()
