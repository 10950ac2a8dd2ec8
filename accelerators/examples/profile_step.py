"""Profiles one training step of the demo's small LM on an emulated card with torch.profiler,
prints key_averages by device time, writes the Chrome trace (Perfetto and chrome://tracing
open it) and, with --png, draws its timeline: the host thread's operators above, the card's
streams below (device slices in simulated time, each linked to the operator that launched it).

    .venv/bin/python accelerators/examples/profile_step.py --card mlu --trace step.json --png step.png
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_lm import TinyLM, batches  # noqa: E402


def draw(trace_path: str, png_path: str, card: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = json.load(open(trace_path))["traceEvents"]
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("ph") == "X"]
    dev = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e.get("ph") == "X"]
    t0 = min(e["ts"] for e in ops + dev)
    # host operators by nesting depth (top-level first), device slices by stream
    ops.sort(key=lambda e: (e["ts"], -e["dur"]))
    depth_end: list[float] = []
    rows = []
    for e in ops:
        d = 0
        while d < len(depth_end) and depth_end[d] > e["ts"] + 1e-6:
            d += 1
        if d == len(depth_end):
            depth_end.append(0.0)
        depth_end[d] = e["ts"] + e["dur"]
        rows.append((d, e))
    depth = min(len(depth_end), 4)
    streams = sorted({e["tid"] for e in dev})
    fig, (ax, sim) = plt.subplots(2, 1, figsize=(14, 2.4 + 0.5 * (depth + 2 * len(streams))),
                                  gridspec_kw={"height_ratios": [depth + len(streams), len(streams) + 1]})
    colors = {"kernel": "#4c72b0", "gpu_memcpy": "#dd8452", "gpu_memset": "#55a868"}
    for d, e in rows:
        if d < depth:
            ax.broken_barh([((e["ts"] - t0) / 1e3, e["dur"] / 1e3)], (len(streams) + depth - 1 - d - 0.4, 0.8),
                           facecolors="#8c8c8c", edgecolor="white", linewidth=0.3)
    s0 = min(e["args"]["simulated start us"] for e in dev)
    for i, s in enumerate(streams):
        y = len(streams) - 1 - i
        for e in (x for x in dev if x["tid"] == s):
            ax.broken_barh([((e["ts"] - t0) / 1e3, e["dur"] / 1e3)], (y - 0.4, 0.8), facecolors=colors[e["cat"]],
                           edgecolor=colors[e["cat"]], linewidth=0.6)
            sim.broken_barh([(e["args"]["simulated start us"] - s0, e["dur"])], (y - 0.4, 0.8),
                            facecolors=colors[e["cat"]], edgecolor="white", linewidth=0.2)
    stream_labels = [f"{card}:0 stream {s}" for s in streams][::-1]
    ax.set_yticks(range(len(streams) + depth),
                  stream_labels + [f"host ops, depth {d}" for d in range(depth)][::-1])
    ax.set_xlabel("ms of the profile (host: wall time; device slices: simulated durations, placed under "
                  "the operators that launched them)")
    ax.set_title(f"torch.profiler on an emulated {card.upper()} card: one training step")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in ("#8c8c8c", *colors.values())]
    ax.legend(handles, ["host operator", "kernel", "copy", "memset"], loc="upper right", fontsize=8)
    sim.set_yticks(range(len(streams)), stream_labels)
    sim.set_xlabel("us of simulated device time (the same slices at the model's own times)")
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--card", default="mlu", choices=["mlu", "supa"])
    ap.add_argument("--trace", default="profile_step.json", help="the Chrome trace to write")
    ap.add_argument("--png", help="also draw the timeline into this PNG")
    args = ap.parse_args(argv)
    importlib.import_module(f"torch_{args.card}")
    dm = getattr(torch, args.card)
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = TinyLM(512, 128, 2, 4, 64).to(args.card)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = [(x.to(args.card), y.to(args.card)) for x, y in batches(2, 8, 64, 512, 0, 1)]

    def step(x, y):
        opt.zero_grad()
        model(x, y).backward()
        opt.step()

    step(*data[0])          # warm-up: optimizer state allocated outside the profile
    dm.synchronize()
    device_activity = getattr(ProfilerActivity, args.card.upper())
    with profile(activities=[ProfilerActivity.CPU, device_activity]) as prof:
        step(*data[1])
        dm.synchronize()
    print(prof.key_averages().table(sort_by=f"self_device_time_total", row_limit=10))
    prof.export_chrome_trace(args.trace)
    print(f"Chrome trace: {args.trace}")
    if args.png:
        draw(args.trace, args.png, args.card)
        print(f"timeline: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
