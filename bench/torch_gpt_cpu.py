#!/usr/bin/env python3
"""torch_gpt_cpu.py — PyTorch 2 (CPU) training the GPT of bench/gpt.lua
(models/gpt.lua: token + learned position embeddings, pre-LayerNorm blocks of
causal self-attention with a fused qkv projection and tanh-GELU MLP 4x wide,
final LayerNorm, output layer tied to the token embedding; init N(0, 0.02),
residual projections N(0, 0.02/sqrt(2 L)), zero biases; AdamW lr 2e-3,
weight decay 0.01) on random windows of the fortunes corpus, to put next to
bench/gpt.lua's table.

    . /tmp/torch2/env.sh; "$TORCH2" bench/torch_gpt_cpu.py [--threads 2] \
        [--n-embd 128] [--block-size 64] [--n-layer 4] [--n-head 4] [--batch-size 32] \
        [--steps 20] [--warmup 3]

Attention is F.scaled_dot_product_attention(is_causal=True) (PyTorch's fused
CPU kernel). --warmup steps run untimed, then --steps timed ones: prints
tokens/s and ms/step (median and range) and the peak RSS; never pass/fail.
"""
import argparse, glob, math, os, resource, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H, L):
        super().__init__()
        self.H = H
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.out = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        for lin, std in ((self.qkv, 0.02), (self.fc, 0.02),
                         (self.proj, 0.02 / math.sqrt(2 * L)), (self.out, 0.02 / math.sqrt(2 * L))):
            nn.init.normal_(lin.weight, 0, std)
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, 2)
        heads = lambda t: t.reshape(B, T, self.H, C // self.H).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, C, T, L, H):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(256, C), nn.Embedding(T, C)
        nn.init.normal_(self.wte.weight, 0, 0.02)
        nn.init.normal_(self.wpe.weight, 0, 0.02)
        self.blocks = nn.ModuleList(Block(C, H, L) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))


def corpus():
    files = sorted(glob.glob("/usr/share/games/fortunes/*.u8")) or \
        sorted(f for f in glob.glob("/usr/share/games/fortunes/*") if "." not in os.path.basename(f))
    text = b"".join(open(f, "rb").read() for f in files if os.path.isfile(f))
    if len(text) < 1 << 16:
        text = bytes(torch.randint(0, 256, (1 << 20,), dtype=torch.uint8).tolist())
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).long()


def main():
    ap = argparse.ArgumentParser()
    for name, val in (("threads", 2), ("n-embd", 128), ("block-size", 64), ("n-layer", 4),
                      ("n-head", 4), ("batch-size", 32), ("steps", 20), ("warmup", 3)):
        ap.add_argument("--" + name, type=int, default=val)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    B, T = a.batch_size, a.block_size
    model = GPT(a.n_embd, T, a.n_layer, a.n_head)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    data = corpus()

    def step():
        starts = torch.randint(0, len(data) - T - 1, (B,))
        w = torch.stack([data[s:s + T + 1] for s in starts.tolist()])
        loss = model(w[:, :-1], w[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    ms = []
    cpu0 = time.process_time()
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        ms.append(1e3 * (time.perf_counter() - t0))
    cpu_ms = 1e3 * (time.process_time() - cpu0) / a.steps
    ms.sort()
    med = ms[(len(ms) - 1) // 2]
    print(f"{'model':<24} torch {torch.__version__} GPT {a.n_layer} layers, {a.n_head} heads, "
          f"{a.n_embd} wide, block {T}, {a.threads} threads")
    print(f"{'batch size':<24} {B}")
    print(f"{'tokens/s':<24} {B * T / med * 1e3:.0f} (median of {a.steps} steps)")
    print(f"{'ms/step':<24} {med:.1f} median, {ms[0]:.1f}–{ms[-1]:.1f} range")
    print(f"{'CPU ms/step':<24} {cpu_ms:.1f} (user + system, all threads)")
    print(f"{'peak RSS':<24} {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss} kB")
    print(f"{'load average':<24} {' '.join(open('/proc/loadavg').read().split()[:3])}")


if __name__ == "__main__":
    main()
