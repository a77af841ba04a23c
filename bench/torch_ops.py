#!/usr/bin/env python3
"""torch_ops.py — PyTorch on the same measurements as bench/cuda_ops.c, to put
venom's numbers next to PyTorch's on the same GPU (tests/gpu/device-check.sh
runs it when `import torch` works). Prints tables, never pass/fail; exits 0
with a message without a CUDA device.

  (a) GEMM, row-major C (m x n) = A (m x k) @ B (k x n): torch.matmul on bf16
      tensors (bf16 output), on f32 tensors under torch.autocast(bfloat16)
      (conversion included, as venom's autocast), f32 and TF32; medians of
      --reps runs timed with CUDA events after 2 warm-up runs.
  (b) us per small op (add, mul, relu on CUDA tensors of 1 and 1024
      elements) over --ops calls and one synchronize, and on CPU tensors.
  (c) bandwidth of y.copy_(x) on 1 GiB f32 arrays against 4.3 TB/s.

Lines "SUMMARY key=value" are read by device-check.sh.

    python3 bench/torch_ops.py [--reps 10] [--ops 10000] [--quick]
"""
import argparse
import time

import torch

PEAK = {"bf16": 790.0, "tf32": 494.0, "f32": 67.0}


def median_ms(fn, reps):
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    times.sort()
    return times[len(times) // 2]


def gemm(m, n, k, reps):
    flop = 2.0 * m * n * k
    key = f"{m}x{n}x{k}"
    print(f"\nGEMM m={m} n={n} k={k} ({flop / 1e12:.2f} TFLOP per call)")
    print(f"  {'variant':<44} {'ms':>9} {'TFLOP/s':>8} {'% ceil':>7}")
    a = torch.rand(m, k, device="cuda") * 2 - 1
    b = torch.rand(k, n, device="cuda") * 2 - 1
    a16, b16 = a.bfloat16(), b.bfloat16()

    def autocast():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return a @ b

    rows = [
        ("torch.matmul bf16 in, bf16 out", "bf16", lambda: a16 @ b16, "torch_gemm_bf16"),
        ("torch.matmul f32 under autocast(bf16)", "bf16", autocast, "torch_gemm_autocast"),
    ]
    for name, prec, fn, tag in rows:
        ms = median_ms(fn, reps)
        tf = flop / ms / 1e9
        print(f"  {name:<44} {ms:9.3f} {tf:8.1f} {100 * tf / PEAK[prec]:6.1f}%")
        print(f"SUMMARY {tag}_{key}={tf:.1f}")
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = tf32
        prec = "tf32" if tf32 else "f32"
        ms = median_ms(lambda: a @ b, reps)
        tf = flop / ms / 1e9
        print(f"  {'torch.matmul f32, allow_tf32=' + str(tf32):<44} {ms:9.3f} {tf:8.1f} "
              f"{100 * tf / PEAK[prec]:6.1f}%")
        print(f"SUMMARY torch_gemm_{prec}_{key}={tf:.1f}")
    torch.backends.cuda.matmul.allow_tf32 = False
    del a, b, a16, b16
    torch.cuda.empty_cache()


def us_per_op(op, x, y, nops, cuda):
    for _ in range(100):
        op(x, y)
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(nops):
        op(x, y)
    if cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / nops * 1e6


def launch(nops):
    print(f"\nLaunch overhead: us per call, {nops} calls, one synchronize at the end")
    print(f"  {'op':<36} {'1 elt':>10} {'1024 elts':>10}")
    ops = {"add": lambda x, y: x + y, "mul": lambda x, y: x * y,
           "relu": lambda x, y: torch.relu(x)}
    with torch.no_grad():
        for dev in ("cuda", "cpu"):
            for name, op in ops.items():
                us = []
                for n in (1, 1024):
                    x, y = torch.randn(n, device=dev), torch.randn(n, device=dev)
                    us.append(us_per_op(op, x, y, nops, dev == "cuda"))
                label = f"torch {name}, {dev.upper()} tensors"
                print(f"  {label:<36} {us[0]:10.2f} {us[1]:10.2f}")
                if dev == "cuda":
                    print(f"SUMMARY torch_launch_us_{name}1={us[0]:.2f}")


def bandwidth(n, reps):
    x = torch.rand(n, device="cuda")
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x), reps)
    tbs = 8.0 * n / ms / 1e9
    print(f"\nBandwidth: y.copy_(x), f32, {n} elements: {ms:.3f} ms, {tbs:.2f} TB/s, "
          f"{100 * tbs / 4.3:.1f}% of 4.3")
    print(f"SUMMARY torch_copy_tbs={tbs:.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--ops", type=int, default=10000)
    ap.add_argument("--quick", action="store_true")
    o = ap.parse_args()
    if not torch.cuda.is_available():
        print("torch_ops: no CUDA device; nothing to measure")
        return
    sizes = [(4096, 4096, 4096), (8192, 8192, 8192), (16384, 4096, 4096)]
    if o.quick:
        o.reps, o.ops, sizes = 3, 1000, sizes[:1]
    print(f"torch_ops on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"CUDA {torch.version.cuda}, medians of {o.reps} runs")
    for m, n, k in sizes:
        gemm(m, n, k, o.reps)
    launch(o.ops)
    bandwidth(1 << 26 if o.quick else 1 << 28, o.reps)


if __name__ == "__main__":
    main()
