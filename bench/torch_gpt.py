#!/usr/bin/env python3
"""torch_gpt.py — PyTorch 2 on the same training run as tutorials/03-tiny-gpt.lua
(models/gpt.lua): a byte-level GPT-2-style decoder (learned token and position
embeddings, pre-LayerNorm blocks of causal self-attention and a tanh-GELU MLP,
final LayerNorm, output projection tied to the token embedding, GPT-2
initialisation), AdamW (lr 2e-3, weight decay 0.01, betas 0.9/0.999), random
windows of a text file as batches. Attention is
F.scaled_dot_product_attention(is_causal=True) (the fused FlashAttention
kernel on a GPU). Prints tokens/s of training steps (forward, backward,
AdamW) for each mode, the median over rounds after warm-up steps, with the
min-max of the rounds, and the mean loss of the last steps; never pass/fail.

Modes: eager f32, eager bf16 (torch.autocast), and the same under
torch.compile (--compile), on --device cuda (or cpu for a smoke run).

    . /tmp/torch2/env.sh && "$TORCH2" bench/torch_gpt.py --text input.txt
        [--device cuda] [--n-layer 6] [--n-head 6] [--n-embd 384] [--block-size 256]
        [--batch-size 64] [--steps 200] [--warmup 20] [--rounds 3] [--compile]
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, n_head, resid_std):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.fc_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        for lin, std in ((self.qkv, 0.02), (self.proj, resid_std), (self.fc, 0.02),
                         (self.fc_proj, resid_std)):
            nn.init.normal_(lin.weight, 0.0, std)
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, c):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(block, c)
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        resid_std = 0.02 / math.sqrt(2 * n_layer)
        self.blocks = nn.ModuleList(Block(c, n_head, resid_std) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(c)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def run(args, data, dtype, compiled):
    torch.manual_seed(args.seed)
    model = GPT(256, args.block_size, args.n_layer, args.n_head, args.n_embd).to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    step_fn = torch.compile(model) if compiled else model
    gen = torch.Generator().manual_seed(args.seed)

    def batch():
        ix = torch.randint(len(data) - args.block_size - 1, (args.batch_size,), generator=gen)
        w = torch.stack([data[i:i + args.block_size + 1] for i in ix]).to(args.device)
        return w[:, :-1].long(), w[:, 1:].long()

    def step():
        x, y = batch()
        with torch.autocast(args.device, dtype=torch.bfloat16, enabled=dtype == "bf16"):
            loss = step_fn(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    for _ in range(args.warmup):  # compilation and autotuning happen here
        step()
    sync()
    rates, losses = [], []
    per_round = max(1, args.steps // args.rounds)
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for _ in range(per_round):
            losses.append(step())
        sync()
        rates.append(per_round * args.batch_size * args.block_size / (time.perf_counter() - t0))
    last = [l.item() for l in losses[-10:]]
    return statistics.median(rates), min(rates), max(rates), sum(last) / len(last)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--text", required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--n-layer", type=int, default=6)
    p.add_argument("--n-head", type=int, default=6)
    p.add_argument("--n-embd", type=int, default=384)
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--steps", type=int, default=200, help="timed steps per mode")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compile", action="store_true", help="also time torch.compile")
    args = p.parse_args()
    with open(args.text, "rb") as f:
        data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
    dev = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    print(f"# torch {torch.__version__} on {dev}: GPT {args.n_layer}x{args.n_head}x{args.n_embd}, "
          f"block {args.block_size}, batch {args.batch_size}, {args.steps} timed steps "
          f"after {args.warmup}")
    print(f"{'mode':<22} {'tokens/s':>10} {'min':>10} {'max':>10} {'loss (last 10)':>15}")
    for compiled in ([False, True] if args.compile else [False]):
        for dtype in ("f32", "bf16"):
            med, lo, hi, loss = run(args, data, dtype, compiled)
            name = f"{'compile' if compiled else 'eager'} {dtype}"
            print(f"{name:<22} {med:10.0f} {lo:10.0f} {hi:10.0f} {loss:15.4f}", flush=True)


if __name__ == "__main__":
    main()
