"""What the management tools show: the emulated cards, their live state, their links.

- The cards: ``CARDSIM_DEVICES`` of them (default 8), described by ``CARDSIM_PRESET`` (a
  preset name under simulator/presets, or a path to a .textproto file) with the overrides
  of ``CARDSIM_CONFIG`` that concern what is shown (``name``, ``vendor``,
  ``memory.capacity``, ``host_link.*``). The preset files are read directly, with a small
  reader of the protobuf text format, so the tools need neither torch nor the build: the
  product name and total memory are the ones ``get_device_properties`` reports.
- Their state: every process running the emulator keeps a status file (StatusBoard.h);
  the files of processes that are gone (or whose pid was reused) are ignored. A process
  counts on these cards when it emulates the same preset.
- What the model does not have (temperature, power, fan, firmware) is shown as fixed
  figures that follow utilization, so that the layouts are complete.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import sys
from dataclasses import dataclass, field

ROOT = pathlib.Path(__file__).resolve().parents[3]
PRESETS_DIR = ROOT / "simulator" / "presets"
MIB = 1024 * 1024
MAX_DEVICES = 4096          # as the runtime accepts in CARDSIM_DEVICES

# The versions the emulated driver stack reports (in the vendors' vX.Y.Z form).
DRIVER_VERSION = "5.10.13"
FIRMWARE_VERSION = "1.0.0"
TOOL_VERSION = "1.0.0"


class ToolError(Exception):
    """An error the tool reports on stderr and exits with (``code``)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


# ---- protobuf text format (the subset presets use) ---------------------------------------

_TOKEN = re.compile(r"""
    \s+ | \#[^\n]* |                                   # space, comments
    (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*') |
    (?P<word>[A-Za-z_][A-Za-z0-9_.]*|[-+]?[0-9][0-9A-Za-z_.+-]*) |
    (?P<punct>[{}<>\[\]:,;])
""", re.VERBOSE)


def _unquote(s: str) -> str:
    body = s[1:-1]
    if "\\" not in body:
        return body
    return body.encode("latin-1", "backslashreplace").decode("unicode_escape")


def parse_textproto(text: str, origin: str = "<text>") -> dict:
    """Parses protobuf text into {field: [values]}; a value is a str or a nested dict."""
    tokens = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            line = text.count("\n", 0, pos) + 1
            raise ToolError(f"{origin}:{line}: cannot read {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.group("str") is not None:
            tokens.append(("str", _unquote(m.group("str"))))
        elif m.group("word") is not None:
            tokens.append(("word", m.group("word")))
        elif m.group("punct") is not None:
            tokens.append(("punct", m.group("punct")))
    i = 0

    def message(closing):
        nonlocal i
        out: dict = {}
        while i < len(tokens):
            kind, tok = tokens[i]
            if kind == "punct" and tok == closing:
                i += 1
                return out
            if kind != "word":
                raise ToolError(f"{origin}: expected a field name, found {tok!r}")
            i += 1
            if i < len(tokens) and tokens[i] == ("punct", ":"):
                i += 1
            if i >= len(tokens):
                raise ToolError(f"{origin}: field {tok!r} has no value")
            out.setdefault(tok, []).extend(values())
            if i < len(tokens) and tokens[i][0] == "punct" and tokens[i][1] in ",;":
                i += 1
        if closing is not None:
            raise ToolError(f"{origin}: a block is not closed")
        return out

    def values():
        nonlocal i
        kind, tok = tokens[i]
        i += 1
        if kind == "punct" and tok in "{<":
            return [message("}" if tok == "{" else ">")]
        if kind == "punct" and tok == "[":
            vals = []
            while i < len(tokens) and tokens[i] != ("punct", "]"):
                if tokens[i] == ("punct", ","):
                    i += 1
                    continue
                vals.extend(values())
            i += 1
            return vals
        if kind == "str":
            # Adjacent strings concatenate.
            while i < len(tokens) and tokens[i][0] == "str":
                tok += tokens[i][1]
                i += 1
        return [tok]

    return message(None)


def _get(msg: dict, path: str):
    """The last value at a dotted path, or None; a Quantity block gives its value."""
    cur = msg
    for key in path.split("."):
        if not isinstance(cur, dict) or not cur.get(key):
            return None
        cur = cur[key][-1]
    if isinstance(cur, dict) and "value" in cur:
        cur = cur["value"][-1]
    return cur


_BYTE_UNITS = {"B": 1, "KB": 1e3, "kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12,
               "KiB": 1024, "MiB": MIB, "GiB": 1024 ** 3, "TiB": 1024 ** 4}


def parse_bytes(text: str, where: str) -> int:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]+)\s*", text or "")
    if not m or m.group(2) not in _BYTE_UNITS:
        raise ToolError(f"{where}: {text!r} is not a size (like \"24 GiB\"; units "
                        f"{', '.join(_BYTE_UNITS)})")
    return int(float(m.group(1)) * _BYTE_UNITS[m.group(2)])


# ---- presets -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Topology:
    """How a preset's devices connect: groups of `group` devices fully connected by `link`
    (one logical link per pair), `per_board` devices per board; None: PCIe only."""
    link: str | None = None        # "MLU-Link", "BLink"
    group: int = 1
    per_board: int = 1
    note: str = ""


# Until every preset carries a fabric block, the shapes vendor-facts.md section 6 gives.
_KNOWN_TOPOLOGIES = {
    "mlu370-x8": Topology("MLU-Link", 8, 2, "an MLU-Link bridge joins 4 cards = 8 chips, "
                          "fully connected; 2 chips per card"),
    "mlu590": Topology("MLU-Link", 8, 1, "assumed (hypothetical card): 8 devices fully "
                       "connected"),
    "br100": Topology("BLink", 8, 1, "8 BLink ports per GPU: up to 8 BR100s in a full mesh"),
}


@dataclass(frozen=True)
class Preset:
    name: str                 # registry name, e.g. "mlu370-x8"
    card: str                 # product name, e.g. "MLU370-X8"
    vendor: str
    total_bytes: int
    pcie_generation: int
    pcie_lanes: int
    topology: Topology
    power_cap_w: int


# Board power: what the presets do not model; per device as the vendor tools show it.
_POWER_CAP_W = {"mlu370-x8": 250, "mlu370-x4": 150, "br100": 550, "br104": 300}
_DEFAULT_POWER_CAP_W = 300    # assumed for cards without a published figure


def preset_names() -> list[str]:
    return sorted(p.stem for p in PRESETS_DIR.glob("*.textproto"))


def _topology_of(top: dict, name: str) -> Topology:
    fabric = _get(top, "fabric") or _get(top, "device.fabric")
    if isinstance(fabric, dict):
        shape = str(_get(fabric, "shape") or "").lower()
        per_node = int(float(_get(fabric, "devices_per_node") or 8))
        chips = int(float(_get(fabric, "chips_per_card") or 1))
        link = "BLink" if "mesh" in shape else "MLU-Link" if "card" in shape else None
        if link:
            return Topology(link, per_node, chips if "card" in shape else 1, "from the preset")
    return _KNOWN_TOPOLOGIES.get(name, Topology())


def load_preset(name_or_path: str, overrides_file: str | None = None) -> Preset:
    is_path = "/" in name_or_path or name_or_path.endswith(".textproto")
    if not is_path:   # preset names in any case, as the simulator takes them
        name_or_path = {n.lower(): n for n in preset_names()}.get(name_or_path.lower(), name_or_path)
    path = pathlib.Path(name_or_path) if is_path else PRESETS_DIR / f"{name_or_path}.textproto"
    if not is_path and not path.is_file():
        raise ToolError(f"unknown preset \"{name_or_path}\" (valid presets: "
                        f"{', '.join(preset_names())}; or a path to a .textproto file)", 2)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ToolError(f"cannot read preset {path}: {e.strerror}", 2)
    top = parse_textproto(text, str(path))
    device = _get(top, "device")
    if not isinstance(device, dict):
        raise ToolError(f"{path}: no device block", 2)
    fields = {k: _get(device, k) for k in ("name", "vendor", "memory.capacity",
                                           "host_link.pcie_generation", "host_link.lanes")}
    origin = {k: str(path) for k in fields}
    if overrides_file:
        try:
            lines = pathlib.Path(overrides_file).read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise ToolError(f"CARDSIM_CONFIG={overrides_file}: {e.strerror}", 2)
        for n, line in enumerate(lines, 1):
            key, eq, value = line.split("#", 1)[0].partition("=")
            if eq and key.strip() in fields:
                fields[key.strip()] = value.strip()
                origin[key.strip()] = f"{overrides_file}:{n}"
    name = str(_get(top, "name") or name_or_path)

    def count(key, default):
        try:
            return int(float(fields[key]))
        except (TypeError, ValueError):
            return default

    return Preset(
        name=name,
        card=str(fields["name"] or name),
        vendor=str(fields["vendor"] or ""),
        total_bytes=parse_bytes(str(fields["memory.capacity"]),
                                f"{origin['memory.capacity']}: memory.capacity"),
        pcie_generation=count("host_link.pcie_generation", 4),
        pcie_lanes=count("host_link.lanes", 16),
        topology=_topology_of(top, name),
        power_cap_w=_POWER_CAP_W.get(name, _DEFAULT_POWER_CAP_W),
    )


# ---- running emulator processes ------------------------------------------------------------

def status_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("CARDSIM_STATUS_DIR") or f"/tmp/cardsim-status-{os.getuid()}")


def _start_ticks(pid: int) -> str | None:
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 1:].split()
    return fields[19] if len(fields) > 19 else None


def _alive(status: dict) -> bool:
    pid = status.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    ticks = _start_ticks(pid)
    recorded = str(status.get("start_ticks", "0"))
    return ticks is None or recorded == "0" or ticks == recorded


def running_processes() -> list[dict]:
    """The status of every live emulator process, by pid."""
    out = []
    for path in status_dir().glob("[0-9]*.json"):
        try:
            status = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue          # being replaced, or not ours
        if isinstance(status, dict) and _alive(status):
            out.append(status)
    return sorted(out, key=lambda s: s["pid"])


# ---- the system as a tool shows it ----------------------------------------------------------

@dataclass
class Process:
    pid: int
    name: str
    cmdline: str
    used_bytes: int


@dataclass
class Card:
    index: int
    preset: Preset
    uuid: str
    bus_id: str
    used_bytes: int = 0
    utilization: float = 0.0           # 0..1: some kernel ran (the clusters' busy share)
    memory_utilization: float = 0.0    # 0..1: some traffic moved through the device memory
    processes: list[Process] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.preset.card

    @property
    def total_bytes(self) -> int:
        return self.preset.total_bytes

    @property
    def util_percent(self) -> int:
        return int(round(100 * self.utilization))

    @property
    def memory_util_percent(self) -> int:
        return int(round(100 * self.memory_utilization))

    @property
    def temperature_c(self) -> int:
        return 30 + int(round(30 * self.utilization))

    @property
    def power_w(self) -> int:
        return int(round(self.preset.power_cap_w * (0.15 + 0.7 * self.utilization)))


def _uuid(preset: str, index: int) -> str:
    h = hashlib.sha1(f"cardsim/{preset}/{index}".encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def pci_address(index: int) -> tuple[int, int, int]:
    """Card `index`'s PCI (domain, bus, device): one card per bus from 0x1a."""
    bus = 0x1a + index
    return bus // 256, bus % 256, 0


def _bus_id(index: int) -> str:
    domain, bus, device = pci_address(index)
    return f"{domain:04x}:{bus:02x}:{device:02x}.0"


card_uuid = _uuid


def physical_index(visible_env: str, index: int) -> int:
    """The system's card behind a process's device `index` under a visible-devices variable
    (MLU_VISIBLE_DEVICES=3,5: device 1 is card 5)."""
    listed = [x.strip() for x in os.environ.get(visible_env, "").split(",") if x.strip()]
    if os.environ.get(visible_env) and index < len(listed) and listed[index].isdigit():
        return int(listed[index])
    return index


def device_count() -> int:
    raw = os.environ.get("CARDSIM_DEVICES", "")
    if not raw:
        return 8
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_DEVICES:
        raise ToolError(f"CARDSIM_DEVICES=\"{raw}\" is not a device count between 1 and "
                        f"{MAX_DEVICES}", 2)
    return int(raw)


def system(default_preset: str) -> list[Card]:
    """The cards, with what the running emulator processes of the same preset hold."""
    preset = load_preset(os.environ.get("CARDSIM_PRESET") or default_preset,
                         os.environ.get("CARDSIM_CONFIG") or None)
    cards = [Card(i, preset, _uuid(preset.name, i), _bus_id(i)) for i in range(device_count())]
    for status in running_processes():
        if status.get("preset") != preset.name:
            continue
        for dev in status.get("devices", []):
            i = dev.get("index")
            if not isinstance(i, int) or not 0 <= i < len(cards):
                continue
            used = int(dev.get("used_bytes", 0))
            card = cards[i]
            card.utilization = min(1.0, card.utilization + float(dev.get("utilization", 0.0)))
            card.memory_utilization = min(1.0, card.memory_utilization + float(dev.get("memory_utilization", 0.0)))
            if used > 0:
                card.used_bytes += used
                card.processes.append(Process(int(status["pid"]), str(status.get("name", "?")),
                                              str(status.get("cmdline", "")), used))
    return cards


def links(cards: list[Card], index: int) -> list[tuple[int, bool]]:
    """The logical links of device `index`: (peer index, up). A link to a peer the system
    does not have (a partly populated group) is down."""
    topo = cards[0].preset.topology
    if not topo.link:
        return []
    first = index // topo.group * topo.group
    return [(p, p < len(cards)) for p in range(first, first + topo.group) if p != index]


def relation(cards: list[Card], a: int, b: int) -> str:
    """'self', 'link' (a direct fabric link), or 'pcie'."""
    if a == b:
        return "self"
    topo = cards[0].preset.topology
    if topo.link and a // topo.group == b // topo.group:
        return "link"
    return "pcie"


def mib(n: int) -> int:
    return n // MIB


def tool_main(name: str, run, argv: list[str] | None) -> int:
    """Runs a tool's `run(args)`: its errors print as "name: message" with their exit status;
    a closed pipe (`tool | head`) is not an error."""
    try:
        return run(sys.argv[1:] if argv is None else argv)
    except ToolError as e:
        print(f"{name}: {e}", file=sys.stderr)
        return e.code
    except BrokenPipeError:
        return 0

