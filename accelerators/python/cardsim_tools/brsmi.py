"""brsmi for the emulated SUPA cards: summary, ``gpu list``, ``gpu --query-gpu``, ``topo -m``.

``gpu list`` prints exactly one line containing "GPU" per device (test harnesses count
them); ``gpu --query-gpu=FIELDS --format=csv[,noheader][,nounits]`` takes the field names
of the CUDA world's tool; ``topo -m`` prints the link matrix of the preset's topology.
"""
from __future__ import annotations

import argparse
import sys

from . import cards as C

DEFAULT_PRESET = "br100"


# --query-gpu fields: name -> (unit or "", value of a card).
FIELDS = {
    "index": ("", lambda c, n: c.index),
    "name": ("", lambda c, n: c.name),
    "uuid": ("", lambda c, n: "GPU-" + c.uuid),
    "pci.bus_id": ("", lambda c, n: c.bus_id),
    "driver_version": ("", lambda c, n: C.DRIVER_VERSION),
    "count": ("", lambda c, n: n),
    "memory.total": ("MiB", lambda c, n: C.mib(c.total_bytes)),
    "memory.used": ("MiB", lambda c, n: C.mib(c.used_bytes)),
    "memory.free": ("MiB", lambda c, n: C.mib(c.total_bytes - c.used_bytes)),
    "utilization.gpu": ("%", lambda c, n: c.util_percent),
    "utilization.memory": ("%", lambda c, n: c.memory_util_percent),
    "temperature.gpu": ("", lambda c, n: c.temperature_c),
    "power.draw": ("W", lambda c, n: f"{c.power_w:.2f}"),
    "power.limit": ("W", lambda c, n: f"{c.preset.power_cap_w:.2f}"),
    "pcie.link.gen.max": ("", lambda c, n: c.preset.pcie_generation),
    "pcie.link.width.max": ("", lambda c, n: c.preset.pcie_lanes),
    "compute_mode": ("", lambda c, n: "Default"),
}
ALIASES = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id",
           "id": "index", "utilization.gpu.percent": "utilization.gpu"}


def query(cards: list[C.Card], fields_arg: str, format_arg: str | None) -> str:
    names = [f.strip() for f in fields_arg.split(",") if f.strip()]
    if not names:
        raise C.ToolError("--query-gpu needs at least one field (valid fields: "
                          f"{', '.join(FIELDS)})", 2)
    for f in names:
        if f not in FIELDS and f not in ALIASES:
            raise C.ToolError(f"unknown field \"{f}\" in --query-gpu (valid fields: "
                              f"{', '.join(FIELDS)})", 2)
    if not format_arg:
        raise C.ToolError("--query-gpu needs --format=csv[,noheader][,nounits]", 2)
    opts = [o.strip() for o in format_arg.split(",")]
    bad = [o for o in opts if o not in ("csv", "noheader", "nounits")]
    if "csv" not in opts or bad:
        raise C.ToolError(f"--format={format_arg}: expected csv, optionally with noheader "
                          "and nounits (e.g. --format=csv,noheader,nounits)", 2)
    units = "nounits" not in opts
    keys = [ALIASES.get(f, f) for f in names]
    lines = []
    if "noheader" not in opts:
        lines.append(", ".join(f"{n} [{FIELDS[k][0]}]" if FIELDS[k][0] and units else n
                               for n, k in zip(names, keys)))
    for card in cards:
        row = []
        for k in keys:
            unit, get = FIELDS[k]
            value = get(card, len(cards))
            row.append(f"{value} {unit}" if unit and units else str(value))
        lines.append(", ".join(row))
    return "\n".join(lines)


def gpu_list(cards: list[C.Card]) -> str:
    return "\n".join(f"GPU {c.index}: {c.name} (UUID: GPU-{c.uuid}, Bus-Id: {c.bus_id})"
                     for c in cards)


def topo_matrix(cards: list[C.Card]) -> str:
    topo = cards[0].preset.topology
    n = len(cards)
    width = max(7, len(f"GPU{n - 1}") + 2)
    code = {"self": "X", "link": f"{'BL' if topo.link == 'BLink' else 'ML'}1", "pcie": "PHB"}
    lines = [(" " * width + "".join(f"GPU{j}".ljust(width) for j in range(n))).rstrip()]
    for i in range(n):
        lines.append((f"GPU{i}".ljust(width) + "".join(
            code[C.relation(cards, i, j)].ljust(width) for j in range(n))).rstrip())
    link_name = topo.link or "BLink"
    lines += ["", "Legend:", "",
              "  X    = Self",
              f"  {code['link']:<4} = Connection over one {link_name} link"
              + ("" if topo.link else " (none on this card)"),
              "  PHB  = Connection through PCIe and the host bridge", ""]
    if topo.note:
        lines.append(f"Topology of {cards[0].preset.name}: {topo.note}.")
    return "\n".join(lines)


def summary(cards: list[C.Card]) -> str:
    rule = "+" + "-" * 30 + "+" + "-" * 22 + "+" + "-" * 22 + "+"
    title = f"BRSMI {C.TOOL_VERSION}"
    driver = f"Driver Version: {C.DRIVER_VERSION}"
    row1 = "| {:<4} {:<23} | {:>20} | {:<8} {:>11} |"
    row2 = "| {:<4} {:>23} | {:>20} | {:<8} {:>11} |"
    lines = ["+" + "-" * 76 + "+", "| " + title + driver.rjust(74 - len(title)) + " |", rule,
             row1.format("GPU", "Name", "Bus-Id", "Util", "Compute M."),
             row2.format("Temp", "Pwr:Usage/Cap", "Memory-Usage", "", ""),
             rule.replace("-", "=")]
    for c in cards:
        lines.append(row1.format(c.index, c.name[:23], c.bus_id, f"{c.util_percent}%", "Default"))
        lines.append(row2.format(f"{c.temperature_c}C", f"{c.power_w}W / {c.preset.power_cap_w}W",
                                 f"{C.mib(c.used_bytes)}MiB / {C.mib(c.total_bytes)}MiB", "", ""))
        lines.append(rule)
    lines += ["", "+" + "-" * 76 + "+", "| Processes:".ljust(77) + "|",
              "|  {:<5} {:<8} {:<43} {:>14} |".format("GPU", "PID", "Process name", "Memory Usage"),
              "|" + "=" * 76 + "|"]
    procs = [(c, p) for c in cards for p in c.processes]
    if not procs:
        lines.append("|  No running processes found".ljust(77) + "|")
    for c, p in procs:
        lines.append("|  {:<5} {:<8} {:<43} {:>14} |".format(
            c.index, p.pid, (p.cmdline or p.name)[:43], f"{C.mib(p.used_bytes)}MiB"))
    lines.append("+" + "-" * 76 + "+")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="brsmi",
                                description="Status of the emulated SUPA cards (cardsim).")
    p.add_argument("--version", action="store_true", help="print the versions")
    sub = p.add_subparsers(dest="command", metavar="{gpu,topo}")
    gpu = sub.add_parser("gpu", help="list or query GPUs")
    gpu.add_argument("action", nargs="?", choices=["list"], help="list: one line per GPU")
    gpu.add_argument("--query-gpu", dest="query", metavar="FIELDS",
                     help=f"comma-separated fields ({', '.join(FIELDS)})")
    gpu.add_argument("--format", metavar="csv[,noheader][,nounits]")
    gpu.add_argument("-i", "--id", type=int, help="GPU N only")
    topo = sub.add_parser("topo", help="how the GPUs connect")
    topo.add_argument("-m", "--matrix", action="store_true", help="the connection matrix")
    return p


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.version:
        print(f"brsmi version: {C.TOOL_VERSION}\nDriver version: {C.DRIVER_VERSION}\n"
              "Emulated by cardsim")
        return 0
    cards = C.system(DEFAULT_PRESET)
    if args.command == "gpu":
        shown = cards
        if args.id is not None:
            if not 0 <= args.id < len(cards):
                raise C.ToolError(f"no GPU {args.id}: {len(cards)} GPU(s) present "
                                  f"(0..{len(cards) - 1})", 1)
            shown = [cards[args.id]]
        if args.query:
            print(query(shown, args.query, args.format))
        elif args.format:
            raise C.ToolError("--format goes with --query-gpu", 2)
        else:
            print(gpu_list(shown))
        return 0
    if args.command == "topo":
        if not args.matrix:
            raise C.ToolError("topo: say -m for the connection matrix", 2)
        print(topo_matrix(cards))
        return 0
    print(summary(cards))
    return 0


def main(argv: list[str] | None = None) -> int:
    return C.tool_main("brsmi", run, argv)


if __name__ == "__main__":
    sys.exit(main())
