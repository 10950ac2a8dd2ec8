"""`cardsim replay` and `cardsim sweep` on input a user gets wrong, and on runs that used to
replay wrongly: nothing recorded is overwritten, a job that cannot finish fails at once
naming why, bad overrides and mixed recordings are refused up front (exit status 2), a
captured graph replays, what-ifs with more memory bandwidth never slow a run down, and the
replay's own trace keeps the kernels' shapes."""
import json
import pathlib
import re
import shutil
import subprocess
import time

import pytest

from test_export_perfetto import _varint as _encode_varint
from test_replay import cardsim, record, recorded_total_us

ROOT = pathlib.Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "data" / "golden" / "traces"


def total_us(res):
    assert res.returncode == 0, res.stderr[-3000:]
    return float(next(l for l in res.stdout.splitlines() if l.startswith("total_us:")).split()[1])


def test_keep_never_overwrites_trace_files(tmp_path):
    rec = tmp_path / "rec"
    shutil.copytree(GOLDEN / "two_streams", rec)
    before = (rec / "rank0.cstrace").read_bytes()
    for target in (rec, tmp_path / "other"):
        if target != rec:
            shutil.copytree(GOLDEN / "dp_step", target)
        res = cardsim("replay", rec, "--keep", target)
        assert res.returncode == 2, res.stderr
        assert "--keep" in res.stderr and "already holds trace files" in res.stderr and str(target) in res.stderr
    assert (rec / "rank0.cstrace").read_bytes() == before
    assert recorded_total_us(tmp_path / "other") == recorded_total_us(GOLDEN / "dp_step")
    # A new directory (or an empty one) is fine.
    (tmp_path / "empty").mkdir()
    for target in (tmp_path / "new", tmp_path / "empty"):
        res = cardsim("replay", rec, "--keep", target)
        assert total_us(res) == pytest.approx(recorded_total_us(rec), abs=1e-3)
        assert (target / "rank0.cstrace").exists()


def test_a_groups_file_naming_ranks_outside_the_job_fails_at_once(tmp_path):
    prefix = tmp_path / "dp"
    res = cardsim("export", GOLDEN / "dp_step", "--chakra", prefix)
    assert res.returncode == 0, res.stderr
    groups = json.loads(pathlib.Path(f"{prefix}.comm_groups.json").read_text())
    key = next(iter(groups))
    groups[key] = [0, 5]
    pathlib.Path(f"{prefix}.comm_groups.json").write_text(json.dumps(groups))
    t = time.monotonic()
    res = cardsim("replay", prefix)
    assert time.monotonic() - t < 60, "the replay waited for a rank that does not exist"
    assert res.returncode == 2, res.stderr
    assert "names rank 5" in res.stderr and f"'{key}'" in res.stderr


GRAPH_PROG = r"""
import torch, torch_mlu
x = torch.randn(256, 256, device="mlu")
s = torch.mlu.Stream()
s.wait_stream(torch.mlu.current_stream())
with torch.mlu.stream(s):
    y = x * 3
torch.mlu.current_stream().wait_stream(s)
g = torch.mlu.MLUGraph()
with torch.mlu.graph(g):            # global capture mode; the capture allocates its memory
    w = (x @ x) * 2 + y
for _ in range(3):
    g.replay()
torch.mlu.synchronize()
"""


def test_a_recorded_graph_capture_replays_to_its_recorded_times(tmp_path):
    out = record(tmp_path, "graph", GRAPH_PROG)
    assert total_us(cardsim("replay", out)) == pytest.approx(recorded_total_us(out), abs=1e-3)


def test_more_memory_bandwidth_never_slows_a_run(tmp_path):
    for name in ("compute_bound", "memory_bound"):
        totals = [total_us(cardsim("replay", GOLDEN / name, "--set", f"memory.bandwidth={bw}"))
                  for bw in ("307.2 GB/s", "614.4 GB/s", "1228.8 GB/s", "4 TB/s", "10 TB/s")]
        assert all(b <= a * (1 + 1e-9) for a, b in zip(totals, totals[1:])), (name, totals)
        # nor wider cluster ports (they once cut kernels finer, each tile paying its wave)
        totals = [total_us(cardsim("replay", GOLDEN / name, "--set", f"memory.cluster_bandwidth={bw}"))
                  for bw in ("128 GB/s", "256 GB/s", "1 TB/s", "100 TB/s")]
        assert all(b <= a * (1 + 1e-9) for a, b in zip(totals, totals[1:])), (name, totals)
        assert totals[-1] < totals[0] * (1 + 1e-9), (name, totals)


def test_a_kernel_capped_by_its_clusters_ports_is_memory_bound(tmp_path):
    # At 4 TB/s the memory outruns the MLU370's cluster ports (8 x 128 GB/s): elementwise
    # kernels are still bound by bytes, not by compute.
    out = tmp_path / "r.json"
    res = cardsim("replay", GOLDEN / "memory_bound", "--set", "memory.bandwidth=4TB/s", "--json", out)
    assert res.returncode == 0, res.stderr
    report = json.loads(out.read_text())
    assert report["top_kernels"] and all(k["bound"] == "memory" for k in report["top_kernels"]), report["top_kernels"]
    assert report["breakdown"]["memory_bound_us"] > report["breakdown"]["compute_us"]


@pytest.mark.parametrize("override", ["fabric.link.bandwidth=-5 GB/s", "fabric.channels=0", "fabric.shape=torus"])
def test_a_bad_fabric_override_is_refused_before_the_replay(tmp_path, override):
    for path in (GOLDEN / "dp_step", GOLDEN / "two_streams"):
        res = cardsim("replay", path, "--set", override)
        assert res.returncode == 2, (path, res.stdout[-500:], res.stderr)
        assert override.split("=")[0] in res.stderr and "cardsim-replay-" not in res.stderr, res.stderr


def test_rank_files_of_two_recordings_are_refused(tmp_path):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(GOLDEN / "dp_step" / "rank0.cstrace", mixed / "rank0.cstrace")
    other = record(tmp_path, "other", "import torch, torch_mlu\ntorch.ones(4, device='mlu').sum().item()\n",
                   world=2, extra={"CARDSIM_PRESET": "mlu370-x4"})
    shutil.copy(other / "rank1.cstrace", mixed / "rank1.cstrace")
    for cmd in (("info", mixed), ("replay", mixed)):
        res = cardsim(*cmd)
        assert res.returncode == 2, (cmd, res.stderr)
        assert str(mixed / "rank1.cstrace") in res.stderr and "not of the same job" in res.stderr, res.stderr


ALL_REDUCE_PROG = r"""
import torch, torch_mlu
import torch.distributed as dist
dist.init_process_group("cncl")
x = torch.ones(1024, device="mlu")
for _ in range(2):
    dist.all_reduce(x)
torch.mlu.synchronize()
dist.destroy_process_group()
"""


def test_rank_files_of_two_runs_of_one_program_are_refused_before_replaying(tmp_path):
    # Same preset, configuration and program: only the jobs' fabric ids tell them apart.
    # Replayed together, their collectives would never match up (it used to hang).
    first = record(tmp_path, "first", ALL_REDUCE_PROG, world=2)
    second = record(tmp_path, "second", ALL_REDUCE_PROG, world=2)
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(first / "rank0.cstrace", mixed / "rank0.cstrace")
    shutil.copy(second / "rank1.cstrace", mixed / "rank1.cstrace")
    for cmd in (("info", mixed), ("replay", mixed), ("export", mixed, "--perfetto", tmp_path / "t.json")):
        t = time.monotonic()
        res = cardsim(*cmd)
        assert time.monotonic() - t < 60, cmd
        assert res.returncode == 2, (cmd, res.stderr)
        assert str(mixed / "rank1.cstrace") in res.stderr and "not of the same job" in res.stderr, res.stderr
        assert "fabric job" in res.stderr, res.stderr
    assert not (tmp_path / "t.json").exists()
    # Each recording alone is whole and replays to its recorded time.
    for rec in (first, second):
        assert total_us(cardsim("replay", rec)) == pytest.approx(recorded_total_us(rec), abs=1e-3)


def replay_json(tmp_path, *args):
    out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"
    res = cardsim("replay", *args, "--json", out)
    assert res.returncode == 0, res.stderr
    return res.stdout, json.loads(out.read_text())


def test_one_rank_file_of_a_job_stands_for_the_whole_job(tmp_path):
    one = GOLDEN / "dp_step" / "rank0.cstrace"
    text, rep = replay_json(tmp_path, one)
    assert "(rank 0 replicated to 2 ranks)" in text
    assert rep["world_size"] == 2 and rep["replicated_to"] == 2 and [r["rank"] for r in rep["ranks"]] == [0]
    _, same = replay_json(tmp_path, one, "--ranks", "2")
    assert same["total_us"] == rep["total_us"]
    # On the recorded configuration each rank file ends where its own recording did: rank 0,
    # the faster, waited at the collectives for rank 1, and its replicas arrive as late.
    for r in (0, 1):
        f = GOLDEN / "dp_step" / f"rank{r}.cstrace"
        _, alone = replay_json(tmp_path, f)
        assert alone["total_us"] == pytest.approx(recorded_total_us(f), abs=1e-6), r
    # the directory replays every recorded rank, whatever --ranks says of the same count
    _, whole = replay_json(tmp_path, GOLDEN / "dp_step", "--ranks", "2")
    assert whole["replicated_to"] == 0 and whole["total_us"] == pytest.approx(recorded_total_us(GOLDEN / "dp_step"))
    res = cardsim("replay", one, "--ranks", "16385")
    assert res.returncode == 2 and "--ranks 16385 is over the limit of 16384" in res.stderr, res.stderr


def test_a_node_count_set_for_a_scaled_replay_must_hold_its_ranks(tmp_path):
    # mlu370-x8 has 8 devices per node: --ranks 32 needs 4 nodes. Left unset, the count grows
    # to fit; set by hand too small, it is refused by name instead of being changed.
    one = GOLDEN / "dp_step" / "rank0.cstrace"
    res = cardsim("replay", one, "--ranks", "32", "--set", "fabric.nodes=2")
    assert res.returncode == 2, res.stderr
    assert "--set fabric.nodes=2" in res.stderr and "cannot hold --ranks 32" in res.stderr and "4 nodes" in res.stderr
    _, fits = replay_json(tmp_path, one, "--ranks", "32", "--set", "fabric.nodes=4")
    _, grown = replay_json(tmp_path, one, "--ranks", "32")
    assert fits["total_us"] == grown["total_us"] and fits["replicated_to"] == 32


def test_a_kept_replicated_replay_is_a_whole_recording(tmp_path):
    kept = tmp_path / "kept"
    _, rep = replay_json(tmp_path, GOLDEN / "dp_step", "--ranks", "4", "--keep", kept)
    assert sorted(p.name for p in kept.iterdir()) == ["rank0.cstrace"]
    assert "preset: mlu370-x8 (" in cardsim("info", kept).stdout   # the recording's, not a temporary file
    # rank 0 standing for 4 ranks: info, replay and export take the directory as it is
    assert recorded_total_us(kept) == pytest.approx(rep["total_us"], abs=1e-3)
    _, again = replay_json(tmp_path, kept)
    assert again["total_us"] == pytest.approx(rep["total_us"], abs=1e-3) and again["replicated_to"] == 4
    res = cardsim("export", kept, "--perfetto", tmp_path / "k.json")
    assert res.returncode == 0 and (tmp_path / "k.json").exists(), res.stderr


def test_what_if_another_collective_algorithm(tmp_path):
    _, base = replay_json(tmp_path, GOLDEN / "dp_step")
    names = lambda rep: {i["name"] for i in rep["critical_path"]["items"] if i["kind"] == "collective"}
    # two ranks: the tuner's direct exchange (their ring moves the same bytes, and fills its
    # pipeline of chunks first)
    assert names(base) == {"all_reduce:direct"}, names(base)
    text, tree = replay_json(tmp_path, GOLDEN / "dp_step", "--set", "fabric.algorithm=tree")
    assert names(tree) == {"all_reduce:tree"}, names(tree)
    assert "on mlu370-x8 (recorded, with --set)" in text, text.splitlines()[0]   # not "as recorded"
    # the JSON names the preset as info does, and the configuration apart
    assert base["preset"] == tree["preset"] == "mlu370-x8", (base["preset"], tree["preset"])
    assert (base["configuration"], tree["configuration"]) == ("as recorded", "recorded, with --set")
    # a tree over two ranks moves the bytes in more steps than their direct exchange: slower,
    # by the collectives alone (the compute and copies are the same)
    assert tree["total_us"] > base["total_us"]
    for k in ("compute_us", "memory_bound_us", "copies_us"):
        assert tree["breakdown"][k] == pytest.approx(base["breakdown"][k], abs=1e-6), k
    assert tree["breakdown"]["communication_us"] > base["breakdown"]["communication_us"]
    res = cardsim("replay", GOLDEN / "dp_step", "--set", "fabric.algorithm=butterfly")
    assert res.returncode == 2, res.stderr
    assert "fabric.algorithm" in res.stderr and "butterfly" in res.stderr and "ring, tree" in res.stderr
    assert "recorded.textproto" not in res.stderr and "preset the configuration" not in res.stderr, res.stderr
    # a key as errors name it (its full path under the device) is the same key
    _, a = replay_json(tmp_path, GOLDEN / "memory_bound", "--set", "memory.bandwidth=614.4GB/s")
    _, b = replay_json(tmp_path, GOLDEN / "memory_bound", "--set", "device.memory.bandwidth=614.4GB/s")
    assert a["total_us"] == b["total_us"] < recorded_total_us(GOLDEN / "memory_bound")


def test_the_report_sums_up_the_job_and_every_resource(tmp_path):
    _, rep = replay_json(tmp_path, GOLDEN / "dp_step")
    ranks = [r["breakdown"] for r in rep["ranks"]]
    for k, v in rep["breakdown"].items():   # the job's breakdown: the mean over its ranks
        assert v == pytest.approx(sum(r[k] for r in ranks) / len(ranks), abs=1e-5), k
    parts = ("compute_us", "memory_bound_us", "copies_us", "exposed_communication_us", "idle_us")
    assert sum(rep["breakdown"][k] for k in parts) == pytest.approx(rep["total_us"], rel=1e-6)
    u = rep["utilization"]
    cards = u["cards"]
    assert [(c["rank"], c["device"]) for c in cards] == [(0, 0), (1, 0)]
    for k in ("clusters", "compute", "memory_bandwidth", "dma", "fabric"):
        assert 0 <= u[k] <= 1 and u[k] == pytest.approx(sum(c[k] for c in cards) / len(cards), abs=1e-6), k
    assert cards[1]["clusters"] > cards[0]["clusters"] > 0 and u["dma"] > 0
    assert u["links"] == rep["links"] and u["links"], u["links"]


QUEUED_BEFORE_RECORDING = r"""
import sys, torch, torch_mlu
x = torch.randn(1024, 1024, device="mlu")
y = x @ x                                    # still running when the recording starts
with torch.mlu.record_trace(sys.argv[1]):
    z = (x + 1).sum()
    torch.mlu.synchronize()
"""


def test_a_recording_started_behind_queued_work_replays_to_its_recorded_times(tmp_path):
    from test_replay import PYTHON, _env
    script = tmp_path / "queued.py"
    script.write_text(QUEUED_BEFORE_RECORDING)
    out = tmp_path / "rec"
    res = subprocess.run([PYTHON, str(script), str(out)], capture_output=True, text=True, env=_env({}), timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    info = cardsim("info", out).stdout
    assert "(0 not tied to a recorded call)" in info, info   # the matmul finished before it began
    assert total_us(cardsim("replay", out)) == pytest.approx(recorded_total_us(out), abs=1e-3)


def test_sweep_refuses_a_key_given_twice_and_an_unwritable_output_before_replaying(tmp_path):
    res = cardsim("sweep", GOLDEN / "memory_bound", "--set", "memory.bandwidth=1TB/s,2TB/s",
                  "--set", "memory.bandwidth=3TB/s,4TB/s", "--out", tmp_path / "s", "--no-plot")
    assert res.returncode == 2 and "memory.bandwidth is given twice" in res.stderr, res.stderr
    # under its full path it is the same key (the fixed value was dropped before)
    res = cardsim("sweep", GOLDEN / "memory_bound", "--set", "memory.bandwidth=1TB/s,2TB/s",
                  "--set", "device.memory.bandwidth=3TB/s", "--out", tmp_path / "s", "--no-plot")
    assert res.returncode == 2 and "device.memory.bandwidth is given twice (as memory.bandwidth)" in res.stderr, \
        res.stderr
    assert not list(tmp_path.glob("s*"))
    t = time.monotonic()
    res = cardsim("sweep", GOLDEN / "memory_bound", "--set", "memory.bandwidth=1TB/s,2TB/s",
                  "--out", "/nonexistent/dir/s", "--no-plot")
    assert res.returncode == 2 and "/nonexistent/dir" in res.stderr, res.stderr
    assert "replays done" not in res.stderr
    res = cardsim("sweep", GOLDEN / "memory_bound", "--set", "memory.bandwidth=1TB/s,2TB/s", "--preset", "nosuch",
                  "--out", tmp_path / "s", "--no-plot")
    assert res.returncode == 2 and "nosuch" in res.stderr and "replays done" not in res.stderr, res.stderr


def test_the_replays_own_trace_keeps_kernel_shapes(tmp_path):
    res = cardsim("replay", GOLDEN / "compute_bound", "--keep", tmp_path / "kept")
    assert res.returncode == 0, res.stderr
    orig = cardsim("info", GOLDEN / "compute_bound", "--records").stdout
    kept = cardsim("info", tmp_path / "kept", "--records").stdout
    count = lambda text: sum(1 for l in text.splitlines() if " kernel {" in l and "shapes {" in l)
    assert count(orig) > 0 and count(kept) == count(orig)


def test_the_replays_own_trace_keeps_collective_dtypes(tmp_path):
    res = cardsim("replay", GOLDEN / "dp_step", "--keep", tmp_path / "kept")
    assert res.returncode == 0, res.stderr
    dtypes = lambda path: [l.split("dtype:")[1].split()[0] for l in cardsim("info", path, "--records").stdout.splitlines()
                           if "collective {" in l and "dtype:" in l]
    assert dtypes(GOLDEN / "dp_step") and dtypes(tmp_path / "kept") == dtypes(GOLDEN / "dp_step")


def test_cluster_utilization_counts_the_clusters_kernels_hold(tmp_path):
    # Small elementwise kernels are one tile each: they hold one of the MLU370's 8 clusters,
    # so the clusters are an eighth as busy as "some kernel runs"; a large matmul holds all.
    small = record(tmp_path, "small", "import torch, torch_mlu\nx = torch.ones(256, device='mlu')\n"
                   "for _ in range(200):\n    x = x + 1\ntorch.mlu.synchronize()\n")
    out = tmp_path / "small.json"
    assert cardsim("replay", small, "--json", out).returncode == 0
    u = json.loads(out.read_text())["ranks"][0]["utilization"][0]
    assert u["compute"] > 0 and u["clusters"] == pytest.approx(u["compute"] / 8, rel=1e-4), u
    big = tmp_path / "big.json"
    assert cardsim("replay", GOLDEN / "compute_bound", "--json", big).returncode == 0
    u = json.loads(big.read_text())["ranks"][0]["utilization"][0]
    assert u["clusters"] == pytest.approx(u["compute"], rel=1e-4) and u["clusters"] > 0.9, u


def test_the_critical_path_follows_only_device_work_the_host_waited_for(tmp_path):
    # randn's kernel ends while the host is still issuing (an allocation): the host never
    # waits for it, so the path from the matmul goes back to the host, not through randn.
    run = record(tmp_path, "cp", "import torch, torch_mlu\nx = torch.randn(256, 256, device='mlu')\n"
                 "y = x @ x\ntorch.mlu.synchronize()\n")
    out = tmp_path / "cp.json"
    res = cardsim("replay", run, "--json", out)
    assert res.returncode == 0, res.stderr
    cp = json.loads(out.read_text())["critical_path"]
    names = [i["name"] for i in cp["items"]]
    assert "aten::mm" in names and not any("normal" in n for n in names), cp
    # After a synchronize the path does go through what the host waited for.
    run2 = record(tmp_path, "cp2", "import torch, torch_mlu\nx = torch.randn(2048, 2048, device='mlu')\n"
                  "torch.mlu.synchronize()\ny = x + 1\ntorch.mlu.synchronize()\n")
    out2 = tmp_path / "cp2.json"
    assert cardsim("replay", run2, "--json", out2).returncode == 0
    names2 = [i["name"] for i in json.loads(out2.read_text())["critical_path"]["items"]]
    assert any("normal" in n for n in names2) and "aten::add.Tensor" in names2, names2


def test_the_critical_path_goes_through_an_event_wait_to_the_work_it_waited_for(tmp_path):
    # Three matmuls on the default stream, an event after them that a side stream waits for,
    # then a small kernel on the side stream: the matmuls bound the run, not the wait.
    run = record(tmp_path, "ev", "import torch, torch_mlu\n"
                 "x = torch.randn(2048, 2048, device='mlu'); side = torch.mlu.Stream(); torch.mlu.synchronize()\n"
                 "y = x @ x; y = y @ x; y = y @ x\n"
                 "ev = torch.mlu.Event(); ev.record(); side.wait_event(ev)\n"
                 "with torch.mlu.stream(side):\n    z = y[0, :4] * 2\n"
                 "torch.mlu.synchronize()\n")
    out = tmp_path / "ev.json"
    assert cardsim("replay", run, "--json", out).returncode == 0
    rep = json.loads(out.read_text())
    cp = rep["critical_path"]
    mm = [i for i in cp["items"] if i["name"] == "aten::mm"]
    assert mm and mm[0]["count"] == 3 and mm[0]["time_us"] > 0.95 * rep["breakdown"]["compute_us"], cp
    assert cp["by_kind"].get("wait", 0) < 0.01 * cp["total_us"], cp


def test_a_missing_path_names_both_readings(tmp_path):
    res = cardsim("replay", tmp_path / "nope")
    assert res.returncode == 2, res.stderr
    assert f"{tmp_path / 'nope'}: no such trace file or directory" in res.stderr
    assert f"{tmp_path / 'nope'}.0.et" in res.stderr


def _varint(buf, pos):
    v = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, pos


def _records(data):
    """(offset, length-prefix size, body) of each record after the magic."""
    pos, out = 8, []
    while pos < len(data):
        n, body = _varint(data, pos)
        out.append((pos, body - pos, data[body:body + n]))
        pos = body + n
    return out


def test_a_well_formed_trace_with_an_impossible_value_is_bad_input_to_replay(tmp_path):
    """A kernel's flops set to NaN inside a record of the same size, and the End record's
    CRC-32 recomputed: the file is whole, its values are not. info and replay both say which
    record, with exit status 2."""
    import math
    import struct
    import zlib
    data = bytearray((GOLDEN / "compute_bound" / "rank0.cstrace").read_bytes())
    recs = _records(data)
    # Envelope field 7 (kernel), then KernelLaunch field 5 (flops, a double: tag 0x29).
    off, pre, body = next(r for r in recs if r[2][:1] == b"\x3a")
    klen, kstart = _varint(body, 1)
    kernel = body[kstart:kstart + klen]
    at = kernel.index(b"\x29")
    value = struct.unpack("<d", kernel[at + 1:at + 9])[0]
    assert value > 0 and math.isfinite(value)
    flops_at = off + pre + kstart + at + 1
    data[flops_at:flops_at + 8] = struct.pack("<d", float("nan"))
    end_off, end_pre, end_body = recs[-1]
    assert end_body[:1] == b"\x72"                                 # Envelope field 14 (End)
    inner_len, inner_start = _varint(end_body, 1)
    inner = bytearray(end_body[inner_start:inner_start + inner_len])
    crc_at = inner.index(b"\x2d")                                  # End field 5 (fixed32)
    inner[crc_at + 1:crc_at + 5] = struct.pack("<I", zlib.crc32(bytes(data[:end_off])))
    data[end_off + end_pre + inner_start:end_off + end_pre + inner_start + inner_len] = inner
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "rank0.cstrace").write_bytes(bytes(data))
    for cmd in ("info", "replay"):
        res = cardsim(cmd, bad)
        assert res.returncode == 2, (cmd, res.stdout[-500:], res.stderr)
        assert "corrupt: the kernel's flops is nan" in res.stderr and "record #" in res.stderr, res.stderr


def test_an_output_that_cannot_be_written_is_refused_before_the_replay(tmp_path):
    # --json into a missing directory or onto a directory: exit 2 naming it, no report on
    # stdout (nothing computed only to be lost).
    for target, why in ((tmp_path / "missing" / "r.json", "no directory"), (tmp_path, "is a directory")):
        res = cardsim("replay", GOLDEN / "compute_bound", "--json", target)
        assert res.returncode == 2, (res.returncode, res.stderr)
        assert str(target) in res.stderr and why in res.stderr, res.stderr
        assert res.stdout == "" and not (tmp_path / "missing").exists()
    # --keep makes the directory it is given, parents included.
    kept = tmp_path / "a" / "b" / "kept"
    res = cardsim("replay", GOLDEN / "compute_bound", "--keep", kept)
    assert res.returncode == 0, res.stderr
    assert (kept / "rank0.cstrace").is_file()
    (tmp_path / "file").write_text("x")
    res = cardsim("replay", GOLDEN / "compute_bound", "--keep", tmp_path / "file" / "sub")
    assert res.returncode == 2 and "--keep" in res.stderr and res.stdout == "", res.stderr


def test_output_that_does_not_get_out_is_a_failure():
    # stdout on a full device: the command fails saying so rather than exiting 0.
    with open("/dev/full", "w") as full:
        res = subprocess.run([str(ROOT / "build" / "traces" / "cardsim"), "collbench", "--model-only", "--preset",
                              "br100", "--ranks", "8", "--op", "all_reduce", "--min-bytes", "1K", "--max-bytes", "1K",
                              "--csv"], stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert res.returncode == 1 and "cannot write its output" in res.stderr, (res.returncode, res.stderr)


def _with_command_end(data, which, end_ps):
    """The trace file `data` with device command record number `which` (of the command
    records) ending at `end_ps`, re-encoded (record and command lengths) and the End
    record's CRC-32 recomputed: well formed, only that value impossible."""
    import struct
    import zlib
    recs = _records(data)
    commands = [i for i, r in enumerate(recs) if r[2][:1] == b"\x6a"]   # Envelope field 13 (command)
    i = commands[which]
    body = recs[i][2]
    clen, cstart = _varint(body, 1)
    cmd = body[cstart:cstart + clen]
    pos, fields = 0, []
    while pos < len(cmd):                       # DeviceCommand: varints, and a double (flops)
        tag, after = _varint(cmd, pos)
        if tag & 7 == 0:
            _, end = _varint(cmd, after)
        else:
            assert tag & 7 == 1, tag
            end = after + 8
        fields.append((tag, cmd[pos:end]))
        pos = end
    assert any(tag == (8 << 3) for tag, _ in fields)              # end_ps is there
    new_cmd = b"".join(_encode_varint(8 << 3) + _encode_varint(end_ps) if tag == (8 << 3) else raw
                       for tag, raw in fields)
    new_body = b"\x6a" + _encode_varint(len(new_cmd)) + new_cmd + body[cstart + clen:]
    parts = [bytes(data[:8])]
    for j, (off, pre, b) in enumerate(recs):
        b = new_body if j == i else b
        parts.append(_encode_varint(len(b)) + b)
    out = bytearray(b"".join(parts))
    end_off = len(out) - len(parts[-1])
    end_pre = len(_encode_varint(len(recs[-1][2])))
    end_body = recs[-1][2]
    assert end_body[:1] == b"\x72"                                 # Envelope field 14 (End)
    inner_len, inner_start = _varint(end_body, 1)
    crc_at = end_off + end_pre + inner_start + bytes(end_body[inner_start:inner_start + inner_len]).index(b"\x2d") + 1
    out[crc_at:crc_at + 4] = struct.pack("<I", zlib.crc32(bytes(out[:end_off])))
    return bytes(out)


@pytest.mark.parametrize("end_ps, why", [(1, "ends (1 ps) before it starts"),
                                         (2**63 + 5, "past the simulated clock's range")])
def test_a_device_command_with_impossible_times_is_bad_input_to_every_command(tmp_path, end_ps, why):
    # A replay re-times the recorded commands instead of reading them, yet a file that says
    # something impossible about one is refused there too, as info and export refuse it
    # (and a sweep, made of replays): exit status 2 naming the record, nothing written.
    bad = tmp_path / "bad"
    shutil.copytree(GOLDEN / "dp_step", bad)
    f = bad / "rank0.cstrace"
    f.write_bytes(_with_command_end(f.read_bytes(), 3, end_ps))
    runs = {"info": ("info", bad), "export": ("export", bad, "--perfetto", tmp_path / "t.json"),
            "replay": ("replay", bad, "--json", tmp_path / "r.json"),
            "sweep": ("sweep", bad, "--set", "memory.bandwidth=1TB/s,2TB/s", "--out", tmp_path / "s", "--no-plot")}
    for name, args in runs.items():
        res = cardsim(*args)
        assert res.returncode == 2, (name, res.returncode, res.stdout[-500:], res.stderr[-2000:])
        assert why in res.stderr and "rank0.cstrace: record #" in res.stderr, (name, res.stderr[-2000:])
    assert not any(tmp_path.glob("t.json*")) and not any(tmp_path.glob("r.json*")) and not any(tmp_path.glob("s.*"))


def test_outputs_that_are_not_plain_files_are_written_in_place_and_failures_reported(tmp_path):
    import os
    import threading
    # A pipe (a terminal, /dev/stdout alike) is written into, not replaced by a file.
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    res = cardsim("export", GOLDEN / "dp_step", "--perfetto", fifo)
    reader.join(timeout=60)
    assert res.returncode == 0, res.stderr
    assert fifo.is_fifo() and json.loads(got[0])["traceEvents"]
    # A full device: the write fails, said so, and the device stays a device.
    for args in (("export", GOLDEN / "dp_step", "--perfetto", "/dev/full"),
                 ("replay", GOLDEN / "dp_step", "--json", "/dev/full")):
        res = cardsim(*args)
        assert res.returncode != 0 and "/dev/full: cannot write: No space left on device" in res.stderr, \
            (args, res.returncode, res.stderr)
        assert pathlib.Path("/dev/full").is_char_device()


def test_a_sweep_whose_plot_cannot_be_written_says_so_in_one_line(tmp_path):
    import resource
    import signal
    from test_replay import CARDSIM, _env

    def small_files():   # the CSV and the replays' files fit in 24 KiB, the plot does not (EFBIG)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (24576, 24576))
    res = subprocess.run([CARDSIM, "sweep", str(GOLDEN / "compute_bound"), "--set", "memory.bandwidth=1TB/s,2TB/s",
                          "--out", str(tmp_path / "s")], capture_output=True, text=True, env=_env(), timeout=600,
                         preexec_fn=small_files)
    assert res.returncode == 1, res.stderr
    assert "Traceback" not in res.stderr and "s.png: cannot write" in res.stderr, res.stderr
    assert "the CSV is complete" in res.stderr and (tmp_path / "s.csv").is_file()
    assert not (tmp_path / "s.png").exists() and not list(tmp_path.glob("*.tmp"))


def test_short_help_and_unknown_short_options_and_a_directory_for_a_preset(tmp_path):
    res = cardsim("replay", "-h")
    assert res.returncode == 0 and "usage: cardsim replay" in res.stdout, res.stderr
    for command in ("info", "export", "replay", "sweep"):   # each names what it reads, in one usage line
        out = cardsim(command, "--help").stdout
        assert out.startswith(f"usage: cardsim {command} PATH [options]") and out.count("usage:") == 1, out
    res = cardsim("replay", GOLDEN / "dp_step", "-x")
    assert res.returncode == 2 and "unknown option -x" in res.stderr, res.stderr
    # the tool's version, and the trace format it writes (what `cardsim info` reports of a file)
    res = cardsim("--version")
    fmt = json.loads(cardsim("info", GOLDEN / "dp_step", "--json").stdout)["format"]
    assert res.returncode == 0 and re.fullmatch(r"cardsim \d+\.\d+\.\d+ \(trace format \d+\.\d+, fabric protocol \d+\)\n",
                                                 res.stdout), res.stdout
    assert f"trace format {fmt.split('.')[0]}." in res.stdout
    res = cardsim("replay", GOLDEN / "dp_step", "--preset", tmp_path)
    assert res.returncode == 2 and f"{tmp_path}: is a directory, not a configuration file" in res.stderr, res.stderr


def test_a_chakra_prefix_missing_a_rank_file_is_refused_and_one_file_stands_for_its_job(tmp_path):
    prefix = tmp_path / "dp"
    res = cardsim("export", GOLDEN / "dp_step", "--chakra", prefix)
    assert res.returncode == 0, res.stderr
    pathlib.Path(f"{prefix}.1.et").unlink()
    res = cardsim("replay", prefix)
    assert res.returncode == 2, res.stderr
    assert f"{prefix}.1.et: missing (the job has 2 ranks" in res.stderr and "rank(s) 0 are here" in res.stderr, \
        res.stderr
    res = cardsim("replay", f"{prefix}.0.et")
    assert res.returncode == 0 and "rank 0 replicated to 2 ranks" in res.stdout, res.stderr


def test_protobuf_library_messages_stay_off_stderr(tmp_path):
    # A corrupt trace whose header's configuration text holds invalid UTF-8: the tool names
    # the file; the protobuf library's own log line does not precede it.
    data = bytearray((GOLDEN / "compute_bound" / "rank0.cstrace").read_bytes())
    data[100] ^= 0xFF
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "rank0.cstrace").write_bytes(bytes(data))
    res = cardsim("info", bad)
    assert res.returncode == 2 and "rank0.cstrace" in res.stderr, res.stderr
    assert "libprotobuf" not in res.stderr, res.stderr


def test_outputs_never_replace_a_recording_and_empty_or_bad_names_are_refused(tmp_path):
    """--json and --perfetto aimed at a rank file, an export whose second output cannot be
    written, empty output names and a rank number past int in a file name: each refused up
    front (exit status 2) naming what, with the recording intact and nothing written."""
    rec = tmp_path / "rec"
    shutil.copytree(GOLDEN / "dp_step", rec)
    before = (rec / "rank0.cstrace").read_bytes()
    res = cardsim("replay", rec, "--json", rec / "rank0.cstrace")
    assert res.returncode == 2 and "it is a cardsim recording" in res.stderr, res.stderr
    res = cardsim("export", rec, "--perfetto", rec / "rank0.cstrace")
    assert res.returncode == 2 and "it is a cardsim recording" in res.stderr, res.stderr
    assert (rec / "rank0.cstrace").read_bytes() == before
    res = cardsim("export", rec, "--chakra", tmp_path / "cc" / "x", "--perfetto", tmp_path / "nodir" / "y.json")
    assert res.returncode == 2 and "no directory" in res.stderr, res.stderr
    assert not (tmp_path / "cc").exists() or not list((tmp_path / "cc").iterdir())
    for args, why in [(("replay", rec, "--json", ""), "the path is empty"),
                      (("replay", rec, "--keep", ""), "--keep needs a directory"),
                      (("export", rec, "--chakra", str(tmp_path) + "/"), "--chakra needs a file name prefix"),
                      (("sweep", rec, "--set", "memory.bandwidth=1TB/s,2TB/s", "--out", ""),
                       "--out needs a file name prefix")]:
        res = cardsim(*args)
        assert res.returncode == 2 and why in res.stderr, (args, res.stderr)
    odd = tmp_path / "odd"
    odd.mkdir()
    shutil.copy(rec / "rank0.cstrace", odd / "rank0.cstrace")
    (odd / "rank2147483648.cstrace").write_bytes(b"")
    for cmd in ("info", "replay", "export"):
        res = cardsim(cmd, odd, *(["--perfetto", tmp_path / "o.json"] if cmd == "export" else []))
        assert res.returncode == 2 and "rank 2147483648 in the file name is out of range" in res.stderr, res.stderr


def _children(pid: int) -> list:
    """The pids whose parent is `pid` (from /proc: no procps needed)."""
    kids = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == str(pid):
            kids.append(stat.parent.name)
    return kids


def test_an_interrupted_replay_leaves_no_process_and_no_temporary_files(tmp_path):
    """SIGTERM to a replay (as `timeout` sends) mid-run: its rank processes end with it and
    its temporary directory is removed; a sweep's replays likewise."""
    import glob
    import os
    import signal

    def ours():
        return set(glob.glob("/tmp/cardsim-replay-*")) | set(glob.glob("/tmp/cardsim-sweep-*"))

    before = ours()
    for args in (["replay", GOLDEN / "dp_step", "--ranks", "16384"],
                 ["sweep", GOLDEN / "dp_step", "--ranks", "16384", "--set", "memory.bandwidth=1TB/s,2TB/s",
                  "--out", tmp_path / "sw"]):
        p = subprocess.Popen([str(ROOT / ".venv" / "bin" / "cardsim"), *map(str, args)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        kids = []
        while time.monotonic() < deadline and not kids:   # until its helpers run
            time.sleep(0.2)
            kids = _children(p.pid)
        assert kids and p.poll() is None, args
        time.sleep(0.5)
        os.kill(p.pid, signal.SIGTERM)
        assert p.wait(timeout=20) == -signal.SIGTERM
        deadline = time.monotonic() + 10
        alive = kids
        while alive and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = [k for k in kids if pathlib.Path(f"/proc/{k}").exists()
                     and "Z" not in pathlib.Path(f"/proc/{k}/stat").read_text().split()[2]]
        assert not alive, (args, alive)
        assert ours() <= before, (args, ours() - before)


def test_a_what_if_past_the_simulations_end_fails_at_once_naming_it(tmp_path):
    """A bandwidth of bytes per second carries the simulation past 2^63 ps: a clear error
    (exit status 2) at once, not a replay spinning forever; a sweep with such a point fails
    the same way and writes nothing."""
    t = time.monotonic()
    res = cardsim("replay", GOLDEN / "memory_bound", "--set", "memory.bandwidth=10 B/s")
    assert res.returncode == 2 and "simulated time overflow" in res.stderr, res.stderr[-2000:]
    assert time.monotonic() - t < 60
    res = cardsim("sweep", GOLDEN / "memory_bound", "--set", "memory.bandwidth=1TB/s,10B/s", "--out", tmp_path / "sw")
    assert res.returncode == 2 and "simulated time overflow" in res.stderr, res.stderr[-2000:]
    assert not list(tmp_path.glob("sw*"))


def test_a_what_if_too_small_for_the_recordings_memory_fails_naming_the_allocation():
    """A what-if whose memory cannot hold what the recording allocated is the input's fault
    (exit status 2, as bad input), naming the record and the sizes; not a replay failure (3)."""
    res = cardsim("replay", GOLDEN / "memory_bound", "--set", "memory.capacity=1 KiB")
    assert res.returncode == 2, res.stderr[-2000:]
    assert "record 1 (call 1, malloc): the what-if cannot replay it: OutOfMemory" in res.stderr, res.stderr[-2000:]
    assert "(16777216 bytes)" in res.stderr and "(1024 bytes) total" in res.stderr, res.stderr[-2000:]


def test_json_dash_writes_the_report_to_stdout_and_the_table_to_stderr(tmp_path):
    res = cardsim("replay", GOLDEN / "dp_step", "--json", "-")
    assert res.returncode == 0, res.stderr
    report = json.loads(res.stdout)
    assert report["total_us"] == pytest.approx(recorded_total_us(GOLDEN / "dp_step"), abs=1e-6)
    assert "total_us:" in res.stderr and not (pathlib.Path.cwd() / "-").exists()


def test_a_failing_replay_whose_reader_left_still_cleans_up_and_exits_2(tmp_path):
    # `cardsim replay ... 2>&1 | head -1`: the error's reader is gone before the rest is
    # written; the replay still removes its temporary directory and exits with its status
    # (SIGPIPE ended it before, leaving the directory, status 141)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    import os
    from test_replay import CARDSIM
    p = subprocess.Popen([CARDSIM, "replay", str(GOLDEN / "dp_step"), "--set", "memory.capacity=1KB"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, TMPDIR=str(tmp)))
    p.stdout.close()
    p.stderr.close()
    assert p.wait(timeout=120) == 2
    assert list(tmp.iterdir()) == []


THREE_RANKS_P2P_AND_SUBGROUP = r'''
import torch, torch_mlu, torch.distributed as dist
dist.init_process_group("cncl")
rank = dist.get_rank()
torch.mlu.set_device(0)
x = torch.ones(256, device="mlu")
if rank == 0:
    dist.send(x, 1)
elif rank == 1:
    dist.recv(x, 0)
pair = dist.new_group([1, 2])
if rank in (1, 2):
    dist.all_reduce(x, group=pair)
torch.mlu.synchronize()
dist.destroy_process_group()
'''


def test_fewer_ranks_than_a_transfer_or_group_names_are_refused_alike(tmp_path):
    # a 3-rank recording replicated to fewer ranks: a transfer or group collective naming a
    # rank the smaller job does not have is refused by name, as for a 2-rank recording
    trace = record(tmp_path, "three", THREE_RANKS_P2P_AND_SUBGROUP, world=3)
    res = cardsim("replay", trace / "rank0.cstrace", "--ranks", "1")
    assert res.returncode == 2 and "point-to-point transfer between ranks 0 and 1, which a job of 1 rank(s)" \
        in res.stderr and "replicate to 2 ranks or more" in res.stderr, res.stderr
    res = cardsim("replay", trace / "rank1.cstrace", "--ranks", "2")
    assert res.returncode == 2 and "all_reduce of process group [1, 2], whose ranks a job of 2 rank(s) does not all have" \
        in res.stderr and "replicate to 3 ranks or more" in res.stderr, res.stderr
    res = cardsim("replay", trace / "rank1.cstrace", "--ranks", "8")
    assert res.returncode == 0, res.stderr


TRAIN_STEPS = r'''
import torch, torch_mlu
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).to("mlu")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(256, 256, device="mlu")
for _ in range(2):
    loss = model(x).square().mean()
    loss.backward()          # on the autograd engine's thread for the card
    opt.step(); opt.zero_grad()
    loss.item()
torch.mlu.synchronize()
'''


def test_a_what_if_moves_the_backward_thread_with_the_thread_that_handed_it_the_work(tmp_path):
    # Recorded on a slow card and replayed on the preset, a training step takes what it takes
    # recorded on the preset, exactly: the backward pass's thread goes on from where the
    # main thread handed it the work (its calls kept their recorded times before)
    slow = tmp_path / "slow.textproto"
    slow.write_text('memory.bandwidth = 100 GB/s\ncompute.peak.fp32 = 4 TFLOPS\n')
    on_slow = record(tmp_path, "on_slow", TRAIN_STEPS, extra={"CARDSIM_CONFIG": str(slow)})
    on_preset = record(tmp_path, "on_preset", TRAIN_STEPS)
    threads = cardsim("info", on_preset, "--records").stdout
    assert "thread: 1" in threads, threads[:2000]            # the backward ran on a thread of its own
    assert total_us(cardsim("replay", on_slow, "--preset", "mlu370-x8")) == \
        pytest.approx(recorded_total_us(on_preset), abs=1e-3)
    assert total_us(cardsim("replay", on_preset, "--set", "memory.bandwidth=100 GB/s",
                            "--set", "compute.peak.fp32=4 TFLOPS")) == pytest.approx(recorded_total_us(on_slow), abs=1e-3)


KERNEL_THEN_ALL_REDUCE = r'''
import torch, torch_mlu, torch.distributed as dist
dist.init_process_group("cncl")
torch.mlu.set_device(0)
x = torch.ones(65536, device="mlu") * 2
dist.all_reduce(x)
torch.mlu.synchronize()
dist.destroy_process_group()
'''


def test_a_what_if_past_the_end_of_simulated_time_names_the_record_in_a_joined_replay(tmp_path):
    # the collective meets the overflow while reaching its stream's work (outside a shim
    # call's status): still the what-if's fault, exit status 2, file and record named
    trace = record(tmp_path, "kar", KERNEL_THEN_ALL_REDUCE, world=2)
    res = cardsim("replay", trace, "--set", "memory.bandwidth=1e-30 TB/s")
    assert res.returncode == 2, (res.returncode, res.stderr)
    # both ranks overflow; whichever meets it first reports and takes the other down
    assert re.search(r"rank[01]\.cstrace: record \d+", res.stderr) and \
        "the what-if cannot replay it" in res.stderr and "simulated time overflow" in res.stderr, res.stderr
