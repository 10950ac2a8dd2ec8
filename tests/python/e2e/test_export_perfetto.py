"""`cardsim export PATH --perfetto OUT.json`: a recorded run as Chrome Trace Event JSON for
ui.perfetto.dev. The file loads; every slice is on a named track; slices on a track nest;
device slices are the trace's device commands at their recorded times, host slices its host
calls; flows pair up and, replayed the way Perfetto's importer orders and binds events, join
the slices they mean to (call to command, event record to wait, collective members across
ranks); memory counters come back to where they started; the bytes depend on the trace
alone. Bad input exits 2 naming the file, as `cardsim info` does."""
import collections
import json
import os
import re
import shutil
import struct
import subprocess
import zlib

import pytest

from conftest import ROOT, free_port

CARDSIM = ROOT / ".venv" / "bin" / "cardsim"
PYTHON = ROOT / ".venv" / "bin" / "python"


def _env(extra=None):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("CARDSIM_") and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                                       "MASTER_PORT", "MLU_VISIBLE_DEVICES")}
    e.update(extra or {})
    return e


def cardsim(*args):
    return subprocess.run([str(CARDSIM), *map(str, args)], capture_output=True, text=True, env=_env(), timeout=300)


def record(tmp_path, name, code, world=1, in_code=False):
    """Runs `code` on `world` ranks with CARDSIM_TRACE (or, `in_code`, with TRACE_DIR for the
    code's own record_trace); returns the trace directory."""
    out = tmp_path / name
    script = tmp_path / f"{name}.py"
    script.write_text(code)
    port = free_port()
    where = dict(TRACE_DIR=str(out)) if in_code else dict(CARDSIM_TRACE=str(out))
    procs = [subprocess.Popen([str(PYTHON), str(script)], cwd=str(ROOT), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=_env(dict(**where, CARDSIM_DEVICES="2" if world == 1 else "1",
                                            RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK="0",
                                            MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))))
             for r in range(world)]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    return out


def export(path, out):
    res = cardsim("export", path, "--perfetto", out)
    assert res.returncode == 0, res.stderr
    assert str(out) in res.stdout
    return json.loads(out.read_bytes().decode("utf-8"))   # strict: the file is UTF-8


def info_json(path):
    res = cardsim("info", path, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def recorded(path, shown=False):
    """(rank, start, end, kind) of every device command and (rank, call, begin, end) of every
    host call, from `cardsim info PATH --records`; `shown`: those a timeline shows, without
    the runtime's own event markers (created with flags & 8; their records, not waits)."""
    res = cardsim("info", path, "--records")
    assert res.returncode == 0, res.stderr
    commands, calls = [], []
    runtime_events, runtime_calls = set(), set()
    for line in res.stdout.splitlines():
        m = re.match(r"^(\S*rank(\d+)\.cstrace) #(\d+) (.*)$", line)
        if not m or m.group(3) == "0":
            continue
        rank, text = int(m.group(2)), m.group(4)
        if text.startswith("command {"):
            f = dict(re.findall(r"(\w+): (\S+)", text[len("command {"):text.rindex("}")]))
            if shown and (rank, int(f.get("call", 0))) in runtime_calls and f.get("kind") == "EVENT_RECORD":
                continue
            commands.append((rank, int(f.get("start_ps", 0)), int(f.get("end_ps", 0)), f.get("kind", "KERNEL")))
        elif "}" in text and not text.startswith("name {"):
            f = dict(re.findall(r"(\w+): (\S+)", text[text.rindex("}") + 1:]))
            if text.startswith("event {"):
                ev = dict(re.findall(r"(\w+): (\S+)", text[len("event {"):text.index("}")]))
                if "op" not in ev and int(ev.get("flags", 0)) & 8:
                    runtime_events.add((rank, ev["event"]))
                if ev.get("op") != "WAIT" and (rank, ev["event"]) in runtime_events:
                    runtime_calls.add((rank, int(f["call"])))
                    if shown:
                        continue
            if "call" in f:
                calls.append((rank, int(f["call"]), int(f.get("host_begin_ps", 0)), int(f.get("host_end_ps", 0))))
    return sorted(commands), sorted(calls)


def ps(us):
    return round(us * 1e6)


def track_spans(doc, span):
    """Per track, `span(slice)` of each slice: its (begin, end)."""
    spans = collections.defaultdict(list)
    for e in slices(doc):
        spans[(e["pid"], e["tid"])].append(span(e))
    return spans


def assert_nested(spans_by_track, threads):
    """The spans on each track are disjoint or properly nested."""
    for track, spans in spans_by_track.items():
        stack = []
        for b, end in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= b:
                stack.pop()
            assert not stack or end <= stack[-1], (threads[track], b, end, stack)
            stack.append(end)


def imported_ns(us):
    """What Perfetto's JSON importer makes of a time: the double times 1000, truncated."""
    return int(us * 1000.0)


def process_names(doc):
    return {e["pid"]: e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}


def thread_names(doc):
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def slices(doc, cat=None):
    return [e for e in doc["traceEvents"] if e["ph"] == "X" and (cat is None or e["cat"] == cat)]


def rank_of(doc):
    """pid -> rank, from the process names ("rank 1 · host", "rank 1 · MLU370-X8 #0"); the
    "fabric links" process belongs to no rank."""
    return {pid: int(re.match(r"rank (\d+) ", n).group(1)) for pid, n in process_names(doc).items()
            if n.startswith("rank ")}


def perfetto_import(doc):
    """Replays the events the way Perfetto's JSON importer does: sorted by nanosecond
    timestamp, at one timestamp complete slices longest first and then the rest in file
    order; a slice that partially overlaps one open on its track is dropped; a flow event
    binds to the slice on top of its track's stack, and a finish before its start is lost.
    Returns (dropped slices, {flow id: {"s": slice, "f": slice}})."""
    def key(item):
        i, e = item
        return (imported_ns(e.get("ts", 0)), (1 << 62) - imported_ns(e["dur"]) if e["ph"] == "X" else 1 << 62, i)

    stacks, dropped, flows = {}, [], {}
    for _, e in sorted(enumerate(doc["traceEvents"]), key=key):
        track = (e.get("pid"), e.get("tid"))
        if e["ph"] == "X":
            t, d = imported_ns(e["ts"]), imported_ns(e["dur"])
            st = stacks.setdefault(track, [])
            ok = True
            for j in range(len(st) - 1, -1, -1):
                top_t, top_d, _ = st[j]
                end = top_t + top_d
                if end < t or (end == t and not (top_d == 0 and d == 0)):
                    st.pop()
                    continue
                if t < end < t + d:
                    ok = False
                    break
            if ok:
                st.append((t, d, e))
            else:
                dropped.append(e)
        elif e["ph"] in ("s", "f"):
            st = stacks.get(track)
            f = flows.setdefault(e["id"], {})
            if e["ph"] == "f" and "s" not in f:
                f["lost"] = True
            f[e["ph"]] = st[-1][2] if st else None
    return dropped, flows


def check_timeline(doc):
    """What every export must satisfy; returns the flows as Perfetto binds them."""
    assert doc["displayTimeUnit"] == "ns"
    events = doc["traceEvents"]
    procs, threads = process_names(doc), thread_names(doc)
    # every slice on a named track of a named process
    for e in slices(doc):
        assert e["pid"] in procs and (e["pid"], e["tid"]) in threads, e
    # thread ids are unique across processes (Perfetto names threads by thread id)
    assert len({tid for _, tid in threads}) == len(threads)
    # slices on one track are disjoint or properly nested, in picoseconds, and as a reader
    # adding the doubles ts + dur sees them: a slice ends exactly where the next begins or
    # its parent ends, not a rounding error past it
    assert_nested(track_spans(doc, lambda e: (ps(e["ts"]), ps(e["ts"]) + ps(e["dur"]))), threads)
    assert_nested(track_spans(doc, lambda e: (e["ts"], e["ts"] + e["dur"])), threads)
    # every time imports to its exact nanosecond (no 1 ns overlaps from float truncation);
    # a slice's end to its own, or (its start's nanosecond later in the nanosecond than its
    # end's) one short
    for e in events:
        if e["ph"] in ("X", "C", "s", "f"):
            assert imported_ns(e["ts"]) == ps(e["ts"]) // 1000, e
        if e["ph"] == "X":
            end_ns = (ps(e["ts"]) + ps(e["dur"])) // 1000
            assert imported_ns(e["ts"]) + imported_ns(e["dur"]) in (end_ns, end_ns - 1), e
    # flows: one start and one finish each
    ends = collections.defaultdict(list)
    for e in events:
        if e["ph"] in ("s", "f"):
            ends[e["id"]].append(e["ph"])
    assert all(sorted(v) == ["f", "s"] for v in ends.values()), ends
    # ... every arrow forward in time, to the picosecond
    at = {(e["id"], e["ph"]): e["ts"] for e in events if e["ph"] in ("s", "f")}
    assert all(at[(i, "s")] <= at[(i, "f")] for i in ends), [(i, at[(i, "s")], at[(i, "f")]) for i in ends
                                                            if at[(i, "s")] > at[(i, "f")]]
    # ... and Perfetto keeps every slice and binds every flow, finish after start
    dropped, flows = perfetto_import(doc)
    assert dropped == []
    assert set(flows) == set(ends)
    for fid, f in flows.items():
        assert not f.get("lost") and f["s"] is not None and f["f"] is not None, (fid, f)
    cats = {e["id"]: e["cat"] for e in events if e["ph"] == "s"}
    for fid, f in flows.items():
        a, b = f["s"]["args"], f["f"]["args"]
        if cats[fid] == "submit":       # from the host call to the command it submitted
            assert f["s"]["cat"] == "host" and f["f"]["cat"] == "device"
            assert a["call"] == b["call"], (a, b)
        elif cats[fid] == "event":      # between an event's record and a wait on it
            assert {a["kind"], b["kind"]} == {"EVENT_RECORD", "EVENT_WAIT"} and a["event"] == b["event"], (a, b)
        else:                           # members of one collective on different ranks
            assert cats[fid] == "collective"
            assert a["kind"] == b["kind"] == "COLLECTIVE" and a["rank"] != b["rank"]
            assert (a["group"], a["group_seq"]) == (b["group"], b["group_seq"])
    return flows, cats


def check_against_trace(doc, trace):
    """Device and host slices are the trace's commands and calls at their recorded times."""
    dev, host = slices(doc, "device"), slices(doc, "host")
    commands, calls = recorded(trace, shown=True)
    assert len(dev) == len(commands) > 0 and len(host) == len(calls)
    assert sorted((e["args"]["rank"], ps(e["ts"]), ps(e["ts"]) + ps(e["dur"]), e["args"]["kind"]) for e in dev) == commands
    ranks = rank_of(doc)
    assert sorted((ranks[e["pid"]], e["args"]["call"], ps(e["ts"]), ps(e["ts"]) + ps(e["dur"])) for e in host) == calls


TWO_STREAMS = r'''
import torch, torch_mlu
x = torch.randn(256, 256, device="mlu")
side = torch.mlu.Stream()
for i in range(2):
    with torch.mlu.stream(side):
        w = torch.ones(1 << 16, device="mlu") * 3
        done = torch.mlu.Event()
        done.record()
    torch.mlu.current_stream().wait_event(done)
    y = (x @ x).relu() + w[:256]
    torch.ones(8, device="mlu:1").add_(1)          # the second card too
torch.mlu.synchronize()
del x, y, w
torch.mlu.empty_cache()                           # every block back: memory in use returns to 0
torch.mlu.synchronize()
'''


def test_a_two_stream_program_with_an_event_wait(tmp_path):
    trace = record(tmp_path, "streams", TWO_STREAMS)
    doc = export(trace, tmp_path / "streams.json")
    flows, cats = check_timeline(doc)
    check_against_trace(doc, trace)

    procs, threads = process_names(doc), thread_names(doc)
    assert sorted(procs.values()) == ["rank 0 · MLU370-X8 #0", "rank 0 · MLU370-X8 #1", "rank 0 · host"]
    card0 = next(p for p, n in procs.items() if n.endswith("#0"))
    streams = {n for (p, _), n in threads.items() if p == card0}
    assert {"stream 0", "stream 1"} <= streams and not any("overlap" in n for n in threads.values())
    names = {e["name"] for e in slices(doc, "device")}
    assert {"aten::mm", "aten::relu", "event record", "event wait"} <= names, names
    assert any(e["name"] == "launch aten::mm" for e in slices(doc, "host"))
    # one arrow per command from its call, one per wait from its event's record
    assert sum(1 for c in cats.values() if c == "submit") == len(slices(doc, "device"))
    assert sum(1 for c in cats.values() if c == "event") == 2
    k = next(e for e in slices(doc, "device") if e["name"] == "aten::mm")["args"]
    assert k["flops"] > 0 and k["bytes"] > 0 and k["kind"] == "KERNEL" and k["call"] > 0

    # device memory in use: grows, and empty_cache gives every block back
    mem = [e for e in doc["traceEvents"] if e["ph"] == "C" and e["pid"] == card0 and e["name"] == "device memory"]
    values = [e["args"]["bytes_in_use"] for e in mem]
    assert values[0] == 0 and max(values) > 0 and values[-1] == 0, values
    assert [e["ts"] for e in mem] == sorted(e["ts"] for e in mem)

    # the same trace gives the same bytes, wherever it lies
    copy = tmp_path / "copy"
    shutil.copytree(trace, copy)
    export(copy, tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == (tmp_path / "streams.json").read_bytes()


DP = r'''
import torch, torch_mlu
import torch.distributed as dist
dist.init_process_group("cncl")
rank = dist.get_rank()
torch.mlu.set_device(0)
x = torch.randn(64 * (rank + 1), 256, device="mlu")   # rank 1 works twice as long
w = torch.randn(256, 256, device="mlu")
for _ in range(2):
    g = (x @ w).sum(0)
    dist.all_reduce(g)
torch.mlu.synchronize()
dist.destroy_process_group()
'''


PARTIAL_COLLECTIVES = r'''
import os, torch, torch_mlu
import torch.distributed as dist
dist.init_process_group("cncl")
rank = dist.get_rank()
torch.mlu.set_device(0)
t = torch.ones(64 * 1024, device="mlu")
with torch.mlu.record_trace(os.environ["TRACE_DIR"]):
    dist.all_reduce(t)      # begins on an idle stream: the collective starts 1 ps into its call
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, t, 1 - rank),
                                     dist.P2POp(dist.irecv, torch.empty_like(t), 1 - rank)]):
        w.wait()
    torch.mlu.synchronize()
dist.destroy_process_group()
'''


def test_a_partial_recordings_collectives_export_with_arrows_forward(tmp_path):
    trace = record(tmp_path, "partial", PARTIAL_COLLECTIVES, world=2, in_code=True)
    doc = export(trace, tmp_path / "partial.json")
    flows, cats = check_timeline(doc)
    assert sorted(cats.values()).count("collective") == 3, cats   # the all_reduce and both directions


def test_collectives_are_joined_across_ranks(tmp_path):
    trace = record(tmp_path, "dp", DP, world=2)
    doc = export(trace, tmp_path / "dp.json")
    flows, cats = check_timeline(doc)
    check_against_trace(doc, trace)
    assert sorted(n for n in process_names(doc).values()) == [
        "fabric links", "rank 0 · MLU370-X8 #0", "rank 0 · host", "rank 1 · MLU370-X8 #0", "rank 1 · host"]
    colls = [e for e in slices(doc, "device") if e["args"]["kind"] == "COLLECTIVE"]
    assert len(colls) == 4
    # each all_reduce: its two members joined, each tied to its own collective call
    joined = {(f["s"]["args"]["group_seq"], f["s"]["args"]["rank"], f["f"]["args"]["rank"])
              for fid, f in flows.items() if cats[fid] == "collective"}
    assert {(s, min(a, b), max(a, b)) for s, a, b in joined} == {(0, 0, 1), (1, 0, 1)}
    host = {(rank_of(doc)[e["pid"]], e["args"]["call"]): e["name"] for e in slices(doc, "host")}
    assert all(host[(c["args"]["rank"], c["args"]["call"])] == "collective all_reduce" for c in colls)
    # a collective ends together on both ranks; the later arrival starts later
    a, b = sorted((c for c in colls if c["args"]["group_seq"] == 0), key=lambda c: c["args"]["rank"])
    assert ps(a["ts"]) + ps(a["dur"]) == ps(b["ts"]) + ps(b["dur"])
    # link counters: a "fabric links" process with one utilization counter per link the
    # all-reduces use, busy only while a collective runs, idle again after each
    fabric = [p for p, n in process_names(doc).items() if n == "fabric links"]
    assert len(fabric) == 1
    links = collections.defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "C" and e["pid"] == fabric[0]:
            links[e["name"]].append((ps(e["ts"]), e["args"]["utilization"]))
    assert links and all(n.startswith("link card0.") for n in links), list(links)
    ends = {ps(c["ts"]) + ps(c["dur"]) for c in colls}
    for name, samples in links.items():
        assert [t for t, _ in samples] == sorted(t for t, _ in samples)
        assert samples[-1][1] == 0 and all(0 <= u <= 1 for _, u in samples), (name, samples)
        assert {t for t, u in samples if u == 0} <= ends, (name, samples, ends)   # back to idle as each ends
        assert sum(1 for _, u in samples if u > 0) == 2                          # two all-reduces


# ---- a handmade trace: names that need escaping, overlapping commands, exact times -------

def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _int(field, v):
    return _varint(field << 3) + _varint(v & 0xFFFFFFFFFFFFFFFF)


def _bytes(field, b):
    b = b.encode() if isinstance(b, str) else b
    return _varint(field << 3 | 2) + _varint(len(b)) + b


def _double(field, v):
    return _varint(field << 3 | 1) + struct.pack("<d", v)


def _call(n, begin, end, device=0):
    return _int(20, n) + _int(22, begin) + _int(23, end) + _int(25, device)


NAMES = ['quote " back \\ slash', "new\nline\ttab \x01 ctrl \x7f", "ünïcødé → 🚀 \u2028"]


def handmade_trace(path, rank=0, world=1, major=1):
    """A trace written byte by byte (traces/proto/trace.proto): two kernels on one stream
    that overlap (the model never does this), one device allocation and its free."""
    header = _int(1, major) + _int(2, 0) + _int(8, 1) + _bytes(9, "Card \"X\"") + _int(10, rank) + _int(11, world)
    recs = [_bytes(1, header)]
    for i, n in enumerate(NAMES, 1):
        recs.append(_bytes(2, _int(1, i) + _bytes(2, n)))
    recs.append(_bytes(7, _int(1, 1)) + _call(1, 1_000_000, 1_001_000))          # launch, ends at 1.001 us
    recs.append(_bytes(7, _int(1, 2)) + _call(2, 1_001_000, 1_002_000))
    recs.append(_bytes(3, _int(2, 0x1000) + _int(3, 4096)) + _call(3, 1_002_000, 1_003_000))   # malloc
    recs.append(_bytes(4, _int(2, 0x1000)) + _call(4, 1_003_000, 1_004_000))                   # free
    recs.append(_bytes(7, _int(1, 3)) + _call(5, 1_004_000, 1_005_000))
    for name, ready, start, end, call in ((1, 1_001_000, 1_001_000, 3_000_000, 1),
                                          (2, 1_002_000, 2_000_000, 4_000_000, 2),     # overlaps the first
                                          (3, 1_005_000, 4_000_000, 4_000_001, 5)):
        recs.append(_bytes(13, _int(5, name) + _int(6, ready) + _int(7, start) + _int(8, end) +
                           _double(9, 1e6) + _int(10, 64) + _int(11, call)))
    data = b"CSTRACE\n" + b"".join(_varint(len(r)) + r for r in recs)
    end = _int(1, len(recs)) + _int(2, 5) + _int(3, 3) + _bytes(4, "exit") + \
        _varint(5 << 3 | 5) + struct.pack("<I", zlib.crc32(data))
    rec = _bytes(14, end)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data + _varint(len(rec)) + rec)
    return path


def test_names_overlaps_and_exact_times_of_a_handmade_trace(tmp_path):
    trace = handmade_trace(tmp_path / "hand" / "rank0.cstrace")
    doc = export(trace, tmp_path / "hand.json")
    check_timeline(doc)
    check_against_trace(doc, trace)
    dev = sorted(slices(doc, "device"), key=lambda e: e["ts"])
    assert [e["name"] for e in dev] == NAMES                       # escaped and read back exactly
    assert {e["name"] for e in slices(doc, "host")} >= {"launch " + n for n in NAMES} | {"malloc", "free"}
    assert "rank 0 · Card \"X\" #0" in process_names(doc).values()
    # the overlapping command went to an overflow track of its stream
    threads = thread_names(doc)
    assert threads[(dev[0]["pid"], dev[0]["tid"])] == "stream 0"
    assert threads[(dev[1]["pid"], dev[1]["tid"])] == "stream 0 · overlap 1"
    assert threads[(dev[2]["pid"], dev[2]["tid"])] == "stream 0"
    # picoseconds kept: 1.001 us starts at 1001000 ps, and the last command lasts 1 ps
    assert ps(dev[0]["ts"]) == 1_001_000 and ps(dev[2]["dur"]) == 1
    mem = [e["args"]["bytes_in_use"] for e in doc["traceEvents"] if e["ph"] == "C"]
    assert mem == [0, 4096, 0]


# ---- bad input ----------------------------------------------------------------------------

def assert_bad(path, tmp_path, *needles):
    out = tmp_path / "bad.json"
    res = cardsim("export", path, "--perfetto", out)
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert res.stdout == ""
    for n in needles:
        assert str(n) in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "terminate" not in res.stderr
    assert not out.exists() and not (tmp_path / "bad.json.tmp").exists()


def test_truncated_and_corrupt_files(tmp_path):
    f = handmade_trace(tmp_path / "t" / "rank0.cstrace")
    data = f.read_bytes()
    f.write_bytes(data[:-7])
    assert_bad(f, tmp_path, f, "truncated")
    assert_bad(f.parent, tmp_path, f)
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0x5A
    f.write_bytes(bytes(flipped))
    assert_bad(f, tmp_path, f, "record #")


def test_foreign_newer_and_missing_files(tmp_path):
    foreign = tmp_path / "f" / "rank0.cstrace"
    foreign.parent.mkdir()
    foreign.write_text("step,loss\n1,2.5\n")
    assert_bad(foreign, tmp_path, foreign, "not a cardsim trace")
    newer = handmade_trace(tmp_path / "n" / "rank0.cstrace", major=99)
    assert_bad(newer, tmp_path, newer, "newer")
    for r in (0, 1, 3):
        handmade_trace(tmp_path / "ranks" / f"rank{r}.cstrace", rank=r, world=4)
    assert_bad(tmp_path / "ranks", tmp_path, tmp_path / "ranks" / "rank2.cstrace", "missing", "world size 4")
    assert_bad(tmp_path / "nothing", tmp_path, tmp_path / "nothing")


def test_output_and_usage_errors(tmp_path):
    trace = handmade_trace(tmp_path / "ok" / "rank0.cstrace")
    out = tmp_path / "no-such-dir" / "x.json"
    res = cardsim("export", trace, "--perfetto", out)
    assert res.returncode == 2 and str(out) in res.stderr, res.stderr
    res = cardsim("export", trace)
    assert res.returncode == 2 and "--perfetto" in res.stderr
    res = cardsim("export", "--perfetto", tmp_path / "x.json")
    assert res.returncode == 2 and "PATH" in res.stderr
    assert cardsim("export", "--help").returncode == 0
    # "-": the timeline on standard output, what was written said on standard error (it
    # wrote a file named "-" before)
    res = subprocess.run([CARDSIM, "export", str(trace), "--perfetto", "-"], capture_output=True, text=True,
                         cwd=str(tmp_path), timeout=120)
    assert res.returncode == 0 and json.loads(res.stdout)["traceEvents"], res.stderr
    assert "wrote standard output:" in res.stderr and not (tmp_path / "-").exists()
    # info: the records as text and one JSON object do not mix on one output
    res = cardsim("info", trace, "--json", "--records")
    assert res.returncode == 2 and "give one of them" in res.stderr and res.stdout == "", res.stderr


def test_the_summary_counts_memory_and_link_samples_apart(tmp_path):
    out = tmp_path / "dp.json"
    res = cardsim("export", ROOT / "tests" / "data" / "golden" / "traces" / "dp_step", "--perfetto", out)
    assert res.returncode == 0, res.stderr
    doc = json.loads(out.read_text())
    fabric = {p for p, n in process_names(doc).items() if n == "fabric links"}
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    memory = sum(1 for e in counters if e["pid"] not in fabric)
    links = [e for e in counters if e["pid"] in fabric]
    assert memory and links
    assert f", {memory} memory samples\n" in res.stdout, res.stdout
    assert (f"fabric links: {len({e['name'] for e in links})} utilization counters, {len(links)} samples"
            in res.stdout), res.stdout
