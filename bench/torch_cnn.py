#!/usr/bin/env python3
"""torch_cnn.py — PyTorch 2 (CPU) training tutorial 8's CNN (models/cnn.lua) on
Fashion-MNIST, to put next to bench/cnn.lua: Conv2d(1, C, 3, pad 1, no bias),
BatchNorm2d, ReLU, MaxPool2d(2), Conv2d(C, 2C, 3, pad 1, no bias), BatchNorm2d,
ReLU, MaxPool2d(2), Flatten, Linear(2C*49, H), ReLU, Dropout(0.25), Linear(H, 10);
AdamW (lr 1e-3, weight decay 0.01), batch 128, images normalised with the
training set's mean 0.2860 and std 0.3530 as data.flatten_images does.

    python3 bench/torch_cnn.py [--steps 40] [--threads 2] [--width 32] [--hidden 128]
    python3 bench/torch_cnn.py --epochs 10      # full epochs and test accuracy

--steps N times N training steps on shuffled real batches after 3 untimed
warm-up steps and prints s/step and the epoch time it implies (469 steps of
128); --epochs N trains N whole epochs and prints s/epoch and test accuracy.
Prints lines, never pass/fail.
"""
import argparse, gzip, struct, time

import numpy as np
import torch

D = "/usr/share/datasets/fashion-mnist/"


def idx(path):
    with gzip.open(path) as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        r, c = struct.unpack(">II", data[8:16])
        return np.frombuffer(data, np.uint8, offset=16).reshape(n, 1, r, c)
    return np.frombuffer(data, np.uint8, offset=8)


def images(split):
    x = torch.tensor(idx(D + split + "-images-idx3-ubyte.gz"), dtype=torch.float32)
    y = torch.tensor(idx(D + split + "-labels-idx1-ubyte.gz"), dtype=torch.long)
    return (x / 255 - 0.2860) / 0.3530, y


def model_of(C, H):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, C, 3, padding=1, bias=False), nn.BatchNorm2d(C), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(C, 2 * C, 3, padding=1, bias=False), nn.BatchNorm2d(2 * C), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * C * 49, H), nn.ReLU(), nn.Dropout(0.25),
        nn.Linear(H, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=128)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    xtr, ytr = images("train")
    model = model_of(a.width, a.hidden)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    B = a.batch_size

    def step(ix):
        loss = torch.nn.functional.cross_entropy(model(xtr[ix]), ytr[ix])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    if a.epochs == 0:
        perm = torch.randperm(len(xtr))
        for i in range(3):
            step(perm[i * B:(i + 1) * B])
        t = time.perf_counter()
        for i in range(3, 3 + a.steps):
            step(perm[i * B:(i + 1) * B])
        dt = (time.perf_counter() - t) / a.steps
        print(f"torch {torch.__version__} threads {a.threads} width {a.width}: {dt:.4f} s/step, "
              f"{dt * ((len(xtr) + B - 1) // B):.1f} s/epoch implied")
        return
    xte, yte = images("t10k")
    for ep in range(a.epochs):
        model.train()
        t = time.perf_counter()
        perm = torch.randperm(len(xtr))
        for i in range(0, len(xtr), B):
            step(perm[i:i + B])
        dt = time.perf_counter() - t
        model.eval()
        with torch.no_grad():
            acc = sum((model(xte[i:i + 1000]).argmax(1) == yte[i:i + 1000]).sum().item()
                      for i in range(0, len(xte), 1000)) / len(xte)
        print(f"epoch {ep + 1} {dt:.2f} s/epoch test accuracy {100 * acc:.2f}%")


if __name__ == "__main__":
    main()
