"""Golden traces: small recordings committed in tests/data/golden/traces/ (regenerated from
tests/data/golden/programs/ by scripts/make_golden_traces.sh). Replayed as they are, with
no program run: the reader still reads them, a replay on the recorded configuration
reproduces the recorded times exactly, the what-ifs move the way the hardware says, and
the Chakra export of each re-imports to the same dependency graph."""
import json
import os
import pathlib
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
CARDSIM = str(ROOT / ".venv" / "bin" / "cardsim")
GOLDEN = ROOT / "tests" / "data" / "golden" / "traces"
NAMES = ["two_streams", "memory_bound", "compute_bound", "dp_step"]
REGENERATE = ("if the model's timing or the trace format changed on purpose, regenerate the golden traces "
              "with scripts/make_golden_traces.sh and commit them")


def cardsim(*args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_")}
    return subprocess.run([CARDSIM, *map(str, args)], capture_output=True, text=True, env=env, timeout=600)


def info(path):
    res = cardsim("info", path, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def replay(tmp_path, path, *args):
    out = tmp_path / f"replay-{len(list(tmp_path.iterdir()))}.json"
    res = cardsim("replay", path, "--json", out, *args)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(out.read_text())


def preset_memory_bandwidth_gbps(preset):
    text = (ROOT / "simulator" / "presets" / f"{preset}.textproto").read_text()
    memory = text[text.index("\n  memory {"):]
    return float(re.search(r'bandwidth \{\s*value: "([0-9.]+) GB/s"', memory).group(1))


def test_every_golden_trace_is_there_and_whole():
    for name in NAMES:
        i = info(GOLDEN / name)
        assert i["files"] and all(f["ended"] == "exit" for f in i["files"]), (name, i["files"])
        assert i["device_commands"] > 0 and i["uncorrelated_commands"] == 0, (name, i)
    assert info(GOLDEN / "dp_step")["world_size"] == 2


@pytest.mark.parametrize("name", NAMES)
def test_replay_on_the_recorded_configuration_reproduces_the_golden_times(tmp_path, name):
    recorded = info(GOLDEN / name)["recorded_total_us"]
    got = replay(tmp_path, GOLDEN / name)
    assert got["total_us"] == pytest.approx(recorded, abs=1e-6), REGENERATE


def test_a_recording_of_an_older_format_replays_to_its_own_times(tmp_path):
    # Recorded with trace format 1.1 (before fabric protocol 5's moved ends and before a
    # collective started at its call): the replay follows the rules it was recorded under.
    legacy = ROOT / "tests" / "data" / "golden" / "legacy" / "dp_step_format_1_1"
    i = info(legacy)
    assert i["format"] == "1.1", i["format"]
    got = replay(tmp_path, legacy)
    assert got["total_us"] == pytest.approx(i["recorded_total_us"], abs=1e-6)


def test_golden_what_if_memory_bandwidth(tmp_path):
    preset = info(GOLDEN / "memory_bound")["preset"]
    doubled = f"memory.bandwidth={2 * preset_memory_bandwidth_gbps(preset):.3f} GB/s"
    base, fast = replay(tmp_path, GOLDEN / "memory_bound"), replay(tmp_path, GOLDEN / "memory_bound", "--set", doubled)
    assert 1.6 < base["total_us"] / fast["total_us"] <= 2.0 + 1e-6
    base, fast = replay(tmp_path, GOLDEN / "compute_bound"), replay(tmp_path, GOLDEN / "compute_bound", "--set", doubled)
    assert base["breakdown"]["compute_us"] > 0.8 * base["total_us"], base["breakdown"]
    assert base["total_us"] / fast["total_us"] < 1.15


def test_golden_data_parallel_step_scaled_out_is_never_faster_than_its_compute(tmp_path):
    def kernels_us(report):
        return report["breakdown"]["compute_us"] + report["breakdown"]["memory_bound_us"]

    # (Not monotonic in time: 4 ranks are 2 cards of 2 chips sharing one card-to-card link
    # pair, 8 ranks 4 cards with 3 links each; the bytes on the links do only grow.)
    previous_link_bytes = 0.0
    for ranks in (4, 8, 64, 512):
        scaled = replay(tmp_path, GOLDEN / "dp_step", "--ranks", ranks)
        # the fabric's links, as in a joined replay: every all-reduce re-timed over the replicated group
        links = scaled["links"]
        assert links and all(0 < link["utilization"] <= 1 + 1e-9 for link in links), links[:3]
        link_bytes = sum(link["bytes"] for link in links)
        assert link_bytes > previous_link_bytes, (ranks, link_bytes, previous_link_bytes)
        previous_link_bytes = link_bytes
        assert scaled["replicated_to"] == ranks
        assert kernels_us(scaled) > 0 and scaled["total_us"] >= kernels_us(scaled), (ranks, scaled["breakdown"])
        assert scaled["breakdown"]["communication_us"] > 0


def work_graph(nodes):
    """The graph of the nodes that do work (kernels, copies, collectives), independent of node
    numbering: each by its card, its stream's sequence of work and its place in it, with the
    nearest work nodes it depends on, through any chain of event markers (an importer turns a
    dependency across streams into an event record and wait, which a second export shows)."""
    by_id = {n["id"]: n for n in nodes}

    def is_marker(n):
        return n["name"] in ("event record", "event wait") and not n["attr"].get("num_ops")

    def is_host(n):   # the host's time between calls: CPU nodes, on a "device" -1 of their own
        return n["attr"]["cardsim_kind"][1] == "HOST"

    streams = {}
    for n in sorted(nodes, key=lambda n: n["attr"]["cardsim_start_ps"][1]):
        if not is_marker(n):
            where = (-1, -1) if is_host(n) else (n["attr"]["cardsim_device"][1], n["attr"]["cardsim_stream"][1])
            streams.setdefault(where, []).append(n)
    label = {}
    for (dev, _), seq in streams.items():
        sig = tuple(n["name"] for n in seq)
        for i, n in enumerate(seq):
            label[n["id"]] = (dev, sig, i)

    def work_deps(n, seen):
        out = set()
        for d in n["data_deps"]:
            if d in seen:
                continue
            seen.add(d)
            out |= work_deps(by_id[d], seen) if is_marker(by_id[d]) else {label[d]}
        return out

    return {label[n["id"]]: (n["name"], n["type"], n["attr"].get("num_ops"), n["attr"].get("tensor_size"),
                             n["attr"].get("comm_type"), n["attr"].get("comm_size"),
                             n["attr"]["cardsim_duration_ps"] if is_host(n) else None, sorted(work_deps(n, set())))
            for n in nodes if not is_marker(n)}


@pytest.mark.parametrize("name", ["two_streams", "dp_step"])
def test_golden_chakra_export_reimports_to_the_same_graph(tmp_path, name):
    from test_export_chakra import read_et
    res = cardsim("export", GOLDEN / name, "--chakra", tmp_path / "first")
    assert res.returncode == 0, res.stderr
    replayed = replay(tmp_path, str(tmp_path / "first"), "--keep", tmp_path / "kept")
    # With the host's time between calls (CPU nodes) and where each call began, the files
    # replay to the recording's time exactly (without them: 386 us of dp_step's 521.5).
    assert replayed["total_us"] == pytest.approx(info(GOLDEN / name)["recorded_total_us"], abs=1e-6)
    res = cardsim("export", tmp_path / "kept", "--chakra", tmp_path / "again")
    assert res.returncode == 0, res.stderr
    for r in range(info(GOLDEN / name)["world_size"]):
        first = work_graph(read_et(tmp_path / f"first.{r}.et")[1])
        again = work_graph(read_et(tmp_path / f"again.{r}.et")[1])
        assert len(first) > 10 and again == first
    assert (tmp_path / "again.comm_groups.json").read_text() == (tmp_path / "first.comm_groups.json").read_text()
