"""Edges of the trace tools: one rank's Chakra export stands for its job as that rank's
.cstrace does (the recorded wait for slower ranks travels with it); nonsensical Chakra
durations and sizes are refused by node with exit status 2; an export or a replay that
fails leaves no partial output behind."""
import json

from test_export_chakra import (ALL_REDUCE, COLL, COMP, _enc_node, cardsim, export_chakra, read_et, replay,
                                write_et)
from test_export_perfetto import CARDSIM as CARDSIM_BIN

GOLDEN = CARDSIM_BIN.parents[2] / "tests" / "data" / "golden" / "traces"


def total_us(path, *extra):
    res = cardsim("replay", path, "--json", "-", *extra)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)["total_us"]


def test_one_ranks_chakra_export_replays_as_its_cstrace(tmp_path):
    """Rank 0 of the 2-rank golden waited for the slower rank 1 at its all-reduces; replayed
    alone (standing for the job) the .cstrace starts its replicas that much later, and so
    does its Chakra export, which carries that wait (cardsim_peers_late_ps)."""
    rank0 = GOLDEN / "dp_step" / "rank0.cstrace"
    export_chakra(rank0, tmp_path / "r0")
    want = total_us(rank0)
    assert total_us(tmp_path / "r0.0.et") == want
    # ... and a replicated replay's kept trace, and its export, at the same scale
    replay(GOLDEN / "dp_step", "--ranks", "8", "--keep", tmp_path / "k8")
    export_chakra(tmp_path / "k8", tmp_path / "k8et")
    assert total_us(tmp_path / "k8et") == total_us(tmp_path / "k8") == total_us(GOLDEN / "dp_step", "--ranks", "8")
    # the wait rides on the collective nodes (rank 0 was the faster rank: it waited)
    _, nodes = read_et(tmp_path / "r0.0.et")
    waits = [n["attr"]["cardsim_peers_late_ps"][1] for n in nodes if "cardsim_peers_late_ps" in n["attr"]]
    assert waits and all(n["type"] == COLL for n in nodes if "cardsim_peers_late_ps" in n["attr"])
    assert sum(waits) > 10 ** 6, waits   # over a microsecond in all


def test_nonsensical_chakra_durations_and_sizes_are_refused_by_node(tmp_path):
    for i, (node, needle) in enumerate([
            (_enc_node(0, "k0", COMP, duration=2 * 10 ** 13), "a node of 20000000000000.000000 us is not a duration"),
            (_enc_node(0, "k0", COMP, duration=(1 << 64) - 1), "is not a duration"),
            (_enc_node(0, "c0", COLL, attrs=[("comm_type", "int64", ALL_REDUCE), ("comm_size", "int64", 10 ** 15)]),
             "comm_size 1000000000000000 bytes is over the fabric model's limit of 2^48 bytes")]):
        write_et(tmp_path / f"n{i}.0.et", [node])
        res = cardsim("replay", tmp_path / f"n{i}.0.et", "--preset", "h100-sxm")
        assert res.returncode == 2, (res.returncode, res.stderr)
        assert f"n{i}.0.et: node 0 (" in res.stderr and needle in res.stderr, res.stderr
    write_et(tmp_path / "ok.0.et", [_enc_node(0, "k0", COMP, duration=100)])
    assert total_us(tmp_path / "ok.0.et", "--preset", "h100-sxm") >= 100


def test_a_chakra_export_that_cannot_write_every_file_writes_none(tmp_path):
    (tmp_path / "a.comm_groups.json").mkdir()
    res = cardsim("export", GOLDEN / "dp_step", "--chakra", tmp_path / "a", "--perfetto", tmp_path / "a.json")
    assert res.returncode == 2 and "cannot write" in res.stderr and "a.comm_groups.json" in res.stderr, res.stderr
    (tmp_path / "b.1.et").mkdir()
    res = cardsim("export", GOLDEN / "dp_step", "--chakra", tmp_path / "b")
    assert res.returncode == 2 and "b.1.et" in res.stderr, res.stderr
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == ["a.comm_groups.json", "b.1.et"], left
    res = cardsim("export", GOLDEN / "dp_step", "--chakra", "-")
    assert res.returncode == 2 and "standard output cannot hold" in res.stderr, res.stderr


def test_a_failed_replay_keeps_no_replayed_trace(tmp_path):
    kept = tmp_path / "kept"
    res = cardsim("replay", GOLDEN / "memory_bound", "--set", "memory.bandwidth=10 B/s", "--keep", kept)
    assert res.returncode == 2 and "cannot replay" in res.stderr, res.stderr
    assert not kept.exists()
    given = tmp_path / "given"
    given.mkdir()
    res = cardsim("replay", GOLDEN / "memory_bound", "--set", "memory.bandwidth=10 B/s", "--keep", given)
    assert res.returncode == 2 and given.is_dir() and list(given.iterdir()) == []
    # the same directory then takes a replay that succeeds
    replay(GOLDEN / "memory_bound", "--keep", given)
    assert [p.name for p in given.iterdir()] == ["rank0.cstrace"]


def test_sweep_out_may_name_the_csv(tmp_path):
    res = cardsim("sweep", GOLDEN / "memory_bound", "--set", "memory.bandwidth=300 GB/s,600 GB/s",
                  "--out", tmp_path / "res.csv", "--no-plot", "--jobs", "1")
    assert res.returncode == 0, res.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res.csv"]
    rows = (tmp_path / "res.csv").read_text().splitlines()
    assert len(rows) == 3 and rows[0].startswith("memory.bandwidth,total_us")
