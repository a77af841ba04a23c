"""torch_spmm.py: the PyTorch side of bench/spmm.c, on the same graphs.

bench/spmm --dump DIR writes each graph as raw little-endian arrays
(NAME.row_ptr.i64, NAME.col_idx.i64, NAME.values.f32, NAME.txt = "rows cols
nnz"); this script reads them with numpy.fromfile and times
torch.sparse.mm(A, X) for A as a CSR tensor and as a coalesced COO tensor,
with the same F, the same number of repetitions (median after one warm-up,
min-max spread) and 2 threads. It prints the same table as bench/spmm, with
the faster of CSR and COO in the ms column. A table, never a pass/fail.

    . /tmp/torch2/env.sh && "$TORCH2" bench/torch_spmm.py DIR [--reps 5]
        [--F 16,64,256] [--graphs cora,pl100k,pl1m] [--threads 2]
"""
import argparse
import os
import time

import numpy as np
import torch


def load(d, name):
    rows, cols, nnz = (int(v) for v in open(os.path.join(d, name + ".txt")).read().split())
    crow = torch.from_numpy(np.fromfile(os.path.join(d, name + ".row_ptr.i64"), dtype=np.int64))
    col = torch.from_numpy(np.fromfile(os.path.join(d, name + ".col_idx.i64"), dtype=np.int64))
    val = torch.from_numpy(np.fromfile(os.path.join(d, name + ".values.f32"), dtype=np.float32))
    assert crow.numel() == rows + 1 and col.numel() == nnz and val.numel() == nnz
    csr = torch.sparse_csr_tensor(crow, col, val, (rows, cols))
    coo = csr.to_sparse_coo().coalesce()
    return rows, cols, nnz, csr, coo


def timed(a, x, reps):
    torch.sparse.mm(a, x)  # warm-up
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.sparse.mm(a, x)
        t.append(time.perf_counter() - t0)
    t.sort()
    med = t[reps // 2] if reps % 2 else 0.5 * (t[reps // 2 - 1] + t[reps // 2])
    return med, t[0], t[-1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--F", default="16,64,256")
    p.add_argument("--graphs", default="cora,pl100k,pl1m")
    p.add_argument("--threads", type=int, default=2)
    o = p.parse_args()
    torch.set_num_threads(o.threads)
    torch.manual_seed(0)
    print(f"torch {torch.__version__} torch.sparse.mm, f32, median of {o.reps} (min-max), "
          f"{torch.get_num_threads()} threads\n")
    print("| graph | nodes | nnz | F | ms (faster) | GFLOP/s | CSR ms | COO ms |")
    print("|---|---|---|---|---|---|---|---|")
    for name in o.graphs.split(","):
        rows, cols, nnz, csr, coo = load(o.dir, name)
        for F in (int(f) for f in o.F.split(",")):
            x = torch.randn(cols, F)
            c = timed(csr, x, o.reps)
            k = timed(coo, x, o.reps)
            best = c if c[0] <= k[0] else k
            cell = lambda t: f"{1e3 * t[0]:.3f} ({1e3 * t[1]:.3f}–{1e3 * t[2]:.3f})"
            print(f"| {name} | {rows} | {nnz} | {F} | {cell(best)} "
                  f"{'CSR' if best is c else 'COO'} | {2 * nnz * F / best[0] * 1e-9:.2f} "
                  f"| {cell(c)} | {cell(k)} |", flush=True)


if __name__ == "__main__":
    main()
