"""`cardsim export PATH --chakra PREFIX`: a recorded run as MLCommons Chakra execution traces
(what ASTRA-sim reads), and `cardsim replay PREFIX` of Chakra files (cardsim's own, which
come back as the same graph, and foreign ones, timed by the model). The files are read back here with a decoder of their own, written
from Chakra's published schema (field numbers and types of et_def.proto), not from the
project's generated code: GlobalMetadata first, then one node per recorded device command
with its recorded time, collectives as COMM_COLL_NODEs with Chakra's comm_type, comm_size
and a pg_name the groups file resolves to the ranks, and data_deps that keep stream order,
event waits and host synchronizations, with no cycle."""
import json
import pathlib

import pytest
import struct
import subprocess

from test_export_perfetto import CARDSIM as CARDSIM_BIN
from test_export_perfetto import DP, TWO_STREAMS, cardsim, record, recorded

ROOT = pathlib.Path(__file__).resolve().parents[3]

# ---- a protobuf wire decoder, for Chakra's schema -------------------------------------------

def _varint(buf, i):
    v, shift = 0, 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            return v, i
        shift += 7


def _fields(buf):
    """(field number, wire type, value) of one message; value: int or bytes."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise AssertionError(f"wire type {wt}")
        yield num, wt, v


def _signed(v):
    return v - (1 << 64) if v >= 1 << 63 else v


def _attr(buf):
    """AttributeProto: name = 1; double_val 3, int32_val 7, int64_val 9, uint64_val 13,
    bool_val 27, string_val 29."""
    name, value = None, None
    for num, wt, v in _fields(buf):
        if num == 1:
            name = v.decode()
        elif num == 3:
            value = ("double", struct.unpack("<d", v)[0])
        elif num in (7, 9):
            value = ({7: "int32", 9: "int64"}[num], _signed(v))
        elif num == 13:
            value = ("uint64", v)
        elif num == 27:
            value = ("bool", bool(v))
        elif num == 29:
            value = ("string", v.decode())
    return name, value


def _node(buf):
    """Node: id 1, name 2, type 3, ctrl_deps 4, data_deps 5 (packed), start_time_micros 6,
    duration_micros 7, attr 10."""
    n = {"id": 0, "name": "", "type": 0, "data_deps": [], "ctrl_deps": [], "start": 0, "duration": 0, "attr": {}}
    for num, wt, v in _fields(buf):
        if num == 1:
            n["id"] = v
        elif num == 2:
            n["name"] = v.decode()
        elif num == 3:
            n["type"] = v
        elif num in (4, 5):
            key = "ctrl_deps" if num == 4 else "data_deps"
            if wt == 2:   # packed
                j = 0
                while j < len(v):
                    d, j = _varint(v, j)
                    n[key].append(d)
            else:
                n[key].append(v)
        elif num == 6:
            n["start"] = v
        elif num == 7:
            n["duration"] = v
        elif num in (8, 9):   # IOInfo inputs / outputs: values 1, shapes 2, types 3
            for f, _, x in _fields(v):
                if f == 2:
                    n["inputs_shapes" if num == 8 else "outputs_shapes"] = x.decode()
        elif num == 10:
            name, value = _attr(v)
            n["attr"][name] = value
    return n


def read_et(path):
    """(metadata, nodes) of a length-delimited Chakra file."""
    buf = path.read_bytes()
    msgs, i = [], 0
    while i < len(buf):
        n, i = _varint(buf, i)
        msgs.append(buf[i:i + n])
        i += n
    assert i == len(buf), "a message runs past the end of the file"
    meta = {"version": None, "attr": {}}
    for num, _, v in _fields(msgs[0]):
        if num == 1:
            meta["version"] = v.decode()
        elif num == 2:
            name, value = _attr(v)
            meta["attr"][name] = value
    return meta, [_node(m) for m in msgs[1:]]


COMP, SEND, RECV, COLL = 4, 5, 6, 7
ALL_REDUCE = 0
ALL_TO_ALL = 6


def export_chakra(trace, prefix):
    res = cardsim("export", trace, "--chakra", prefix)
    assert res.returncode == 0, res.stderr
    assert f"{prefix}.0.et" in res.stdout and f"{prefix}.comm_groups.json" in res.stdout, res.stdout
    return res.stdout


def is_host(n):
    return n["attr"]["cardsim_kind"][1] == "HOST"


def device(nodes):
    """The device's nodes (the host's time between calls, CPU nodes, left out)."""
    return [n for n in nodes if not is_host(n)]


def check_graph(nodes):
    ids = [n["id"] for n in nodes]
    assert ids == list(range(len(nodes)))
    last_host = None
    for n in nodes:
        assert all(d < n["id"] for d in n["data_deps"]), n   # numbered in completion order: no cycle
        assert n["attr"]["is_cpu_op"] == ("bool", is_host(n))
        if is_host(n):   # one chain: the host's time, step after step
            assert n["name"] == "host" and n["type"] == COMP and "num_ops" not in n["attr"], n
            assert n["duration"] == (n["attr"]["cardsim_duration_ps"][1] + 500_000) // 1_000_000
            assert last_host is None or last_host in n["data_deps"], n
            last_host = n["id"]


def test_two_streams_with_an_event_wait(tmp_path):
    trace = record(tmp_path, "streams", TWO_STREAMS)
    out = export_chakra(trace, tmp_path / "streams")
    meta, nodes = read_et(tmp_path / "streams.0.et")
    assert meta["version"] == "0.0.4"
    assert meta["attr"]["preset"] == ("string", "mlu370-x8") and meta["attr"]["rank"] == ("int64", 0)
    check_graph(nodes)
    hosts = len(nodes) - len(device(nodes))
    assert hosts > 0 and f"{len(nodes)} nodes" in out and f"{hosts} host)" in out, out
    everything, nodes = nodes, device(nodes)
    commands, _ = recorded(trace)
    assert len(nodes) == len(commands)
    # every node is its recorded command: exact picoseconds ride along, Chakra's µs rounded
    assert sorted((n["attr"]["cardsim_start_ps"][1], n["attr"]["cardsim_kind"][1]) for n in nodes) == \
        sorted((c[1], c[3]) for c in commands)
    for n in nodes:
        dur = n["attr"]["cardsim_duration_ps"][1]
        if n["attr"]["cardsim_kind"][1] not in ("EVENT_RECORD", "EVENT_WAIT"):
            assert n["duration"] == (dur + 500_000) // 1_000_000
    mm = [n for n in nodes if n["name"] == "aten::mm"]
    assert len(mm) == 2 and all(n["type"] == COMP for n in mm)
    assert all(n["attr"]["num_ops"] == ("int64", 2 * 256 ** 3) for n in mm)
    assert all(n["attr"]["tensor_size"][1] > 0 for n in mm)
    # operand shapes as Chakra keeps them, text, inputs and outputs apart
    assert all(n["inputs_shapes"] == "[[256, 256], [256, 256]]" and n["outputs_shapes"] == "[[256, 256]]"
               for n in mm), mm[0]

    by_id = {n["id"]: n for n in everything}

    def key(n):
        return n["attr"]["cardsim_device"][1], n["attr"]["cardsim_stream"][1]

    # stream order: each node depends on the previous one on its stream
    streams = {}
    for n in sorted(nodes, key=lambda n: n["attr"]["cardsim_start_ps"][1]):
        streams.setdefault(key(n), []).append(n)
    for seq in streams.values():
        for a, b in zip(seq, seq[1:]):
            assert a["id"] in b["data_deps"], (a["name"], b["name"])
    # each event wait depends on the record on the side stream
    waits = [n for n in nodes if n["attr"]["cardsim_kind"][1] == "EVENT_WAIT"]
    assert len(waits) == 2
    for w in waits:
        recs = [by_id[d] for d in w["data_deps"] if by_id[d]["attr"]["cardsim_kind"][1] == "EVENT_RECORD"]
        assert len(recs) == 1 and key(recs[0]) != key(w) and w["duration"] == 0
    assert (tmp_path / "streams.comm_groups.json").read_text() == "{}\n"

    # the same trace, the same bytes
    export_chakra(trace, tmp_path / "again")
    assert (tmp_path / "again.0.et").read_bytes() == (tmp_path / "streams.0.et").read_bytes()


def test_collectives_of_two_ranks(tmp_path):
    trace = record(tmp_path, "dp", DP, world=2)
    export_chakra(trace, tmp_path / "dp")
    groups = json.loads((tmp_path / "dp.comm_groups.json").read_text())
    assert list(groups.values()) == [[0, 1]]
    per_rank = {}
    for r in range(2):
        meta, nodes = read_et(tmp_path / f"dp.{r}.et")
        assert meta["attr"]["rank"] == ("int64", r) and meta["attr"]["world_size"] == ("int64", 2)
        check_graph(nodes)
        colls = [n for n in nodes if n["type"] == COLL]
        assert len(colls) == 2, [n["name"] for n in nodes]
        for c in colls:
            assert c["attr"]["comm_type"] == ("int64", ALL_REDUCE)
            assert c["attr"]["comm_size"] == ("int64", 256 * 4)   # the float32 gradient of 256
            assert c["attr"]["pg_name"][0] == "string" and c["attr"]["pg_name"][1] in groups
            # the all_reduce waits for the matmul and sum that produced its gradient
            assert c["data_deps"], c
        per_rank[r] = nodes
    # the host synchronization before the end: nothing after it, but every stream's last
    # node is done by then; and both ranks have the same collectives in the same order
    assert [n["attr"]["comm_size"] for n in per_rank[0] if n["type"] == COLL] == \
        [n["attr"]["comm_size"] for n in per_rank[1] if n["type"] == COLL]


BARRIER = DP.replace("torch.mlu.synchronize()", "dist.barrier()\ntorch.mlu.synchronize()")


def test_a_barrier_is_exported_as_the_all_reduce_of_one_element_it_is(tmp_path):
    """Chakra has BARRIER but ASTRA-sim runs only all_reduce, all_gather, reduce_scatter,
    all_to_all and broadcast: a barrier goes out as the 4-byte all-reduce cardsim times it
    as, marked so that a replay of the files runs a barrier again."""
    trace = record(tmp_path, "bar", BARRIER, world=2)
    export_chakra(trace, tmp_path / "bar")
    for r in range(2):
        colls = [n for n in read_et(tmp_path / f"bar.{r}.et")[1] if n["type"] == COLL]
        assert len(colls) == 3, [n["name"] for n in colls]
        last = colls[-1]
        assert last["attr"]["comm_type"] == ("int64", ALL_REDUCE)
        assert last["attr"]["comm_size"] == ("int64", 4)
        assert last["attr"]["cardsim_op"] == ("string", "barrier")
        assert all("cardsim_op" not in c["attr"] for c in colls[:2])
    replay(tmp_path / "bar", "--keep", tmp_path / "bar-kept")
    kept = cardsim("info", tmp_path / "bar-kept", "--records")
    assert kept.returncode == 0 and 'op: "barrier"' in kept.stdout, kept.stdout[-2000:]
    export_chakra(tmp_path / "bar-kept", tmp_path / "bar-again")
    for r in range(2):
        assert canonical(read_et(tmp_path / f"bar-again.{r}.et")[1]) == canonical(read_et(tmp_path / f"bar.{r}.et")[1])


UNEVEN_A2A = r'''
import torch, torch_mlu
import torch.distributed as dist
dist.init_process_group("cncl")
rank = dist.get_rank()
torch.mlu.set_device(0)
# rank 0 sends rank 1 3000 elements, rank 1 sends rank 0 1000 (each keeps 500 for itself)
send = [[500, 3000], [1000, 500]][rank]
recv = [send_r[rank] for send_r in [[500, 3000], [1000, 500]]]
out = torch.empty(sum(recv), device="mlu")
dist.all_to_all_single(out, torch.ones(sum(send), device="mlu"), recv, send)
torch.mlu.synchronize()
dist.destroy_process_group()
'''


def test_an_uneven_all_to_all_keeps_its_splits_through_chakra(tmp_path):
    # Chakra has only the total (comm_size): each member's bytes to and from every member ride
    # along as cardsim attributes, so the export replays as the exchange it was (it ran the
    # even one before, whose splits the ranks disagreed on)
    trace = record(tmp_path, "a2a", UNEVEN_A2A, world=2)
    export_chakra(trace, tmp_path / "a2a")
    sends = {}
    for r in range(2):
        (coll,) = [n for n in read_et(tmp_path / f"a2a.{r}.et")[1] if n["type"] == COLL]
        assert coll["attr"]["comm_type"] == ("int64", ALL_TO_ALL)
        sends[r] = coll["attr"]["cardsim_send_bytes"]
    assert sends == {0: ("string", "2000,12000"), 1: ("string", "4000,2000")}, sends
    replay(tmp_path / "a2a", "--keep", tmp_path / "a2a-kept")
    kept = cardsim("info", tmp_path / "a2a-kept", "--records")
    assert kept.returncode == 0 and "send_bytes: 12000" in kept.stdout, kept.stdout[-2000:]
    # a list that is not one byte count per member is named
    for bad in ("2000", "2000,x"):
        write_et(tmp_path / "b.0.et", [_enc_node(0, "a2a", COLL, attrs=[
            ("comm_type", "int64", ALL_TO_ALL), ("comm_size", "int64", 4000), ("pg_name", "string", "1"),
            ("cardsim_send_bytes", "string", bad)])])
        (tmp_path / "b.comm_groups.json").write_text(json.dumps({"1": [0, 1]}))
        write_et(tmp_path / "b.1.et", [_enc_node(0, "a2a", COLL, attrs=[
            ("comm_type", "int64", ALL_TO_ALL), ("comm_size", "int64", 4000), ("pg_name", "string", "1")])])
        res = cardsim("replay", tmp_path / "b", "--preset", "h100-sxm")
        assert res.returncode == 2 and f"cardsim_send_bytes '{bad}' is not one byte count per member (2)" in res.stderr, \
            res.stderr


def test_bad_input_and_usage(tmp_path):
    res = cardsim("export", tmp_path / "missing", "--chakra", tmp_path / "x")
    assert res.returncode == 2 and "missing" in res.stderr and res.stdout == ""
    assert not list(tmp_path.glob("x*"))
    res = cardsim("export", tmp_path)
    assert res.returncode == 2 and "--perfetto OUT.json and/or --chakra PREFIX" in res.stderr
    trace = record(tmp_path, "streams", TWO_STREAMS)
    res = cardsim("export", trace, "--chakra", tmp_path / "no" / "such" / "dir" / "p")
    assert res.returncode == 2 and "cannot write" in res.stderr and str(tmp_path / "no") in res.stderr


# ---- cardsim replay of Chakra files ----------------------------------------------------------

def canonical(nodes):
    """A graph independent of node numbering (completion order changes with timing): each
    node by its card, its stream's sequence of names and its place in it."""
    streams = {}
    for n in sorted(nodes, key=lambda n: n["attr"]["cardsim_start_ps"][1]):
        where = (-1, -1) if is_host(n) else (n["attr"]["cardsim_device"][1], n["attr"]["cardsim_stream"][1])
        streams.setdefault(where, []).append(n)
    label = {}
    for (dev, _), seq in streams.items():
        sig = tuple(n["name"] for n in seq)
        for i, n in enumerate(seq):
            label[n["id"]] = (dev, sig, i)
    # the host's steps keep their time too (the recorded picoseconds)
    return {label[n["id"]]: (n["name"], n["type"], n["attr"].get("num_ops"), n["attr"].get("tensor_size"),
                             n["attr"].get("comm_type"), n["attr"].get("comm_size"),
                             n["attr"]["cardsim_duration_ps"] if is_host(n) else None,
                             sorted(label[d] for d in n["data_deps"]))
            for n in nodes}


def replay(path, *extra):
    res = cardsim("replay", path, *extra)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


# Point to point: a receive posts a marker of the runtime's own (no node of the export); an
# exchange's two directions are two transfers, each side's tag its own direction's count.
P2P = r'''
import torch, torch_mlu
import torch.distributed as dist
dist.init_process_group("cncl")
rank = dist.get_rank()
torch.mlu.set_device(0)
x = torch.randn(256, 256, device="mlu")
for _ in range(2):
    y = x @ x
    if rank == 0:
        dist.send(y, 1)
    else:
        dist.recv(y, 0)
    x = y.tanh()
    # An exchange: both directions at once (each side's send pairs with the other's receive).
    z = torch.empty_like(x)
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, 1 - rank), dist.P2POp(dist.irecv, z, 1 - rank)]):
        w.wait()
    x = x + z
torch.mlu.synchronize()
dist.destroy_process_group()
'''


def test_an_export_replays_to_the_same_graph(tmp_path):
    """record -> export --chakra -> replay the Chakra files -> export the replayed run: the
    same nodes with the same work and dependencies, on one rank and on two."""
    for name, code, world in (("streams", TWO_STREAMS, 1), ("dp", DP, 2), ("p2p", P2P, 2)):
        trace = record(tmp_path, name, code, world=world)
        export_chakra(trace, tmp_path / name)
        out = replay(tmp_path / name, "--keep", tmp_path / f"{name}-kept", "--json", "-")
        assert "(as recorded)" in out.stderr and f"{world} rank(s)" in out.stderr, out.stderr
        # the host's time between calls rides along (CPU nodes): the recording's time, exactly;
        # an exchange's receive, posted where its batch began (before its send, on one
        # stream), runs beside the send as it did (cardsim_posted_before: Chakra has no
        # batched point-to-point)
        recorded_us = json.loads(cardsim("info", trace, "--json").stdout)["recorded_total_us"]
        total_us = json.loads(out.stdout)["total_us"]
        assert total_us == pytest.approx(recorded_us, abs=1e-6), name
        if name == "p2p":
            for r in range(world):
                nodes = read_et(tmp_path / f"{name}.{r}.et")[1]
                byid = {n["id"]: n for n in nodes}
                posted = [n for n in nodes if "cardsim_posted_before" in n["attr"]]
                assert len(posted) == 2, posted   # the exchange's receive, each time round
                for n in posted:
                    first = byid[n["attr"]["cardsim_posted_before"][1]]
                    assert first["type"] == SEND and first["attr"]["comm_dst"][1] == 1 - r, first
        export_chakra(tmp_path / f"{name}-kept", tmp_path / f"{name}-again")
        for r in range(world):
            first = canonical(read_et(tmp_path / f"{name}.{r}.et")[1])
            again = canonical(read_et(tmp_path / f"{name}-again.{r}.et")[1])
            assert again == first
        assert (tmp_path / f"{name}-again.comm_groups.json").read_text() == \
            (tmp_path / f"{name}.comm_groups.json").read_text()


def test_orderings_from_host_synchronizations_come_back_as_they_were(tmp_path):
    """Streams (of two cards) that meet through host synchronizations, not events: the
    host's node after a synchronization waits for what the synchronization did (a device
    synchronize: every stream of its card), the work after it waits for that node; the
    replay comes back node for node, host time and the program's own event records and
    waits included."""
    golden = ROOT / "tests" / "data" / "golden" / "traces" / "two_streams"
    export_chakra(golden, tmp_path / "first")
    first = read_et(tmp_path / "first.0.et")[1]
    check_graph(first)
    cards_streams = {(n["attr"]["cardsim_device"][1], n["attr"]["cardsim_stream"][1]) for n in device(first)}
    assert len(cards_streams) == 3, cards_streams
    byid = {n["id"]: n for n in first}
    # The program's last copy comes after the host's step that waited in its device 0
    # synchronize for both streams of card 0 (not card 1's: a device synchronize is its card's).
    last = max(device(first), key=lambda n: n["attr"]["cardsim_start_ps"][1])
    step = [byid[d] for d in last["data_deps"] if is_host(byid[d])]
    assert len(step) == 1 and step[0]["attr"]["cardsim_synchronizes"] == ("string", "0"), step
    waited = {(byid[d]["attr"]["cardsim_device"][1], byid[d]["attr"]["cardsim_stream"][1])
              for d in step[0]["data_deps"] if not is_host(byid[d])}
    assert waited == {(0, 0), (0, 1)}, waited
    replay(tmp_path / "first", "--keep", tmp_path / "kept")
    out = export_chakra(tmp_path / "kept", tmp_path / "again")
    again = read_et(tmp_path / "again.0.et")[1]
    assert len(again) == len(first), out
    assert canonical(again) == canonical(first)


COPIES_AND_A_GRAPH = r'''
import torch, torch_mlu
h = torch.randn(1 << 20).pin_memory()              # 4 MiB: copies larger than 1 MiB
d = torch.empty(1 << 20, device="mlu")
for _ in range(3):
    d.copy_(h, non_blocking=True)
x = torch.randn(512, 512, device="mlu")
out = torch.empty(512, 512).pin_memory()
g = torch.mlu.MLUGraph()
with torch.mlu.graph(g):
    y = (x @ x).sin()
    out.copy_(y, non_blocking=True)                # a pinned copy inside the graph
for _ in range(3):
    g.replay()
torch.mlu.synchronize()
'''


def test_copies_and_graph_launches_replay_from_chakra_as_recorded(tmp_path):
    """Several host-to-device copies of more than 1 MiB (one stand-in buffer per device and
    side, grown to the largest copy) stay pinned and asynchronous, and a graph's kernels
    carry what their captured launches said (class, dtype, bytes, tiles): the Chakra
    replay's kernels and copies take the times of the trace's own replay."""
    trace = record(tmp_path, "cg", COPIES_AND_A_GRAPH)
    export_chakra(trace, tmp_path / "cg")
    nodes = read_et(tmp_path / "cg.0.et")[1]
    graph_kernels = [n for n in nodes if n["name"] in ("aten::mm", "aten::sin")]
    assert len(graph_kernels) >= 6
    for n in graph_kernels:
        assert "cardsim_kernel_class" in n["attr"] and "cardsim_bytes_read" in n["attr"], n
        assert n["attr"]["cardsim_graph_node"] == ("bool", True), n   # dispatched as a graph's node
    assert not any("cardsim_graph_node" in n["attr"] for n in nodes if n not in graph_kernels)
    copies = [n for n in nodes if n["attr"]["cardsim_kind"][1] == "MEMCPY_HTOD"]
    assert len(copies) == 3 and all(n["attr"]["cardsim_host_pinned"][1] == 1 for n in copies), copies
    graph_copies = [n for n in nodes if n["attr"]["cardsim_kind"][1] == "MEMCPY_DTOH"]   # what the graph's replays ran
    assert len(graph_copies) == 3 and all(n["attr"]["cardsim_host_pinned"][1] == 1 for n in graph_copies), graph_copies
    direct = replay_json(trace, tmp=tmp_path)
    (tmp_path / "report.json").unlink()
    chakra = replay_json(tmp_path / "cg", tmp=tmp_path)
    by_name = lambda rep: {k["name"]: k for k in rep["top_kernels"]}
    for name in ("aten::mm", "aten::sin"):
        assert by_name(chakra)[name]["time_us"] == pytest.approx(by_name(direct)[name]["time_us"], rel=1e-9), name
    # and through a second round (the Chakra replay's own trace, exported again): the same
    replay(tmp_path / "cg", "--keep", tmp_path / "cg-kept")
    export_chakra(tmp_path / "cg-kept", tmp_path / "cg-again")
    again = read_et(tmp_path / "cg-again.0.et")[1]
    dur = lambda ns: sorted((n["name"], n["attr"]["cardsim_duration_ps"][1]) for n in ns
                            if n["name"] in ("aten::mm", "aten::sin"))
    assert dur(again) == dur(graph_kernels)
    assert direct["breakdown"]["copies_us"] > 0
    assert chakra["breakdown"]["copies_us"] == pytest.approx(direct["breakdown"]["copies_us"], rel=1e-9)


GRAPH_FORK = r'''
import torch, torch_mlu
x = torch.randn(256, 256, device="mlu")
w = torch.randn(256, 256, device="mlu")
g = torch.mlu.MLUGraph()
side = torch.mlu.Stream()
with torch.mlu.graph(g):
    a = x @ w
    side.wait_stream(torch.mlu.current_stream())       # the capture forks to a side stream
    with torch.mlu.stream(side):
        b = a.relu() * 3
    c = a + 1
    torch.mlu.current_stream().wait_stream(side)       # and joins back
    o = b + c
g.replay()
g.replay()
torch.mlu.synchronize()
'''


def test_a_graph_that_forks_to_a_side_stream_keeps_its_event_dependencies(tmp_path):
    """A graph's commands on the stream it forked to belong to its launch (as its kernels'
    attributes say), and its waits depend on their records: the Chakra replay runs the side
    stream's work after what it reads, the join after the side stream, as recorded."""
    trace = record(tmp_path, "fork", GRAPH_FORK)
    export_chakra(trace, tmp_path / "fork")
    nodes = read_et(tmp_path / "fork.0.et")[1]
    byid = {n["id"]: n for n in nodes}
    where = lambda n: (n["attr"]["cardsim_device"][1], n["attr"]["cardsim_stream"][1])
    waits = [n for n in nodes if n["name"] == "event wait"]
    assert len(waits) == 4
    for n in waits:   # each on its record, on the other stream
        recs = [byid[d] for d in n["data_deps"] if byid[d]["name"] == "event record" and where(byid[d]) != where(n)]
        assert len(recs) == 1 and recs[0]["attr"]["cardsim_event"] == n["attr"]["cardsim_event"], n
    graph_kernels = [n for n in nodes if n["name"] in ("aten::mm", "aten::relu", "aten::mul.Tensor", "aten::add.Tensor")]
    assert len(graph_kernels) == 10
    for n in graph_kernels:
        assert "cardsim_kernel_class" in n["attr"] and n["attr"]["cardsim_graph_node"] == ("bool", True), n
    replay(tmp_path / "fork", "--keep", tmp_path / "kept")
    export_chakra(tmp_path / "kept", tmp_path / "again")
    assert canonical(read_et(tmp_path / "again.0.et")[1]) == canonical(nodes)
    # the Chakra replay's kernels take their recorded times, each after what it depends on
    kept = {}
    for n in read_et(tmp_path / "again.0.et")[1]:
        kept.setdefault(n["name"], []).append(n["attr"]["cardsim_duration_ps"][1])
    for n in nodes:
        if n["name"].startswith("aten::"):
            assert n["attr"]["cardsim_duration_ps"][1] in kept[n["name"]], n


CAPTURED_BEFORE = r'''
import os, torch, torch_mlu
x = torch.randn(512, 512, device="mlu")
g = torch.mlu.MLUGraph()
with torch.mlu.graph(g):
    y = (x @ x).relu()
with torch.mlu.record_trace(os.environ["TRACE_DIR"]):
    g.replay()
    g.replay()
    torch.mlu.synchronize()
'''


def test_kernels_of_a_graph_captured_before_the_recording_export_with_their_durations(tmp_path):
    """The trace holds no launch of them: their recorded durations are what the export has
    (nodes of a duration, no work), and the Chakra replay keeps them."""
    trace = record(tmp_path, "before", CAPTURED_BEFORE, in_code=True)
    export_chakra(trace, tmp_path / "before")
    nodes = read_et(tmp_path / "before.0.et")[1]
    kernels = [n for n in nodes if n["name"] in ("aten::mm", "aten::relu")]
    assert len(kernels) == 4
    for n in kernels:
        assert "num_ops" not in n["attr"] and "cardsim_kernel_class" not in n["attr"], n
    recorded = json.loads(cardsim("info", trace, "--json").stdout)["recorded_total_us"]
    chakra = replay_json(tmp_path / "before", tmp=tmp_path)
    assert chakra["total_us"] == pytest.approx(recorded, rel=1e-9)


# A Chakra writer of our own, for graphs no cardsim run made (ASTRA-sim's style: no cardsim
# attributes, no preset in the metadata).

def _key(num, wt):
    return _enc_varint(num << 3 | wt)


def _enc_varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _len_field(num, payload):
    return _key(num, 2) + _enc_varint(len(payload)) + payload


def _enc_attr(name, kind, value):
    body = _len_field(1, name.encode())
    if kind == "int64":
        body += _key(9, 0) + _enc_varint(value)
    elif kind == "uint64":
        body += _key(13, 0) + _enc_varint(value)
    elif kind == "int32":
        body += _key(7, 0) + _enc_varint(value)
    elif kind == "bool":
        body += _key(27, 0) + _enc_varint(int(value))
    elif kind == "double":
        body += _key(3, 1) + struct.pack("<d", value)
    else:
        body += _len_field(29, value.encode())
    return _len_field(10, body)


def _enc_node(id, name, type, deps=(), duration=0, attrs=(), cpu=False):
    body = _key(1, 0) + _enc_varint(id) + _len_field(2, name.encode()) + _key(3, 0) + _enc_varint(type)
    if deps:
        body += _len_field(5, b"".join(_enc_varint(d) for d in deps))
    if duration:
        body += _key(7, 0) + _enc_varint(duration)
    body += _enc_attr("is_cpu_op", "bool", cpu)
    for a in attrs:
        body += _enc_attr(*a)
    return body


def write_et(path, nodes):
    meta = _len_field(1, b"0.0.4")
    with open(path, "wb") as f:
        for m in [meta] + nodes:
            f.write(_enc_varint(len(m)) + m)


def foreign_job(prefix, step_us, world=2, size=64 << 20):
    """Each rank: a GEMM-sized compute node, then an all-reduce of its gradient over group
    "1" that waits for it, then a step of step_us that waits for the all-reduce."""
    for r in range(world):
        write_et(f"{prefix}.{r}.et", [
            _enc_node(0, "gemm", COMP, attrs=[("num_ops", "int64", 10 ** 11), ("tensor_size", "uint64", 1 << 26)]),
            _enc_node(1, "grad_allreduce", COLL, deps=[0],
                      attrs=[("comm_type", "int64", ALL_REDUCE), ("comm_size", "int64", size), ("pg_name", "string", "1")]),
            _enc_node(2, "optimizer", COMP, deps=[1], duration=step_us),
        ])
    with open(f"{prefix}.comm_groups.json", "w") as f:
        json.dump({"1": list(range(world))}, f)


def replay_json(path, *extra, tmp):
    out = tmp / "report.json"
    replay(path, "--json", out, *extra)
    return json.loads(out.read_text())


def test_a_foreign_chakra_job_replays_on_a_preset(tmp_path):
    foreign_job(tmp_path / "a", 100)
    foreign_job(tmp_path / "b", 300)
    res = cardsim("replay", tmp_path / "a")
    assert res.returncode == 2 and "names no preset: give --preset P" in res.stderr, res.stderr
    a = replay_json(tmp_path / "a", "--preset", "h100-sxm", tmp=tmp_path)
    b = replay_json(tmp_path / "b", "--preset", "h100-sxm", tmp=tmp_path)
    # the step waits for the all-reduce, which waits for the compute: 200 us more, exactly
    assert abs((b["total_us"] - a["total_us"]) - 200.0) < 1e-3, (a["total_us"], b["total_us"])
    # the all-reduce takes the fabric model's time for 2 ranks and 64 MiB on each preset: the
    # what-if of another machine
    totals = {}
    for preset in ("h100-sxm", "a100-sxm"):
        rep = a if preset == "h100-sxm" else replay_json(tmp_path / "a", "--preset", preset, tmp=tmp_path)
        cb = subprocess.run([str(CARDSIM_BIN), "collbench", "--model-only", "--preset", preset, "--ranks", "2",
                             "--min-bytes", "64M", "--max-bytes", "64M", "--csv"], capture_output=True, text=True)
        assert cb.returncode == 0, cb.stderr
        model_us = float(cb.stdout.splitlines()[1].split(",")[4])
        comm = [r["breakdown"]["communication_us"] for r in rep["ranks"]]
        assert all(abs(c - model_us) <= 1e-3 * model_us + 1e-3 for c in comm), (preset, comm, model_us)
        # the optimizer step counts as compute, not communication
        assert all(r["breakdown"]["compute_us"] >= 100 for r in rep["ranks"]), rep["ranks"]
        totals[preset] = rep["total_us"]
    assert totals["a100-sxm"] > totals["h100-sxm"], totals


def test_cpu_nodes_are_host_time_and_wait_for_the_device_work_they_depend_on(tmp_path):
    """A CPU node (is_cpu_op, as ASTRA-sim runs them on the host) is host time: what depends
    on it is issued that much later; one depending on device work waits for it first."""
    def total(name, nodes):
        write_et(tmp_path / f"{name}.0.et", nodes)
        return replay_json(tmp_path / name, "--preset", "h100-sxm", tmp=tmp_path)["total_us"]

    def host_first(host_us):   # the host works, then issues a 10 us step
        return total(f"first{host_us}", [_enc_node(0, "host", COMP, duration=host_us, cpu=True),
                                           _enc_node(1, "step", COMP, deps=[0], duration=10)])
    assert host_first(100) - host_first(0) == pytest.approx(100, abs=1e-6)

    def after_device(host_us, wait):   # a 50 us step; the host works (after it, or not); a 10 us step
        return total(f"after{host_us}{wait}", [
            _enc_node(0, "long", COMP, duration=50),
            _enc_node(1, "host", COMP, deps=[0] if wait else [], duration=host_us, cpu=True),
            _enc_node(2, "short", COMP, deps=[1], duration=10)])
    waited, overlapped = after_device(5, True), after_device(5, False)
    assert waited >= 50 + 5 + 10 and overlapped < 50 + 5 + 10, (waited, overlapped)
    assert after_device(25, True) - waited == pytest.approx(20, abs=1e-6)
    # a CPU node's time is a host time: a negative one is refused, naming the node
    write_et(tmp_path / "bad.0.et", [_enc_node(0, "host", COMP, cpu=True,
                                               attrs=[("cardsim_duration_ps", "double", -5.0)])])
    res = cardsim("replay", tmp_path / "bad", "--preset", "h100-sxm")
    assert res.returncode == 2 and "node 0 ('host')" in res.stderr and "not a host time" in res.stderr, res.stderr


def test_a_rank_given_no_work_runs_nothing(tmp_path):
    # ASTRA-sim reports 0 cycles for an empty workload; the replay's own closing synchronize
    # must not make one up (it made 2 us of idle, the preset's synchronize overhead)
    write_et(tmp_path / "e.0.et", [])
    rep = replay_json(tmp_path / "e", "--preset", "h100-sxm", tmp=tmp_path)
    assert rep["total_us"] == 0 and all(v == 0 for v in rep["breakdown"].values()), rep
    # beside a rank that works, the idle rank spans nothing and the job is the busy rank's
    write_et(tmp_path / "m.0.et", [_enc_node(0, "step", COMP, duration=5)])
    write_et(tmp_path / "m.1.et", [])
    rep = replay_json(tmp_path / "m", "--preset", "h100-sxm", tmp=tmp_path)
    busy, idle = (r["breakdown"] for r in rep["ranks"])
    assert idle["total_us"] == 0 and busy["total_us"] >= 5 and busy["compute_us"] == 5, rep["ranks"]
    assert rep["total_us"] == busy["total_us"], rep


def test_bad_chakra_files_are_named(tmp_path):
    write_et(tmp_path / "x.0.et", [_enc_node(0, "a", COMP, deps=[7], duration=5)])
    res = cardsim("replay", tmp_path / "x", "--preset", "h100-sxm")
    assert res.returncode == 2 and "x.0.et: node 0 ('a'): depends on node 7, which is not in the file" in res.stderr, \
        res.stderr
    write_et(tmp_path / "c.0.et", [_enc_node(0, "a", COMP, deps=[1], duration=5),
                                   _enc_node(1, "b", COMP, deps=[0], duration=5)])
    res = cardsim("replay", tmp_path / "c", "--preset", "h100-sxm")
    assert res.returncode == 2 and "dependencies form a cycle" in res.stderr, res.stderr
    (tmp_path / "g.0.et").write_bytes(b"\x05abc")
    res = cardsim("replay", tmp_path / "g", "--preset", "h100-sxm")
    assert res.returncode == 2 and "g.0.et: message #0 at offset 0: truncated" in res.stderr, res.stderr
    write_et(tmp_path / "p.0.et", [_enc_node(0, "ar", COLL, attrs=[("comm_type", "int64", ALL_REDUCE),
                                                                   ("comm_size", "int64", 1024),
                                                                   ("pg_name", "string", "9")])])
    res = cardsim("replay", tmp_path / "p", "--preset", "h100-sxm")
    assert res.returncode == 2 and "process group '9' is not in the groups file" in res.stderr, res.stderr
    for pg, members, needle in (("5", [0, 7], "process group '5' of the groups file names rank 7, outside the job's 1 ranks"),
                                ("6", [], "rank 0 runs a collective of process group '6', which the groups file does not")):
        write_et(tmp_path / f"g{pg}.0.et", [_enc_node(0, "ar", COLL, attrs=[("comm_type", "int64", ALL_REDUCE),
                                                                           ("comm_size", "int64", 1024),
                                                                           ("pg_name", "string", pg)])])
        (tmp_path / f"g{pg}.comm_groups.json").write_text(json.dumps({pg: members}))
        res = cardsim("replay", tmp_path / f"g{pg}", "--preset", "h100-sxm")
        assert res.returncode == 2 and needle in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and "terminate" not in res.stderr
    write_et(tmp_path / "t.0.et", [_enc_node(0, "odd", 99, duration=5)])
    res = cardsim("replay", tmp_path / "t", "--preset", "h100-sxm")
    assert res.returncode == 2 and "t.0.et: node 0 ('odd'): node type 99 is not one of Chakra's" in res.stderr, res.stderr
    # values that would break the model are refused by name
    for i, (attrs, needle) in enumerate([
            ([("num_ops", "int64", (1 << 64) - 5)], "num_ops -5"),
            ([("num_ops", "int64", 5), ("cardsim_kernel_class", "int64", 99)], "cardsim_kernel_class 99"),
            ([("num_ops", "int64", 5), ("cardsim_device", "int64", 10 ** 9), ("cardsim_stream", "int64", 0)],
             "name no device and stream")]):
        write_et(tmp_path / f"v{i}.0.et", [_enc_node(0, "k", COMP, attrs=attrs)])
        res = cardsim("replay", tmp_path / f"v{i}", "--preset", "h100-sxm")
        assert res.returncode == 2 and f"v{i}.0.et: node 0 ('k'): " in res.stderr and needle in res.stderr, res.stderr
    # a host node's attributes of cardsim's own export that do not parse: its synchronizing
    # calls (or waiting for a node it does not depend on), the runtime's own waits in its
    # time (or waiting for no node of the file, or taking more than its 1 us)
    for i, (name, value, needle) in enumerate([
            ("cardsim_sync_calls", "2000000@d", "names no device"),
            ("cardsim_sync_calls", "x@d0", "does not start with a host time"),
            ("cardsim_sync_calls", "5@7", "waits for '7', not a node this one depends on"),
            ("cardsim_sync_calls", "-3@d0", "does not start with a host time"),
            ("cardsim_marker_waits", "1000@0", "is not TIME@DEVICE:STREAM"),
            ("cardsim_marker_waits", "x@0:1", "does not start with a host time"),
            ("cardsim_marker_waits", "1000@-1:1", "names no device"),
            ("cardsim_marker_waits", "1000@0:1.5", "names no stream"),
            ("cardsim_marker_waits", "1000@0:1>9", "waits for '9', not a node of this file"),
            ("cardsim_marker_waits", "2000000@0:1>0", "more than the node's")]):
        write_et(tmp_path / f"s{i}.0.et", [_enc_node(0, "k", COMP, duration=5),
                                           _enc_node(1, "host", COMP, deps=[0], duration=1, cpu=True,
                                                     attrs=[(name, "string", value)])])
        res = cardsim("replay", tmp_path / f"s{i}", "--preset", "h100-sxm")
        assert res.returncode == 2 and f"s{i}.0.et: node 1 ('host'): {name} '{value}'" in res.stderr \
            and needle in res.stderr, res.stderr
    # a receive posted before a node that is not there, or not before it on its stream
    for i, (before, stream) in enumerate([(9, 1), (0, 2), ((1 << 64) - 1, 1)]):
        write_et(tmp_path / f"r{i}.0.et", [
            _enc_node(0, "k", COMP, duration=5, attrs=[("cardsim_device", "int64", 0), ("cardsim_stream", "int64", 1)]),
            _enc_node(1, "recv", RECV, deps=[0], attrs=[("comm_src", "int64", 1), ("comm_dst", "int64", 0),
                                                        ("comm_size", "int64", 1024), ("cardsim_device", "int64", 0),
                                                        ("cardsim_stream", "int64", stream),
                                                        ("cardsim_posted_before", "int64", before)])])
        write_et(tmp_path / f"r{i}.1.et", [_enc_node(0, "send", SEND, attrs=[("comm_src", "int64", 1), ("comm_dst", "int64", 0),
                                                                            ("comm_size", "int64", 1024)])])
        res = cardsim("replay", tmp_path / f"r{i}", "--preset", "h100-sxm")
        said = before if before < 1 << 63 else before - (1 << 64)
        assert res.returncode == 2 and f"r{i}.0.et: node 1 ('recv'): cardsim_posted_before {said} names no node " \
            "before the receive on its stream" in res.stderr, res.stderr
    # one rank file of a job is one rank of it: alone it stands for the job's ranks, as a
    # .cstrace does
    foreign_job(tmp_path / "j", 10)
    res = cardsim("replay", tmp_path / "j.0.et", "--preset", "h100-sxm")
    assert res.returncode == 0 and "(rank 0 replicated to 2 ranks)" in res.stdout, (res.stdout, res.stderr)
    res = cardsim("replay", tmp_path / "j.0.et", "--preset", "h100-sxm", "--ranks", "16")
    assert res.returncode == 0 and "16 rank(s)" in res.stdout, res.stderr


def test_chakra_files_of_the_layout_before_0_0_4_start_with_their_first_node(tmp_path):
    # ASTRA-sim's data-parallel examples of 2023 have no GlobalMetadata: the same job written
    # that way replays as with it.
    foreign_job(tmp_path / "new", 100)
    for r in range(2):
        raw = (tmp_path / f"new.{r}.et").read_bytes()
        meta_len = raw[0]   # the metadata message is short: a one-byte length prefix
        (tmp_path / f"old.{r}.et").write_bytes(raw[1 + meta_len:])
    (tmp_path / "old.comm_groups.json").write_text((tmp_path / "new.comm_groups.json").read_text())
    new = replay_json(tmp_path / "new", "--preset", "h100-sxm", tmp=tmp_path)
    old = replay_json(tmp_path / "old", "--preset", "h100-sxm", tmp=tmp_path)
    assert old["total_us"] == new["total_us"] and old["world_size"] == 2, (old["total_us"], new["total_us"])



def test_a_send_or_receive_may_leave_out_its_own_rank(tmp_path):
    # ASTRA-sim's custom collectives name only the other end (a send its comm_dst, a receive
    # its comm_src): the file's own rank is the one left out. Timed as the same transfer
    # with both ends named.
    size = 8 << 20
    for prefix, full in (("short", False), ("full", True)):
        send = [("comm_dst", "int64", 1), ("comm_size", "int64", size)]
        recv = [("comm_src", "int64", 0), ("comm_size", "int64", size)]
        if full:
            send.append(("comm_src", "int64", 0))
            recv.append(("comm_dst", "int64", 1))
        write_et(tmp_path / f"{prefix}.0.et", [_enc_node(0, "send", SEND, attrs=send)])
        write_et(tmp_path / f"{prefix}.1.et", [_enc_node(0, "recv", RECV, attrs=recv)])
    short = replay_json(tmp_path / "short", "--preset", "h100-sxm", tmp=tmp_path)
    full = replay_json(tmp_path / "full", "--preset", "h100-sxm", tmp=tmp_path)
    assert short["total_us"] == full["total_us"] > 0, (short["total_us"], full["total_us"])
    assert all(r["breakdown"]["communication_us"] > 0 for r in short["ranks"]), short["ranks"]


def test_a_receive_waits_for_its_send_and_an_unmatched_one_is_refused(tmp_path):
    # Rank 0 computes 5 ms, then sends 64 MiB (tag 7) to rank 1, whose receive is posted at
    # once: it ends when the send has begun and the bytes have crossed, as on the fabric.
    size = 64 << 20
    p2p = [("comm_src", "int64", 0), ("comm_dst", "int64", 1), ("comm_size", "int64", size), ("comm_tag", "int64", 7)]
    write_et(tmp_path / "j.0.et", [_enc_node(0, "c", COMP, duration=5000), _enc_node(1, "send", SEND, deps=[0], attrs=p2p)])
    write_et(tmp_path / "j.1.et", [_enc_node(0, "recv", RECV, attrs=p2p), _enc_node(1, "c", COMP, deps=[0], duration=20)])
    rep = replay_json(tmp_path / "j", "--preset", "h100-sxm", tmp=tmp_path)
    r0, r1 = sorted(rep["ranks"], key=lambda r: r["rank"])
    t0, t1 = (r["breakdown"]["total_us"] for r in (r0, r1))
    assert t1 == pytest.approx(t0 + 20, abs=1e-3), (r0, r1)   # after the send, then 20 us
    # a receive whose send is in no file is refused by name, not waited for
    write_et(tmp_path / "u.0.et", [_enc_node(0, "c", COMP, duration=5)])
    write_et(tmp_path / "u.1.et", [_enc_node(0, "recv", RECV, attrs=p2p)])
    res = cardsim("replay", tmp_path / "u", "--preset", "h100-sxm")
    assert res.returncode == 2, res.stderr
    assert "u.1.et: node 0 ('recv'): a receive from rank 0 to rank 1 (tag 7, 67108864 bytes) has no matching send" \
        in res.stderr, res.stderr


def test_a_sweep_replays_chakra_files_as_replay_does(tmp_path):
    foreign_job(tmp_path / "a", 100)
    res = cardsim("sweep", tmp_path / "a", "--preset", "br100", "--set", "fabric.link.bandwidth=16GB/s,64GB/s",
                  "--out", tmp_path / "sw")
    assert res.returncode == 0, res.stderr
    rows = (tmp_path / "sw.csv").read_text().splitlines()
    assert len(rows) == 3, rows
    slow, fast = (float(r.split(",")[1]) for r in rows[1:])
    assert fast < slow   # the all-reduce over the faster links
    single = replay_json(tmp_path / "a", "--preset", "br100", "--set", "fabric.link.bandwidth=64GB/s", tmp=tmp_path)
    assert fast == pytest.approx(single["total_us"], abs=1e-6)
    bad = cardsim("sweep", tmp_path / "nothing", "--set", "memory.bandwidth=1TB/s,2TB/s", "--out", tmp_path / "x")
    assert bad.returncode == 2 and "nothing" in bad.stderr, bad.stderr


def test_the_export_of_a_replicated_replay_replays_by_its_prefix(tmp_path):
    """`replay --ranks N --keep` keeps rank 0's trace standing for all N; its Chakra export
    (one .et file, marked so) replays by its prefix as the one file does: the same run."""
    golden = CARDSIM_BIN.parents[2] / "tests" / "data" / "golden" / "traces" / "dp_step"
    kept = tmp_path / "k4"
    replay(golden, "--ranks", "4", "--keep", kept)
    export_chakra(kept, tmp_path / "k4et")
    assert not (tmp_path / "k4et.1.et").exists()
    by_prefix = replay_json(tmp_path / "k4et", tmp=tmp_path)
    by_file = replay_json(tmp_path / "k4et.0.et", tmp=tmp_path)
    assert by_prefix["total_us"] == by_file["total_us"] > 0, (by_prefix["total_us"], by_file["total_us"])
    assert by_prefix["world_size"] == 4, by_prefix["world_size"]
