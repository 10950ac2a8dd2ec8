"""Traces: a program on the emulated card records (CARDSIM_TRACE, or torch.<dev>.record_trace)
and `cardsim info` reads it back: record counts match what the program did, device commands
match the card's own activity records, and recorded_total_us is the program's own measure.
Bad input (truncated, corrupt, foreign, newer-major, missing rank files) exits 2 naming
the file."""
import json
import os
import pathlib
import re
import subprocess
import zlib

import pytest

from conftest import ROOT

CARDSIM = ROOT / ".venv" / "bin" / "cardsim"
DEMO = ROOT / "build" / "driver_shim" / "cardsim_stream_timeline"
CARDS = ["mlu", "supa"]
PRESET = {"mlu": "mlu370-x8", "supa": "br100"}


def info(path, *extra):
    return subprocess.run([str(CARDSIM), "info", str(path), *extra], capture_output=True, text=True, timeout=120)


def info_json(path):
    res = info(path, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


# A small training step inside record_trace, then a large matmul so that the run ends on
# the device: the host clock after the final synchronize is the last device completion.
CTX_PROG = r"""
import json, sys, torch, importlib
card, out, k = sys.argv[1], sys.argv[2], int(sys.argv[3])
importlib.import_module("torch_" + card)
from cardsim_torch import _C
dm = getattr(torch, card)
dm.init()
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).to(card)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
x = torch.randn(4, 16).to(card)
big = torch.randn(1024, 1024).to(card)
acc = torch.zeros(64, device=card)
dm.synchronize()
_C._set_activity_recording(True)
_C._drain_activities()
with dm.record_trace(out) as path:
    assert dm.trace_path() == path
    t0 = dm.host_time_ns()
    for _ in range(k):
        acc.add_(1.0)
    loss = m(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    y = big @ big
    dm.synchronize()
    t1 = dm.host_time_ns()
    acts = _C._drain_activities()
assert dm.trace_path() is None
print("RESULT " + json.dumps(dict(path=path, t0_ns=t0, t1_ns=t1, activities=len(acts),
                                  kernels=sum(1 for a in acts if a[0] == "kernel"))))
"""


def run_ctx(py, card, out, k):
    res = py(CTX_PROG, args=(card, str(out), str(k)))
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(next(l for l in res.stdout.splitlines() if l.startswith("RESULT "))[7:])


@pytest.mark.parametrize("card", CARDS)
def test_record_trace_counts_and_makespan_match_the_program(py, card, tmp_path):
    out = tmp_path / "tr"
    got = run_ctx(py, card, out, 3)
    assert got["path"] == str(out / "rank0.cstrace")
    j = info_json(out)
    assert j["preset"] == PRESET[card]
    assert j["world_size"] == 1 and j["ranks"] == [0]
    rec = j["records"]
    # Every kernel the card ran was a recorded launch, and every command the card completed
    # (the program's own activity records) is in the trace, tied to the call that made it.
    assert rec["kernel_launch"] == got["kernels"] > 0
    assert j["device_commands"] == rec["device_command"] == got["activities"]
    assert j["uncorrelated_commands"] == 0
    assert rec.get("alloc", 0) > 0
    assert rec["api_device_synchronize"] == 1
    # The makespan is the program's: from its first call in the block to the end of the
    # matmul, which the final synchronize waited for.
    assert j["first_host_ps"] == pytest.approx(got["t0_ns"] * 1e3, abs=1)
    assert j["last_device_end_ps"] == pytest.approx(got["t1_ns"] * 1e3, abs=1)
    assert j["recorded_total_us"] == pytest.approx((got["t1_ns"] - got["t0_ns"]) / 1e3, abs=1e-5)


def test_each_extra_launch_is_one_more_kernel_launch_record(py, tmp_path):
    a = run_ctx(py, "mlu", tmp_path / "a", 2)
    b = run_ctx(py, "mlu", tmp_path / "b", 7)
    ja, jb = info_json(tmp_path / "a"), info_json(tmp_path / "b")
    assert jb["records"]["kernel_launch"] - ja["records"]["kernel_launch"] == 5
    assert jb["device_commands"] - ja["device_commands"] == 5
    assert b["kernels"] - a["kernels"] == 5


ENV_PROG = r"""
import sys, torch, importlib
card = sys.argv[1]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
m = torch.nn.Linear(16, 8).to(card)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
m(torch.randn(4, 16).to(card)).sum().backward()
opt.step()
dm.synchronize()
"""


@pytest.mark.parametrize("card", CARDS)
def test_cardsim_trace_records_the_whole_process_as_its_rank(py, card, tmp_path):
    out = tmp_path / "env" / "nested"
    res = py(ENV_PROG, env={"CARDSIM_TRACE": str(out), "RANK": "0", "WORLD_SIZE": "1"}, args=(card,))
    assert res.returncode == 0, res.stderr[-3000:]
    assert sorted(os.listdir(out)) == ["rank0.cstrace"]
    j = info_json(out / "rank0.cstrace")
    assert j["preset"] == PRESET[card]
    assert j["records"]["kernel_launch"] > 0 and j["records"]["alloc"] > 0 and j["records"]["memcpy"] > 0
    assert j["uncorrelated_commands"] == 0
    assert j["recorded_total_us"] > 0
    text = info(out)
    assert text.returncode == 0 and "recorded_total_us:" in text.stdout and PRESET[card] in text.stdout


SHAPES_PROG = r"""
import sys, torch, importlib
card = sys.argv[1]
importlib.import_module("torch_" + card)
a = torch.randn(64, 256, device=card)
b = torch.randn(256, 128, device=card)
c = a @ b
d = c + torch.ones(128, device=card)    # broadcast: the operands' own shapes
getattr(torch, card).synchronize()
"""


@pytest.mark.parametrize("card", CARDS)
def test_kernel_records_hold_their_operand_shapes(py, card, tmp_path):
    out = tmp_path / "shapes"
    res = py(SHAPES_PROG, env={"CARDSIM_TRACE": str(out)}, args=(card,))
    assert res.returncode == 0, res.stderr[-3000:]
    text = info(out, "--records")
    assert text.returncode == 0, text.stderr
    names = dict(re.findall(r"name \{ id: (\d+) text: \"([^\"]+)\" \}", text.stdout))
    kernels = {}
    for line in text.stdout.splitlines():
        m = re.search(r"kernel \{ name: (\d+) (.*) \} call:", line)
        if m:
            shapes = [[int(d) for d in re.findall(r"dims: (\d+)", s)] for s in re.findall(r"shapes \{([^}]*)\}", m.group(2))]
            outs = re.search(r"output_shapes: (\d+)", m.group(2))
            kernels[names[m.group(1)]] = (shapes, int(outs.group(1)) if outs else 0)
    assert kernels["aten::mm"] == ([[64, 256], [256, 128], [64, 128]], 1), kernels
    assert kernels["aten::add.Tensor"] == ([[64, 128], [128], [64, 128]], 1), kernels


# ---- bad input -----------------------------------------------------------------------

def demo_trace(tmp_path, name, rank=0, world=1, extra=None):
    out = tmp_path / name
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_")}
    env.update(CARDSIM_TRACE=str(out), RANK=str(rank), WORLD_SIZE=str(world), **(extra or {}))
    res = subprocess.run([str(DEMO)], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return out / f"rank{rank}.cstrace"


def assert_bad(path, *needles):
    res = info(path)
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert res.stdout == ""
    for n in needles:
        assert str(n) in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "terminate" not in res.stderr


def test_a_good_trace_reads(tmp_path):
    j = info_json(demo_trace(tmp_path, "good"))
    assert j["records"]["kernel_launch"] == 4 and j["uncorrelated_commands"] == 0


def test_info_names_the_configuration_file_a_recording_ran_with(tmp_path):
    cfg = tmp_path / "faster.cfg"
    cfg.write_text("memory.bandwidth = 600 GB/s\nhost.launch_overhead = 2 us\n")
    f = demo_trace(tmp_path, "configured", extra={"CARDSIM_CONFIG": str(cfg)})
    j = info_json(f)
    assert j["overrides_file"] == str(cfg) and j["overrides"] == [], j
    assert f"configuration file: {cfg} (CARDSIM_CONFIG)" in info(f).stdout
    plain = info_json(demo_trace(tmp_path, "plain"))
    assert plain["overrides_file"] == "" and plain["overrides"] == [], plain
    assert "configuration file" not in info(tmp_path / "plain").stdout


def test_truncated_file(tmp_path):
    f = demo_trace(tmp_path, "cut")
    data = f.read_bytes()
    f.write_bytes(data[:-7])           # inside the End record
    assert_bad(f, f, "truncated")
    f.write_bytes(data[:len(data) // 2])
    assert_bad(f, f, "incomplete")     # the whole records before the cut are there
    assert_bad(f.parent, f)            # the directory names the bad rank file


def test_corrupted_file(tmp_path):
    f = demo_trace(tmp_path, "flip")
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x5A
    f.write_bytes(bytes(data))
    assert_bad(f, f, "record #")


def _varint(b, i):
    v = shift = 0
    while True:
        v |= (b[i] & 0x7F) << shift
        shift += 7
        i += 1
        if not b[i - 1] & 0x80:
            return v, i


def _enc(v):
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def test_a_device_command_naming_an_undefined_name_is_refused_by_every_reader(tmp_path):
    """A record that parses and passes the CRC (rewritten to match) but uses a name id no
    Name record defined: info and replay (which skips commands' full parse) refuse it alike."""
    f = demo_trace(tmp_path, "unnamed")
    data = f.read_bytes()
    recs, i = [], 8                                  # after the magic
    while i < len(data):
        n, j = _varint(data, i)
        recs.append(bytearray(data[j:j + n]))
        i = j + n
    k = next(k for k, r in enumerate(recs) if r[0] == (13 << 3 | 2))   # the first DeviceCommand
    body_len, j = _varint(recs[k], 1)
    body = bytes(recs[k][j:j + body_len]) + bytes([5 << 3]) + _enc(4000)   # name = 4000: the last wins
    recs[k] = bytearray([13 << 3 | 2]) + _enc(len(body)) + body + recs[k][j + body_len:]
    out = bytearray(data[:8])
    for r in recs[:-1]:
        out += _enc(len(r)) + r
    end = recs[-1]
    at = end.index(bytes([5 << 3 | 5]))              # End.crc32, a fixed32: over every byte before End
    end[at + 1:at + 5] = zlib.crc32(bytes(out)).to_bytes(4, "little")
    f.write_bytes(bytes(out + _enc(len(end)) + end))
    assert_bad(f, f, f"record #{k}", "uses name id 4000, which no earlier Name record defines")
    res = subprocess.run([str(CARDSIM), "replay", str(f)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert f"record #{k}" in res.stderr and "uses name id 4000" in res.stderr, res.stderr


def test_a_gzip_file_cut_short_is_named_truncated(tmp_path):
    import gzip
    f = tmp_path / "rank0.cstrace"
    whole = gzip.compress(demo_trace(tmp_path, "plain").read_bytes())
    for keep in (3, 10, 30):
        f.write_bytes(whole[:keep])
        assert_bad(f, f, "truncated: the compressed file ends")


def test_foreign_file(tmp_path):
    f = tmp_path / "rank0.cstrace"
    f.write_text("step,loss\n1,2.5\n")
    assert_bad(f, f, "not a cardsim trace")


def test_newer_major_version(tmp_path):
    header = bytes([0x08, 99, 0x10, 2])             # format_major 99, format_minor 2
    envelope = bytes([0x0A, len(header)]) + header  # Envelope.header
    f = tmp_path / "rank0.cstrace"
    f.write_bytes(b"CSTRACE\n" + bytes([len(envelope)]) + envelope)
    assert_bad(f, f, "99.2", "newer")


def test_missing_rank_file(tmp_path):
    for r in (0, 1, 3):
        demo_trace(tmp_path, "ranks", rank=r, world=4)
    assert_bad(tmp_path / "ranks", tmp_path / "ranks" / "rank2.cstrace", "missing", "world size 4")


def test_two_files_of_one_rank_are_refused_naming_both(tmp_path):
    """rank1 and rank01 name one rank: which one a reader took would depend on the
    directory's order, so neither is taken."""
    for r in (0, 1):
        demo_trace(tmp_path, "dup", rank=r, world=2)
    d = tmp_path / "dup"
    (d / "rank01.cstrace").write_bytes((d / "rank1.cstrace").read_bytes())
    assert_bad(d, d, "two files for rank 1", "rank1.cstrace", "rank01.cstrace")


def test_empty_directory_and_missing_path(tmp_path):
    (tmp_path / "empty").mkdir()
    assert_bad(tmp_path / "empty", tmp_path / "empty", "no rank files")
    assert_bad(tmp_path / "nothing", tmp_path / "nothing")


COMPRESS_PROG = r"""
import sys, torch, importlib
card, out, how = sys.argv[1], sys.argv[2], sys.argv[3]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
x = torch.randn(128, 128, device=card)
with dm.record_trace(out, compress=None if how == "env" else how):
    for _ in range(50):
        x = (x @ x).tanh()
    dm.synchronize()
"""


def test_compressed_traces_hold_the_same_run(py, tmp_path):
    """CARDSIM_TRACE_COMPRESS and record_trace(compress=) write gzip streams of the same
    records: info and replay read them as the plain file, and gzip's own reader restores it."""
    import gzip
    runs = {}
    for name, how, env in (("plain", "none", {}), ("arg", "gzip:9", {}), ("env", "env", {"CARDSIM_TRACE_COMPRESS": "gzip"})):
        res = py(COMPRESS_PROG, env=env, args=("mlu", str(tmp_path / name), how))
        assert res.returncode == 0, res.stderr[-3000:]
        runs[name] = tmp_path / name / "rank0.cstrace"
    plain = runs["plain"].read_bytes()
    assert plain.startswith(b"CSTRACE\n")
    for name in ("arg", "env"):
        packed = runs[name].read_bytes()
        assert packed[:2] == b"\x1f\x8b" and len(packed) * 2 < len(plain)
        # The same run gives the same records; only the header's wall-clock and pid differ.
        restored = gzip.decompress(packed)
        assert restored.startswith(b"CSTRACE\n") and abs(len(restored) - len(plain)) < 64
        a, b = info_json(runs["plain"]), info_json(runs[name])
        assert a["records"] == b["records"] and a["recorded_total_us"] == b["recorded_total_us"]
    # The block starts after work the trace does not hold (its first call is not at time 0):
    # replayed, each file still reproduces its recorded makespan.
    recorded = info_json(runs["plain"])["recorded_total_us"]
    assert info_json(runs["plain"])["first_host_ps"] > 0
    for name, path in runs.items():
        rep = subprocess.run([str(CARDSIM), "replay", str(path)], capture_output=True, text=True, timeout=300)
        assert rep.returncode == 0, rep.stderr
        assert f"total_us: {recorded:.3f}" in rep.stdout, (name, rep.stdout[:500])
    bad = py(COMPRESS_PROG, env={"CARDSIM_TRACE_COMPRESS": "zstd"}, args=("mlu", str(tmp_path / "bad"), "env"))
    assert bad.returncode != 0 and "CARDSIM_TRACE_COMPRESS" in bad.stderr and '"zstd"' in bad.stderr


BAD_COMPRESS_PROG = r"""
import os, sys, torch, importlib
card, out = sys.argv[1], sys.argv[2]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
for how in ("zstd", 5):
    try:
        with dm.record_trace(out, compress=how):
            pass
        print("ACCEPTED", how)
    except (RuntimeError, ValueError) as e:
        print("REFUSED", type(e).__name__, e)
print("DIR", os.path.exists(out))
# The argument decides, not the environment (which here names no compression cardsim has).
with dm.record_trace(out, compress="gzip:1"):
    (torch.ones(64, device=card) * 2).sum().item()
print("ENV", os.environ["CARDSIM_TRACE_COMPRESS"])
"""


def test_record_trace_compress_argument_is_checked_and_wins_over_the_environment(py, tmp_path):
    out = tmp_path / "t"
    res = py(BAD_COMPRESS_PROG, env={"CARDSIM_TRACE_COMPRESS": "zstd"}, args=("mlu", str(out)))
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.splitlines()
    assert lines[0].startswith("REFUSED RuntimeError") and 'compression: "zstd" is not a compression' in lines[0]
    assert lines[1].startswith("REFUSED ValueError") and "compress=5" in lines[1]
    assert "DIR False" in lines        # refused before anything was created
    assert "ENV zstd" in lines         # the environment is left as it was
    packed = (out / "rank0.cstrace").read_bytes()
    assert packed[:2] == b"\x1f\x8b"
    assert info_json(out / "rank0.cstrace")["records"]["kernel_launch"] >= 1


TWICE_PROG = r"""
import sys, importlib, torch
card, out = sys.argv[1], sys.argv[2]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
x = torch.randn(64, 64, device=card)
with dm.record_trace(out):
    y = x @ x
try:
    with dm.record_trace(out):
        y = y @ x
        y = y @ x
    print("SECOND recorded")
except RuntimeError as e:
    print("SECOND refused", e)
with dm.record_trace(out + "-again"):   # elsewhere: fine
    y = y @ x
dm.synchronize()
"""


def test_a_second_recording_into_the_same_directory_does_not_replace_the_first(py, tmp_path):
    out = tmp_path / "t"
    res = py(TWICE_PROG, args=("mlu", str(out)))
    assert res.returncode == 0, res.stderr[-3000:]
    line = next(l for l in res.stdout.splitlines() if l.startswith("SECOND"))
    assert line.startswith("SECOND refused") and "holds an earlier recording of this process" in line, line
    assert info_json(out)["records"]["kernel_launch"] == 1   # the first recording, whole
    assert info_json(tmp_path / "t-again")["records"]["kernel_launch"] == 1


CAPTURE_PROG = r"""
import importlib, sys, torch
card, out = sys.argv[1], sys.argv[2]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
x = torch.ones(1024, device=card)
s = dm.Stream()
g = getattr(dm, {"mlu": "MLUGraph", "supa": "SUPAGraph"}[card])()
with dm.graph(g, stream=s):
    try:
        with dm.record_trace(out):
            pass
        print("started inside the capture")
    except RuntimeError as e:
        print("refused:", e)
    y = x * 2
g.replay()
dm.synchronize()
assert y[:3].cpu().tolist() == [2.0] * 3, y
# started before a capture: not stopped inside it; the file holds the capture whole
dm.start_trace(out)
g2 = getattr(dm, {"mlu": "MLUGraph", "supa": "SUPAGraph"}[card])()
with dm.graph(g2, stream=s):
    try:
        dm.stop_trace()
        print("stopped inside the capture")
    except RuntimeError as e:
        print("kept:", e)
    z = x + 1
g2.replay()
dm.stop_trace()
dm.synchronize()
assert z[:3].cpu().tolist() == [2.0] * 3, z
print("done")
"""


@pytest.mark.parametrize("card", CARDS)
def test_a_recording_neither_starts_nor_stops_inside_a_graph_capture(py, card, tmp_path):
    """A trace started inside a capture would lack the capture's begin and could not replay:
    refused naming the capturing stream, the capture unharmed; stopping inside one is
    refused too and the recording goes on, so its file replays to its own total."""
    out = tmp_path / "t"
    res = py(CAPTURE_PROG, args=(card, str(out)))
    assert res.returncode == 0, res.stderr[-3000:]
    assert "refused: cardsim trace: traceStart: stream" in res.stdout, res.stdout
    assert "is capturing a graph; start the recording before the capture begins" in res.stdout, res.stdout
    assert "kept: cardsim trace: traceStop: stream" in res.stdout, res.stdout
    assert "(the recording goes on)" in res.stdout and "done" in res.stdout, res.stdout
    recorded = info_json(out)
    assert recorded["records"]["graph_capture_begin"] == recorded["records"]["graph_capture_end"] == 1, recorded
    rep = subprocess.run([str(CARDSIM), "replay", str(out)], capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert f"total_us: {recorded['recorded_total_us']:.3f}" in rep.stdout, (rep.stdout, recorded)


INSIDE_PROG = r"""
import json, sys, warnings, importlib, torch
card, out = sys.argv[1], sys.argv[2]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
outer = dm.trace_path()
x = torch.randn(256, 256).to(card)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with dm.record_trace(out) as path:
        with dm.record_trace(out + "-nested") as nested:
            y = x @ x
        z = y + 1
dm.synchronize()
print("RESULT " + json.dumps(dict(outer=outer, path=path, nested=nested, after=dm.trace_path(),
                                  warnings=[str(w.message) for w in caught])))
"""


def test_record_trace_inside_a_running_recording_records_into_it(py, tmp_path):
    # A program that records its own steps, traced whole with CARDSIM_TRACE: its blocks
    # join the process's recording (a warning each), which goes on after them.
    env_dir, own = tmp_path / "whole", tmp_path / "own"
    res = py(INSIDE_PROG, args=("mlu", str(own)), env={"CARDSIM_TRACE": str(env_dir)})
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(next(l for l in res.stdout.splitlines() if l.startswith("RESULT "))[7:])
    whole = str(env_dir / "rank0.cstrace")
    assert got["outer"] == got["path"] == got["nested"] == got["after"] == whole
    assert len(got["warnings"]) == 2 and all("already being recorded" in w for w in got["warnings"])
    assert not own.exists() and not pathlib.Path(str(own) + "-nested").exists()
    assert info_json(env_dir)["records"]["kernel_launch"] >= 2   # the matmul and the add
    # Without the variable, the outer block records and the nested one joins it.
    res = py(INSIDE_PROG, args=("mlu", str(own)))
    got = json.loads(next(l for l in res.stdout.splitlines() if l.startswith("RESULT "))[7:])
    assert got["outer"] is None and got["after"] is None
    assert got["path"] == got["nested"] == str(own / "rank0.cstrace") and len(got["warnings"]) == 1
    assert info_json(own)["records"]["kernel_launch"] == 2
