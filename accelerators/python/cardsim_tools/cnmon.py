"""cnmon for the emulated MLU cards: the default table, ``-l``, ``-c N``, ``info``, ``mlulink``.

The layouts follow the vendor tool closely enough for the scripts that parse it (field
positions of the table rows, ``Driver vX.Y.Z``, ``not existed``, ``cnmon_info.json``; see
tests/python/tools/test_management_tools.py). One MLU370-X8 chip is one card here, as the
vendor tool lists each chip of the two-chip card as its own device.
"""
from __future__ import annotations

import argparse
import json
import sys

from . import cards as C

DEFAULT_PRESET = "mlu370-x8"
WIDTH = 80


def _rule(parts=(31, 22, 23), ch="-") -> str:
    return "+" + "+".join(ch * n for n in parts) + "+"


def _box(text: str) -> str:
    return "| " + text.ljust(WIDTH - 4) + " |"


# Columns between the table's '|': 29, 20 and 21 characters of content.
_ROW1 = "| {:<4} {:<3} {:<11} {:>8} | {:>20} | {:<8} {:>12} |"
_ROW2 = "| {:<4} {:<4} {:>19} | {:>20} | {:<8} {:>12} |"


def _card_rows(card: C.Card) -> list[str]:
    # Spacing is part of the format: "106 W/ 250 W" and "0 MiB/ 23374 MiB" split into the
    # fields scripts count on (temperature 3rd, power 4th, memory used 9th and total 11th).
    first = _ROW1.format(card.index, "/", card.name, "v" + C.FIRMWARE_VERSION, card.bus_id,
                         f"{card.util_percent}%", "N/A")
    second = _ROW2.format("0%", f"{card.temperature_c}C",
                          f"{card.power_w} W/ {card.preset.power_cap_w} W",
                          f"{C.mib(card.used_bytes)} MiB/ {C.mib(card.total_bytes)} MiB",
                          "N/A", "Default")
    return [first, second]


def table(shown: list[C.Card]) -> str:
    title = f"CNMON v{C.DRIVER_VERSION}"
    driver = f"Driver v{C.DRIVER_VERSION}"
    lines = [
        "+" + "-" * (WIDTH - 2) + "+",
        _box(title + driver.rjust(WIDTH - 4 - len(title))),
        _rule(),
        _ROW1.format("Card", "VF", "Name", "Firmware", "Bus-Id", "Util", "Ecc-Error"),
        _ROW2.format("Fan", "Temp", "Pwr:Usage/Cap", "Memory-Usage", "SR-IOV", "Compute-Mode"),
        _rule(ch="="),
    ]
    for card in shown:
        lines += _card_rows(card)
        lines.append(_rule())
    row = " {:<5} {:<3} {:<8} {:<35} {:>16}"
    lines += ["", "+" + "-" * (WIDTH - 2) + "+", _box("Processes:"),
              # The one line naming PID, and the last line naming MLU (scripts rely on both).
              _box(row.format("Card", "MI", "PID", "Command Line", "MLU Memory Usage")),
              "|" + "=" * (WIDTH - 2) + "|"]
    procs = [(card, p) for card in shown for p in card.processes]
    if not procs:
        lines.append(_box(" No running processes found"))
    for card, p in procs:
        # Eight fields, the PID 4th; the command is one word.
        command = "_".join(p.name.split()) or "?"
        lines.append(_box(row.format(card.index, "/", p.pid, command[:35],
                                     f"{C.mib(p.used_bytes)} MiB")))
    lines.append("+" + "-" * (WIDTH - 2) + "+")
    return "\n".join(lines)


def _info_block(card: C.Card, sections: set[str]) -> list[str]:
    kv = lambda k, v, indent=2: " " * indent + f"{k:<{32 - indent}}: {v}"  # noqa: E731
    out = [f"Card {card.index}",
           kv("Product Name", card.name),
           kv("UUID", card.uuid),
           kv("Firmware", "v" + C.FIRMWARE_VERSION),
           kv("Driver", "v" + C.DRIVER_VERSION),
           kv("Compute Mode", "Default"),
           kv("Bus-Id", card.bus_id)]
    if "p" in sections:
        out += ["  PCIe",
                kv("Generation", card.preset.pcie_generation, 4),
                kv("Width", f"x{card.preset.pcie_lanes}", 4)]
    if "u" in sections:
        out += ["  Utilization", kv("Average", f"{card.util_percent} %", 4)]
    if "t" in sections:
        out += ["  Temperature", kv("Chip", f"{card.temperature_c} C", 4)]
    if "m" in sections:
        out += ["  Physical Memory Usage",
                kv("Total", f"{C.mib(card.total_bytes)} MiB", 4),
                kv("Used", f"{C.mib(card.used_bytes)} MiB", 4),
                kv("Free", f"{C.mib(card.total_bytes - card.used_bytes)} MiB", 4)]
    if "w" in sections:
        out += ["  Power",
                kv("Usage", f"{card.power_w} W", 4),
                kv("Cap", f"{card.preset.power_cap_w} W", 4)]
    if "e" in sections:
        out += ["  ECC", kv("Mode", "N/A", 4)]
    if "r" in sections:
        out += ["  Processes"]
        out += [kv(f"PID {p.pid} ({p.name})", f"{C.mib(p.used_bytes)} MiB", 4)
                for p in card.processes] or ["    No running processes found"]
    return out


def _json_entry(card: C.Card) -> dict:
    return {
        "CardNum": card.index,
        "ProductName": card.name,
        "UUID": card.uuid,
        "BusId": card.bus_id,
        "Firmware": "v" + C.FIRMWARE_VERSION,
        "Driver": "v" + C.DRIVER_VERSION,
        "PhysicalMemUsage": {"Total": C.mib(card.total_bytes), "Used": C.mib(card.used_bytes),
                             "Free": C.mib(card.total_bytes - card.used_bytes)},
        "Temperature": {"Chip": card.temperature_c},
        "Utilization": {"MLUAverage": card.util_percent},
        "Power": {"Usage": card.power_w, "Cap": card.preset.power_cap_w},
        "Processes": [{"PID": p.pid, "Command": p.name, "PhysicalMemUsed": C.mib(p.used_bytes)}
                      for p in card.processes],
    }


def _select(cards: list[C.Card], index: int | None) -> list[C.Card] | None:
    if index is None:
        return cards
    return [cards[index]] if 0 <= index < len(cards) else None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cnmon", description="Status of the emulated MLU cards (cardsim).")
    p.add_argument("-c", "--card", type=int, help="show card N only")
    p.add_argument("-l", "--list", action="store_true", help="one line per card: model and UUID")
    sub = p.add_subparsers(dest="command", metavar="{info,mlulink}")
    info = sub.add_parser("info", help="key/value details per card")
    info.add_argument("-c", "--card", type=int, dest="info_card", help="card N only")
    for flag, long, what in (("-t", "--temperature", "temperature"), ("-m", "--memory", "memory"),
                             ("-u", "--util", "utilization"), ("-p", "--pcie", "PCIe link"),
                             ("-w", "--power", "power"), ("-e", "--ecc", "ECC"),
                             ("-r", "--processes", "processes")):
        info.add_argument(flag, long, action="store_true", help=f"show {what}")
    info.add_argument("-j", "--json", action="store_true",
                      help="also write cnmon_info.json in the current directory")
    link = sub.add_parser("mlulink", help="MLU-Link ports of a card")
    link.add_argument("-c", "--card", type=int, dest="link_card", help="card N only")
    link.add_argument("-s", "--status", action="store_true", help="link status (the default)")
    return p


def run(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    cards = C.system(DEFAULT_PRESET)

    if args.command == "info":
        index = args.info_card if args.info_card is not None else args.card
        shown = _select(cards, index)
        if shown is None:
            # Printed on stdout: scripts probe for cards with `cnmon info -c N | grep`.
            print(f"Card {index} not existed")
            return 1
        sections = {f for f, on in (("t", args.temperature), ("m", args.memory),
                                     ("u", args.util), ("p", args.pcie), ("w", args.power),
                                     ("e", args.ecc), ("r", args.processes)) if on}
        if not sections:
            sections = {"t", "m", "u", "p", "w", "e", "r"}
        blocks = [_info_block(card, sections) for card in shown]
        print("\n\n".join("\n".join(b) for b in blocks))
        if args.json:
            with open("cnmon_info.json", "w", encoding="utf-8") as f:
                json.dump({"CnmonInfo": [_json_entry(card) for card in shown]}, f, indent=2)
                f.write("\n")
        return 0

    if args.command == "mlulink":
        index = args.link_card if args.link_card is not None else args.card
        shown = _select(cards, index)
        if shown is None:
            print(f"Card {index} not existed")
            return 1
        blocks = []
        for card in shown:
            ports = C.links(cards, card.index)
            lines = [f"Card {card.index} ({card.name})"]
            if not ports:
                lines.append("  No MLU-Link ports on this card")
            for port, (peer, up) in enumerate(ports):
                lines += [f"  Port {port}",
                          f"    Status: {'Enable' if up else 'Disable'}",
                          f"    Remote Card: {peer if up else 'N/A'}"]
            blocks.append("\n".join(lines))
        print("\n\n".join(blocks))
        return 0

    shown = _select(cards, args.card)
    if shown is None:
        print(f"Card {args.card} not existed")
        return 1
    if args.list:
        for card in shown:
            print(f"Card {card.index}: {card.name} (UUID: {card.uuid})")
        return 0
    print(table(shown))
    return 0


def main(argv: list[str] | None = None) -> int:
    return C.tool_main("cnmon", run, argv)


if __name__ == "__main__":
    sys.exit(main())
