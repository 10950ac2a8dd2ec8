"""Host overhead of the emulated card against plain CPU PyTorch, measured side by side in
one run (rounds alternate between the two so machine noise hits both alike).

small_op_overhead_ratio: a tiny elementwise op (16-element add) on the card / on the CPU
  (target <= 2).
train_step_overhead_ratio: a training step of a small MLP (forward, backward, Adam) on the
  card / on the CPU (target <= 1.2).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch


def per_call(fn, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n


def small_op(device: str):
    a = torch.randn(16, device=device)
    b = torch.randn(16, device=device)
    return lambda: a + b


def train_step(device: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(),
                                torch.nn.Linear(512, 256)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=False)
    x = torch.randn(64, 256, device=device)
    y = torch.randn(64, 256, device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
    return step


def ratio(make, dev: str, n: int, rounds: int) -> float:
    f_cpu, f_dev = make("cpu"), make(dev)
    per_call(f_cpu, n // 10 + 1)   # warm up both
    per_call(f_dev, n // 10 + 1)
    ratios = []
    for _ in range(rounds):
        c = per_call(f_cpu, n)
        d = per_call(f_dev, n)
        ratios.append(d / c)
    return statistics.median(ratios)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--card", default="mlu", choices=["mlu", "supa"])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    __import__(f"torch_{args.card}")
    torch.set_num_threads(1)   # the comparison is of host overhead, not of thread scaling
    print(f"small_op_overhead_ratio: {ratio(small_op, args.card, 20000, args.rounds):.2f}")
    print(f"train_step_overhead_ratio: {ratio(train_step, args.card, 100, args.rounds):.2f}")


if __name__ == "__main__":
    main()
