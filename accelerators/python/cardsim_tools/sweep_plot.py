"""Plots a `cardsim sweep` CSV: total time (line) and the job's breakdown (stacked bars)
against the swept values. Usage: python -m cardsim_tools.sweep_plot SWEEP.csv OUT.png"""
from __future__ import annotations

import csv
import os
import sys

PARTS = [("compute_us", "compute"), ("memory_bound_us", "memory-bound"), ("copies_us", "host<->device copies"),
         ("exposed_communication_us", "exposed communication"), ("idle_us", "idle")]


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m cardsim_tools.sweep_plot SWEEP.csv OUT.png", file=sys.stderr)
        return 2
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(argv[0], newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print(f"{argv[0]}: no rows", file=sys.stderr)
        return 2
    swept = [k for k in rows[0] if not k.endswith("_us")]
    labels = ["\n".join(r[k] for k in swept) for r in rows]   # the axis label names the keys
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows)) + 2.5, 4.5))   # room for the legend beside
    bottom = [0.0] * len(rows)
    for key, name in PARTS:
        vals = [float(r[key]) / 1e3 for r in rows]
        ax.bar(x, vals, bottom=bottom, label=name, width=0.6)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.plot(x, [float(r["total_us"]) / 1e3 for r in rows], "k-o", label="total")
    ax.set_xticks(list(x), labels)
    ax.set_xlabel(", ".join(swept))
    ax.set_ylabel("simulated time (ms)")
    ax.set_title("cardsim sweep: time and breakdown (mean over ranks)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))   # beside the bars, not on them
    fig.tight_layout()
    # Through a temporary file renamed into place: a write that fails (a full disk) leaves no
    # partial image behind, and an earlier one whole.
    tmp = argv[1] + ".tmp"
    try:
        fig.savefig(tmp, dpi=120, format="png")
        os.replace(tmp, argv[1])
    except OSError as e:
        try:
            os.remove(tmp)
        except OSError:
            pass
        print(f"{argv[1]}: cannot write: {e.strerror or e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
