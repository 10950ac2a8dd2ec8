"""cnmon and brsmi, the management tools of the emulated cards (accelerators/python/
cardsim_tools, launched from .venv/bin): their layouts as the scripts that read the vendors'
tools parse them, what the configuration changes, and running emulator processes seen
through the status files the driver shim keeps (driver_shim/src/StatusBoard.h).

Every test points CARDSIM_STATUS_DIR at a directory of its own, so that processes running
elsewhere on the machine do not show."""
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
BIN = ROOT / ".venv" / "bin"
PYTHON = str(BIN / "python")
MIB = 1024 * 1024
SCRUB = ("CARDSIM_PRESET", "CARDSIM_DEVICES", "CARDSIM_CONFIG", "CARDSIM_STATUS_DIR",
         "MLU_VISIBLE_DEVICES", "SUPA_VISIBLE_DEVICES")


@pytest.fixture
def status_dir(tmp_path):
    d = tmp_path / "status"
    d.mkdir()
    return d


@pytest.fixture
def tool(status_dir):
    """tool("cnmon", "-l", env={...}, cwd=...) -> CompletedProcess."""
    def run(name, *args, env=None, cwd=None):
        exe = BIN / name
        if not exe.exists():
            pytest.fail(f"{exe} is missing: run scripts/setup.sh first")
        e = {k: v for k, v in os.environ.items() if k not in SCRUB}
        e["CARDSIM_STATUS_DIR"] = str(status_dir)
        e.update(env or {})
        return subprocess.run([str(exe), *args], capture_output=True, text=True, env=e,
                              cwd=cwd, timeout=60)
    return run


def ok(proc):
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def grep(text, word):
    return [line for line in text.splitlines() if word in line]


def awk_fields(line):
    """awk's $1..$NF (1-based: index 0 is unused)."""
    return [line] + line.split()


def flagperf_rows(table):
    """FlagPerf's monitor: paste <(cnmon | grep Default) <(cnmon | grep MLU | head -n -1)
    | awk '{print $3,$4,$5,$9,$10,$11,$25}', one row per card as
    (temperature, power, 'W/', used, 'MiB/', total, utilization)."""
    default = grep(table, "Default")
    mlu = grep(table, "MLU")[:-1]
    assert len(default) == len(mlu), (default, mlu)
    return [tuple(awk_fields(a + "\t" + b)[i] for i in (3, 4, 5, 9, 10, 11, 25))
            for a, b in zip(default, mlu)]


def process_pids(table):
    """A checker script's running-process scan: the lines after the (one) line naming PID
    that have 8 fields; $4 is the PID."""
    header = [n for n, line in enumerate(table.splitlines(), 1) if "PID" in line]
    assert len(header) == 1, header
    return [awk_fields(line)[4] for n, line in enumerate(table.splitlines(), 1)
            if n > header[0] and len(line.split()) == 8]


def own_status(status_dir, devices, preset="mlu370-x8", total=23374 * MIB, pid=None,
               start_ticks=None, name="trainer"):
    """Writes a status file as a running emulator process would, for this test process (or
    `pid`); `devices` maps index -> (used bytes, utilization[, memory utilization])."""
    pid = pid or os.getpid()
    if start_ticks is None:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
        start_ticks = int(stat[stat.rfind(")") + 1:].split()[19])
    n = max(8, max(devices, default=0) + 1)
    doc = {"format": 1, "pid": pid, "start_ticks": start_ticks, "name": name,
           "cmdline": f"python {name}.py", "preset": preset, "card": "?", "vendor": "?",
           "simulated_s": 1.0, "utilization_window_s": 0.5,
           "devices": [{"index": i, "used_bytes": devices.get(i, (0, 0))[0], "total_bytes": total,
                        "utilization": devices.get(i, (0, 0))[1],
                        "memory_utilization": (devices.get(i, (0, 0)) + (0,))[2]} for i in range(n)]}
    (status_dir / f"{pid}.json").write_text(json.dumps(doc))


def dead_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


# ---- cnmon layouts ---------------------------------------------------------------------------

def test_cnmon_table_parses_as_flagperf_reads_it(tool):
    table = ok(tool("cnmon"))
    rows = flagperf_rows(table)
    assert len(rows) == 8
    for temp, power, w, used, mib, total, util in rows:
        assert re.fullmatch(r"\d+C", temp), temp
        assert power.isdigit() and w == "W/" and mib == "MiB/"
        assert used == "0" and total == "23374"
        assert re.fullmatch(r"\d+%", util), util
    for line in grep(table, "Default"):
        assert re.search(r"\d+ W/ 250 W", line) and " 0 MiB/ 23374 MiB " in line, line
    assert grep(table, "MLU")[-1].split()[-4:] == ["MLU", "Memory", "Usage", "|"]
    assert "No running processes found" in table and process_pids(table) == []
    # Every line of the table has the same width.
    assert len({len(line) for line in table.splitlines() if line}) == 1


def test_cnmon_version_driver_and_list(tool):
    table = ok(tool("cnmon"))
    version = [awk_fields(line)[3] for line in grep(table, "CNMON")]
    assert len(version) == 1 and re.fullmatch(r"v\d+\.\d+\.\d+", version[0]), version
    assert re.search(r"Driver (v\d+\.\d+\.\d+)", table).group(1) == version[0]

    listing = ok(tool("cnmon", "-l"))
    lines = listing.splitlines()
    assert len(lines) == 8 and len(grep(listing, "MLU")) == 8 and len(grep(listing, "UUID")) == 8
    assert all("MLU370-X8" in line for line in lines)
    uuids = [re.search(r"UUID: ([0-9a-f-]{36})", line).group(1) for line in lines]
    assert len(set(uuids)) == 8


def test_cnmon_card_filter_and_missing_cards(tool):
    one = ok(tool("cnmon", "-c", "3"))
    rows = flagperf_rows(one)
    assert len(rows) == 1 and grep(one, "X8") and "| 3 " in grep(one, "MLU370")[0]

    for args in (("info", "-c", "8"), ("-c", "8"), ("mlulink", "-c", "12", "-s")):
        p = tool("cnmon", *args)
        assert p.returncode == 1 and "not existed" in p.stdout, (args, p)
    # A checker probing 16 cards finds the 8 there are.
    present = [i for i in range(16) if "not existed" not in tool("cnmon", "info", "-c", str(i)).stdout]
    assert present == list(range(8))

    bad = tool("cnmon", "info", "-c", "x")
    assert bad.returncode == 2 and "invalid int value" in bad.stderr


@pytest.mark.parametrize("preset,bf16", [("mlu370-x8", False), ("mlu370-x4", False), ("mlu590", True)])
def test_cnmon_info_t_names_an_mlu5xx_only_on_one(tool, preset, bf16):
    out = ok(tool("cnmon", "info", "-c", "0", "-t", env={"CARDSIM_PRESET": preset}))
    found = re.compile("MLU5[0-9]*-?[0-9a-zA-Z]*").findall(out)
    assert bool(found) == bf16, out
    if bf16:
        assert found[0] == "MLU590"
    assert re.search(r"Product Name\s*: MLU", out) and re.search(r"Chip\s*: \d+ C", out)


def test_cnmon_mlulink_status(tool):
    def values(out):   # awk -F ':' '{if (NF == 2) print $2}'
        return [line.split(":")[1] for line in out.splitlines() if len(line.split(":")) == 2]

    full = ok(tool("cnmon", "mlulink", "-c", "0", "-s"))
    assert not [v for v in values(full) if "Disable" in v]
    assert len(grep(full, "Status: Enable")) == 7      # the 7 other chips of the bridge group
    # Two devices: the bridge is mostly empty, and the ports to absent chips are down.
    part = ok(tool("cnmon", "mlulink", "-c", "0", "-s", env={"CARDSIM_DEVICES": "2"}))
    assert len([v for v in values(part) if "Disable" in v]) == 6
    assert grep(part, "Remote Card: 1")
    # A card without MLU-Link has no ports to be down.
    x4 = ok(tool("cnmon", "mlulink", "-c", "0", "-s", env={"CARDSIM_PRESET": "mlu370-x4"}))
    assert not [v for v in values(x4) if "Disable" in v] and "No MLU-Link" in x4


def test_cnmon_json_export(tool, status_dir, tmp_path):
    own_status(status_dir, {2: (128 * MIB, 0.5)})
    out = tool("cnmon", "info", "-e", "-m", "-u", "-j", cwd=tmp_path)
    ok(out)
    doc = json.loads((tmp_path / "cnmon_info.json").read_text())
    cards = doc["CnmonInfo"]
    assert [c["CardNum"] for c in cards] == list(range(8))
    for c in cards:
        assert c["ProductName"] == "MLU370-X8"
        assert re.fullmatch(r"[0-9a-f-]{36}", c["UUID"])
        assert c["PhysicalMemUsage"]["Total"] == 23374
        assert isinstance(c["Temperature"]["Chip"], int)
        assert c["PhysicalMemUsage"]["Used"] == (128 if c["CardNum"] == 2 else 0)
        assert c["Utilization"]["MLUAverage"] == (50 if c["CardNum"] == 2 else 0)
    listing_uuids = [re.search(r"UUID: (\S+)\)", line).group(1)
                     for line in ok(tool("cnmon", "-l")).splitlines()]
    assert [c["UUID"] for c in cards] == listing_uuids
    # -c N exports one card.
    ok(tool("cnmon", "info", "-c", "2", "-j", cwd=tmp_path))
    one = json.loads((tmp_path / "cnmon_info.json").read_text())["CnmonInfo"]
    assert len(one) == 1 and one[0]["CardNum"] == 2 and one[0]["Processes"][0]["PID"] == os.getpid()


# ---- brsmi -----------------------------------------------------------------------------------

@pytest.mark.parametrize("devices", [None, "3"])
def test_brsmi_gpu_list_has_one_gpu_line_per_device(tool, devices):
    out = ok(tool("brsmi", "gpu", "list", env={"CARDSIM_DEVICES": devices} if devices else {}))
    # DeepSpeed's harness: sum(1 for line in out.splitlines() if "GPU" in line)
    assert sum(1 for line in out.splitlines() if "GPU" in line) == int(devices or 8)
    assert all("BR100" in line for line in out.splitlines())


def test_brsmi_query_gpu_csv(tool, status_dir):
    own_status(status_dir, {1: (100 * MIB, 0.25, 0.6)}, preset="br100", total=65536 * MIB)
    out = ok(tool("brsmi", "gpu", "--query-gpu=index,name,memory.used,memory.total,utilization.gpu,uuid,"
                  "utilization.memory", "--format=csv"))
    lines = out.splitlines()
    assert lines[0] == ("index, name, memory.used [MiB], memory.total [MiB], utilization.gpu [%], uuid, "
                        "utilization.memory [%]")
    assert len(lines) == 9
    assert lines[2].split(", ")[:5] == ["1", "BR100", "100 MiB", "65536 MiB", "25 %"]
    assert lines[2].split(", ")[6] == "60 %" and lines[1].split(", ")[6] == "0 %"
    assert re.fullmatch(r"GPU-[0-9a-f-]{36}", lines[1].split(", ")[5])

    bare = ok(tool("brsmi", "gpu", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"))
    assert bare.splitlines()[:3] == ["0, 0", "1, 100", "2, 0"]
    one = ok(tool("brsmi", "gpu", "-i", "1", "--query-gpu=name,memory.free", "--format=csv,noheader"))
    assert one.strip() == "BR100, 65436 MiB"


def test_brsmi_errors(tool):
    bad = tool("brsmi", "gpu", "--query-gpu=index,memory.usedd", "--format=csv")
    assert bad.returncode == 2 and bad.stdout == ""
    assert '"memory.usedd"' in bad.stderr and "index, name" in bad.stderr and "memory.used," in bad.stderr
    no_format = tool("brsmi", "gpu", "--query-gpu=index")
    assert no_format.returncode == 2 and "--format" in no_format.stderr
    bad_format = tool("brsmi", "gpu", "--query-gpu=index", "--format=json")
    assert bad_format.returncode == 2 and "csv" in bad_format.stderr
    no_gpu = tool("brsmi", "gpu", "-i", "8", "--query-gpu=index", "--format=csv")
    assert no_gpu.returncode == 1 and "no GPU 8" in no_gpu.stderr
    assert tool("brsmi", "gpu", "frobnicate").returncode == 2


def test_brsmi_version_and_summary(tool):
    assert re.search(r"version: \d+\.\d+\.\d+", ok(tool("brsmi", "--version")))
    summary = ok(tool("brsmi"))
    assert len(grep(summary, "BR100")) == 8 and "65536MiB" in summary
    assert "No running processes found" in summary


def test_brsmi_topology(tool):
    def matrix(out):
        lines = out.splitlines()
        heads = lines[0].split()
        return heads, {l.split()[0]: l.split()[1:] for l in lines[1:] if l.startswith("GPU")}

    heads, rows = matrix(ok(tool("brsmi", "topo", "-m")))
    assert heads == [f"GPU{i}" for i in range(8)] and len(rows) == 8
    for i in range(8):
        assert rows[f"GPU{i}"] == ["X" if j == i else "BL1" for j in range(8)]   # full mesh
    # 16 BR100s: two meshes of 8, joined over PCIe.
    _, rows = matrix(ok(tool("brsmi", "topo", "-m", env={"CARDSIM_DEVICES": "16"})))
    assert rows["GPU0"][7] == "BL1" and rows["GPU0"][8] == "PHB" and rows["GPU9"][15] == "BL1"
    # A card without BLink: PCIe only.
    _, rows = matrix(ok(tool("brsmi", "topo", "-m", env={"CARDSIM_PRESET": "br104"})))
    assert set(rows["GPU0"][1:]) == {"PHB"}


# ---- what the configuration changes -------------------------------------------------------------

def test_devices_and_preset_decide_what_is_shown(tool, tmp_path):
    three = ok(tool("cnmon", "-l", env={"CARDSIM_DEVICES": "3"}))
    assert len(three.splitlines()) == 3
    rows = flagperf_rows(ok(tool("cnmon", env={"CARDSIM_PRESET": "mlu590", "CARDSIM_DEVICES": "2"})))
    assert [r[5] for r in rows] == ["81920", "81920"]
    assert "MLU590" in ok(tool("cnmon", "-l", env={"CARDSIM_PRESET": "mlu590"}))
    assert "MLU590" in ok(tool("cnmon", "-l", env={"CARDSIM_PRESET": "MLU590"}))   # names in any case
    out = ok(tool("brsmi", "gpu", "--query-gpu=name,memory.total", "--format=csv,noheader",
                  env={"CARDSIM_PRESET": "br104", "CARDSIM_DEVICES": "2"}))
    assert out.splitlines() == ["BR104, 32768 MiB"] * 2
    # A preset file, and CARDSIM_CONFIG overrides of what is shown.
    custom = tmp_path / "custom.textproto"
    text = (ROOT / "simulator" / "presets" / "mlu370-x4.textproto").read_text()
    custom.write_text(text.replace('name: "mlu370-x4"', 'name: "my-x4"'))
    overrides = tmp_path / "overrides.conf"
    overrides.write_text("# smaller\nmemory.capacity = 16 GiB   # a comment\nname = MLU370-S4\n")
    out = ok(tool("cnmon", "-l", env={"CARDSIM_PRESET": str(custom), "CARDSIM_DEVICES": "1",
                                      "CARDSIM_CONFIG": str(overrides)}))
    assert out.startswith("Card 0: MLU370-S4 (UUID:")
    assert "0 MiB/ 16384 MiB" in ok(tool("cnmon", env={"CARDSIM_CONFIG": str(overrides)}))


def test_configuration_errors(tool):
    p = tool("cnmon", env={"CARDSIM_PRESET": "mlu9000"})
    assert p.returncode == 2 and 'unknown preset "mlu9000"' in p.stderr and "mlu370-x8" in p.stderr
    p = tool("brsmi", "gpu", "list", env={"CARDSIM_DEVICES": "0"})
    assert p.returncode == 2 and 'CARDSIM_DEVICES="0"' in p.stderr


@pytest.mark.parametrize("card,preset", [("mlu", "mlu370-x8"), ("mlu", "mlu590"), ("supa", "br100")])
def test_names_and_memory_agree_with_the_runtime(tool, status_dir, card, preset):
    """What the tools show is what get_device_properties reports."""
    env = {k: v for k, v in os.environ.items() if k not in SCRUB}
    env.update({"CARDSIM_PRESET": preset, "CARDSIM_DEVICES": "2",
                "CARDSIM_STATUS_DIR": str(status_dir)})
    code = (f"import torch, torch_{card}; p = torch.{card}.get_device_properties(1); "
            "print(p.name, p.total_memory)")
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    name, total = ok(out).split()
    if card == "supa":
        out = ok(tool("brsmi", "gpu", "-i", "1", "--query-gpu=name,memory.total",
                      "--format=csv,noheader,nounits", env={"CARDSIM_PRESET": preset}))
        assert out.strip() == f"{name}, {int(total) // MIB}"
    else:
        line = ok(tool("cnmon", "-l", "-c", "1", env={"CARDSIM_PRESET": preset}))
        assert line.startswith(f"Card 1: {name} (UUID:")
        assert flagperf_rows(ok(tool("cnmon", "-c", "1", env={"CARDSIM_PRESET": preset})))[0][5] == \
            str(int(total) // MIB)


# ---- running processes ------------------------------------------------------------------------

def test_status_files_of_gone_or_reused_pids_are_ignored(tool, status_dir):
    own_status(status_dir, {0: (10 * MIB, 0.0)}, pid=dead_pid(), start_ticks=1)
    own_status(status_dir, {1: (20 * MIB, 0.0)}, pid=1, start_ticks=1)    # pid 1 is not that process
    (status_dir / "77.json").write_text("{ half written")
    table = ok(tool("cnmon"))
    assert [r[3] for r in flagperf_rows(table)] == ["0"] * 8 and process_pids(table) == []
    own_status(status_dir, {1: (20 * MIB, 0.0)})
    table = ok(tool("cnmon"))
    assert [r[3] for r in flagperf_rows(table)] == ["0", "20"] + ["0"] * 6
    assert process_pids(table) == [str(os.getpid())]
    # Another preset's processes are not on these cards.
    assert "No running processes found" in ok(tool("cnmon", env={"CARDSIM_PRESET": "mlu590"}))


CHILD = textwrap.dedent("""\
    import sys, torch, torch_{card}
    x = torch.empty(64 * 1024 * 1024, dtype=torch.uint8, device="{card}:1")
    print("ready", flush=True)
    sys.stdin.readline()
    """)


def _wait_until(check, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result or time.monotonic() > deadline:
            return result
        time.sleep(0.1)


@pytest.mark.parametrize("card,visible,physical", [("mlu", None, 1), ("mlu", "3,5", 5),
                                                   ("supa", None, 1)])
def test_a_running_emulator_process_shows_until_it_exits(tool, status_dir, card, visible, physical):
    env = {k: v for k, v in os.environ.items() if k not in SCRUB}
    env["CARDSIM_STATUS_DIR"] = str(status_dir)
    if visible:
        env[f"{card.upper()}_VISIBLE_DEVICES"] = visible
    child = subprocess.Popen([PYTHON, "-c", CHILD.format(card=card)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        if card == "mlu":
            def used():
                rows = flagperf_rows(ok(tool("cnmon")))
                return [int(r[3]) for r in rows] if rows[physical][3] == "64" else None
            assert _wait_until(used) == [64 if i == physical else 0 for i in range(8)]
            table = ok(tool("cnmon"))
            assert process_pids(table) == [str(child.pid)]
            proc_line = [l for l in table.splitlines() if str(child.pid) in l][0]
            assert proc_line.split()[1] == str(physical) and proc_line.split()[5:7] == ["64", "MiB"]
            info = ok(tool("cnmon", "info", "-c", str(physical), "-m"))
            assert re.search(r"Used\s*: 64 MiB", info)
        else:
            def used():
                out = ok(tool("brsmi", "gpu", "--query-gpu=index,memory.used",
                              "--format=csv,noheader,nounits"))
                values = [int(l.split(", ")[1]) for l in out.splitlines()]
                return values if values[physical] == 64 else None
            assert _wait_until(used) == [64 if i == physical else 0 for i in range(8)]
            summary = ok(tool("brsmi"))
            assert [l for l in summary.splitlines() if f" {child.pid} " in l and "64MiB" in l]
        assert (status_dir / f"{child.pid}.json").exists()
    finally:
        child.stdin.write("\n")
        child.stdin.close()
        rc = child.wait(timeout=60)
    assert rc == 0, child.stderr.read()
    assert not (status_dir / f"{child.pid}.json").exists(), "the status file outlived its process"
    if card == "mlu":
        table = ok(tool("cnmon"))
        assert [r[3] for r in flagperf_rows(table)] == ["0"] * 8 and process_pids(table) == []
    else:
        assert "No running processes found" in ok(tool("brsmi"))


def test_the_tools_start_without_torch(tool):
    """The tools never import torch (they must start fast)."""
    code = ("import sys; sys.argv = ['cnmon', '-l']; sys.path.insert(0, %r); "
            "from cardsim_tools import cnmon, brsmi; cnmon.main(['-l']); brsmi.main(['gpu', 'list']); "
            "assert 'torch' not in sys.modules, 'torch imported'" % str(ROOT / "accelerators" / "python"))
    env = {k: v for k, v in os.environ.items() if k not in SCRUB}
    ok(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_process_ended_by_sigterm_or_sighup_leaves_no_status_file(status_dir, sig):
    # A launcher stopping its ranks sends SIGTERM, which runs no atexit handler: the
    # runtime removes the file itself, then the signal ends the process as it would have.
    env = {k: v for k, v in os.environ.items() if k not in SCRUB}
    env["CARDSIM_STATUS_DIR"] = str(status_dir)
    # The signal's default action, whatever the test runner inherited (under nohup SIGHUP
    # is ignored, and a process that ignores it rightly survives it).
    child = subprocess.Popen([PYTHON, "-c", CHILD.format(card="mlu")], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                             preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    try:
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
        assert _wait_until(lambda: (status_dir / f"{child.pid}.json").exists() or None)
        child.send_signal(sig)
        rc = child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
    assert rc == -sig, (rc, child.stderr.read())   # still ended by the signal
    assert list(status_dir.iterdir()) == [], list(status_dir.iterdir())
