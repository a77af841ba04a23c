#!/usr/bin/env python3
"""torch_moe_layer.py — PyTorch on the same measurement as bench/moe_layer.lua:
one training step (forward, backward from a fixed random gradient, plus the
balance loss) of a Mixture-of-Experts layer (8 experts d -> 4d -> d with
tanh-GELU, a bias-free router, top-k routing with a capacity per expert filled
by rank, rows gathered with index_select and scattered back, weighted, with
index_add_) against the dense MLP of the same active size, and the dispatch
alone (identity experts). Entries alternate within each round; prints the
median over rounds of each round's median ms and the min-max; never
pass/fail.

    . /tmp/torch2/env.sh && "$TORCH2" bench/torch_moe_layer.py [--rounds 7] [--reps 5]
        [--tokens 2048] [--d 128] [--threads 2]
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F


class MoE(torch.nn.Module):
    def __init__(self, d, h, experts, k, capacity_factor, identity=False):
        super().__init__()
        self.k, self.cf, self.experts, self.identity = k, capacity_factor, experts, identity
        self.router = torch.nn.Linear(d, experts, bias=False)
        self.fc = torch.nn.ModuleList(torch.nn.Linear(d, h) for _ in range(experts))
        self.proj = torch.nn.ModuleList(torch.nn.Linear(h, d) for _ in range(experts))

    def forward(self, x):
        T, E = x.shape[0], self.experts
        logits = self.router(x)
        probs = logits.softmax(-1)
        top = logits.detach().topk(self.k, dim=-1).indices  # (T, k), rank order
        if self.k == 1:
            weights = probs  # Switch: p_e
        else:
            mask = torch.full_like(logits, -1e9).scatter(1, top, 0.0)
            weights = (logits + mask).softmax(-1)
        selected = T * self.k
        cap = selected if math.isinf(self.cf) else min(selected, math.ceil(self.cf * selected / E))
        # rank-major fill: all first choices, then second choices, in token order
        flat_e = top.t().reshape(-1)  # (k*T): rank 0's tokens first
        flat_t = torch.arange(T).repeat(self.k)
        onehot = F.one_hot(flat_e, E)
        pos = (onehot.cumsum(0) * onehot).sum(1) - 1  # position within its expert
        keep = pos < cap
        out = torch.zeros_like(x)
        wflat = weights.reshape(-1)
        for e in range(E):
            sel = keep & (flat_e == e)
            idx = flat_t[sel].sort().values
            if idx.numel() == 0:
                continue
            xe = x.index_select(0, idx)
            ye = xe if self.identity else self.proj[e](F.gelu(self.fc[e](xe), approximate="tanh"))
            w = wflat.index_select(0, idx * E + e)
            out = out.index_add(0, idx, ye * w[:, None])
        first = F.one_hot(top[:, 0], E).float().mean(0)
        self.aux = 0.01 * E * (first * probs.mean(0)).sum()
        return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    T, D, E = a.tokens, a.d, a.experts
    dense = torch.nn.Sequential(torch.nn.Linear(D, 4 * D), torch.nn.GELU(approximate="tanh"),
                                torch.nn.Linear(4 * D, D))
    entries = [
        ("dense MLP (d -> 4d -> d)", dense),
        (f"MoE E={E} k=1, no capacity limit", MoE(D, 4 * D, E, 1, math.inf)),
        (f"MoE E={E} k=1, capacity factor 1.25", MoE(D, 4 * D, E, 1, 1.25)),
        (f"MoE E={E} k=2, no capacity limit", MoE(D, 4 * D, E, 2, math.inf)),
        (f"dispatch only (E={E} k=1, identity experts)", MoE(D, 4 * D, E, 1, math.inf, identity=True)),
    ]
    x, gy = torch.randn(T, D), torch.randn(T, D)

    def time_ms(layer):
        def step():
            y = layer(x)
            loss = (y * gy).sum() + getattr(layer, "aux", 0)
            loss.backward()
            layer.zero_grad(set_to_none=True)
        step()
        ms = []
        for _ in range(a.reps):
            t0 = time.perf_counter()
            step()
            ms.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ms)

    results = {name: [] for name, _ in entries}
    for _ in range(a.rounds):
        for name, layer in entries:
            results[name].append(time_ms(layer))
    print(f"torch {torch.__version__}, {a.threads} threads, tokens {T}, d {D}, hidden {4 * D}, "
          f"{a.rounds} rounds x {a.reps} reps")
    print(f"{'layer':44s} {'ms/step':>10s} {'min - max':>17s} {'x dense':>9s}")
    base = statistics.median(results[entries[0][0]])
    for name, _ in entries:
        m = statistics.median(results[name])
        print(f"{name:44s} {m:10.2f} {min(results[name]):8.2f} - {max(results[name]):6.2f} {m / base:9.2f}")


if __name__ == "__main__":
    main()
