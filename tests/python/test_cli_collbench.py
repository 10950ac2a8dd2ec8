"""`cardsim collbench --model-only`: the nccl-tests-style sweep through the fabric model.

Link numbers are forced with --set so the closed forms below do not depend on the presets.
"""
import csv
import io
import math
import subprocess

import pytest

from conftest import ROOT

CARDSIM = ROOT / ".venv" / "bin" / "cardsim"
HEADER = "op,algo,ranks,bytes,time_us,algbw_GBps,busbw_GBps"


def run(*args, env=None, timeout=120):
    import os
    e = {k: v for k, v in os.environ.items() if not k.startswith("CARDSIM_")}
    e.update(env or {})
    return subprocess.run([str(CARDSIM), *args], capture_output=True, text=True, timeout=timeout, env=e)


def rows(out: str):
    lines = out.strip().splitlines()
    assert lines[0] == HEADER, lines[0]
    return list(csv.DictReader(io.StringIO(out)))


MESH = ["--preset", "br100", "--set", "fabric.link.bandwidth=100 GB/s", "--set", "fabric.link.latency=1 us"]
STAR = ["--preset", "h100-sxm", "--set", "fabric.link.bandwidth=400 GB/s", "--set", "fabric.link.latency=1 us",
        "--set", "fabric.switch_latency=0.5 us", "--set", "fabric.link.efficiency=1", "--set",
        "fabric.collective_latency=0 us", "--set", "fabric.reduction_efficiency=1"]


def test_direct_all_gather_on_a_full_mesh_matches_the_closed_form():
    res = run("collbench", "--model-only", *MESH, "--ranks", "8", "--op", "all_gather", "--algo", "direct",
              "--min-bytes", "1K", "--max-bytes", "1M", "--csv")
    assert res.returncode == 0, res.stderr
    got = rows(res.stdout)
    assert [int(r["bytes"]) for r in got] == [1024 * 2 ** i for i in range(11)]
    for r in got:
        s = int(r["bytes"])
        t_us = (1e-6 + s / 8 / 100e9) * 1e6
        assert r["op"] == "all_gather" and r["algo"] == "direct" and r["ranks"] == "8"
        assert float(r["time_us"]) == pytest.approx(t_us, abs=1e-3)
        algbw = s / (t_us * 1e-6) / 1e9
        assert float(r["algbw_GBps"]) == pytest.approx(algbw, abs=2e-3)
        assert float(r["busbw_GBps"]) == pytest.approx(algbw * 7 / 8, abs=2e-3)


def test_ring_all_reduce_on_a_switch_matches_the_closed_form_and_busbw():
    res = run("collbench", "--model-only", *STAR, "--ranks", "8", "--algo", "ring", "--min-bytes", "64M",
              "--max-bytes", "256M", "--factor", "4", "--csv")
    assert res.returncode == 0, res.stderr
    got = rows(res.stdout)
    assert [int(r["bytes"]) for r in got] == [64 << 20, 256 << 20]
    for r in got:
        s = int(r["bytes"])
        # 14 steps of S/8 in q chunks of the preset's 2 MiB through the ring's pipeline:
        # 14 q + 13 chunk phases, the first 14 paying the latency
        q = math.ceil(s / 8 / (2 << 20))
        t = 2 * 7 * (2e-6 + 0.5e-6) + (14 * q + 13) * (s / 8 / q / 400e9)
        assert float(r["time_us"]) == pytest.approx(t * 1e6, rel=1e-6)
        # large messages approach the link: busbw = 2(n-1)/n * algbw
        assert float(r["busbw_GBps"]) == pytest.approx(2 * 7 / 8 * s / t / 1e9, rel=1e-4)


@pytest.mark.parametrize("op,steps", [("all_reduce", 14), ("all_gather", 7), ("reduce_scatter", 7)])
def test_an_unpipelined_ring_is_the_textbook_alpha_beta_ring(op, steps):
    # fabric.chunk=0B: every rank sends its whole piece S/8 at each step, all at once
    res = run("collbench", "--model-only", *STAR, "--set", "fabric.chunk=0B", "--ranks", "8", "--op", op, "--algo",
              "ring", "--min-bytes", "1M", "--max-bytes", "1G", "--factor", "32", "--csv")
    assert res.returncode == 0, res.stderr
    got = rows(res.stdout)
    assert len(got) == 3
    for r in got:
        s = int(r["bytes"])
        t = steps * (2e-6 + 0.5e-6 + s / 8 / 400e9)
        assert float(r["time_us"]) == pytest.approx(t * 1e6, rel=1e-6, abs=1e-3), r


def test_the_rule_picks_algorithms_by_size_and_the_environment_forces_one():
    res = run("collbench", "--model-only", *STAR, "--ranks", "8", "--min-bytes", "1K", "--max-bytes", "64M",
              "--factor", "256", "--csv")
    assert res.returncode == 0, res.stderr
    algos = {int(r["bytes"]): r["algo"] for r in rows(res.stdout)}
    # the fastest alone: in-switch reduction moves S per rank and crosses the switch once
    assert set(algos.values()) == {"switch"}, algos
    plain = run("collbench", "--model-only", *STAR, "--set", "fabric.in_switch_reduction=false", "--ranks", "8",
                "--min-bytes", "1K", "--max-bytes", "64M", "--factor", "256", "--csv")
    assert plain.returncode == 0, plain.stderr
    # without it, NCCL's rings (the preset's library: its trees join nodes, and it has no
    # all-pairs all_reduce) ...
    assert {r["algo"] for r in rows(plain.stdout)} == {"ring"}, plain.stdout
    # ... where every algorithm is weighed, two all-to-all phases (2 latencies) beat 2(n-1)
    # ring steps at the same bytes
    every = run("collbench", "--model-only", *STAR, "--set", "fabric.in_switch_reduction=false", "--set",
                "fabric.library_algorithms=ring,tree,direct,hierarchical,switch", "--ranks", "8", "--min-bytes", "1K", "--max-bytes", "64M", "--factor",
                "256", "--csv")
    assert every.returncode == 0, every.stderr
    assert {r["algo"] for r in rows(every.stdout)} == {"direct"}, every.stdout
    forced = run("collbench", "--model-only", *STAR, "--ranks", "8", "--min-bytes", "1K", "--max-bytes", "1K",
                 "--csv", env={"CARDSIM_COLL_ALGO": "ring"})
    assert forced.returncode == 0, forced.stderr
    assert rows(forced.stdout)[0]["algo"] == "ring"


def test_a_thousand_ranks_over_nodes():
    res = run("collbench", "--model-only", "--preset", "h100-sxm", "--ranks", "1024", "--op", "all_reduce",
              "--min-bytes", "1G", "--max-bytes", "1G", "--csv")
    assert res.returncode == 0, res.stderr
    (r,) = rows(res.stdout)
    # NCCL's choices across nodes, ring or tree: the faster of the two, as each alone times it
    alone = {}
    for algo in ("ring", "tree"):
        forced = run("collbench", "--model-only", "--preset", "h100-sxm", "--ranks", "1024", "--op", "all_reduce",
                     "--algo", algo, "--min-bytes", "1G", "--max-bytes", "1G", "--csv")
        assert forced.returncode == 0, forced.stderr
        alone[algo] = float(rows(forced.stdout)[0]["time_us"])
    assert r["ranks"] == "1024" and r["algo"] == min(alone, key=alone.get), (r, alone)
    assert float(r["time_us"]) == alone[r["algo"]]
    assert math.isfinite(float(r["busbw_GBps"]))


def test_table_output_names_the_columns():
    res = run("collbench", "--model-only", *MESH, "--min-bytes", "1K", "--max-bytes", "4K")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("# cardsim collbench: all_reduce on 8 rank(s) of br100")
    for col in ("size", "count", "type", "algo", "time(us)", "algbw(GB/s)", "busbw(GB/s)"):
        assert col in lines[1]
    assert len(lines) == 2 + 3


@pytest.mark.parametrize("args,needle", [
    (["--op", "all_sum"], "all_sum"),
    (["--algo", "butterfly"], "--algo: unknown collective algorithm 'butterfly'"),
    (["--algo", "switch", "--preset", "br100"], "switch"),
    (["--min-bytes", "12Q"], "12Q"),
    (["--set", "fabric.link.bandwidth=-5 GB/s"], "fabric.link.bandwidth"),
    (["--set", "fabric.bogus=1"], "bogus"),
    (["--preset", "nosuchcard"], "nosuchcard"),
    (["--ranks", "0"], "--ranks"),
    (["--frobnicate"], "--frobnicate"),
    (["--min-bytes", "1.3"], "not a whole number of bytes"),
    (["--min-bytes", "0x10"], "0x10"),                                       # decimal only
    (["--min-bytes", "1K", "--max-bytes", "1G", "--factor", "1.0000001"], "more than 4096 sizes"),
    (["--nodes", "4294967297"], "more than 65536 nodes"),                     # not cut to 32 bits
    (["--min-bytes", "4M", "--max-bytes", "1M"], "got --min-bytes 4M (4194304 bytes) and --max-bytes 1M (1048576 bytes)"),
    (["--factor", "0.5"], "--factor must be above 1, got 0.5"),
    (["--set", "fabric.nodes=1000000"], "fabric.nodes"),
])
def test_bad_input_is_named_with_exit_status_2(args, needle):
    res = run("collbench", "--model-only", *args)
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    assert needle in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_unknown_subcommand_lists_the_valid_ones():
    res = run("frobnicate")
    assert res.returncode == 2 and "collbench" in res.stderr, res.stderr


def test_send_recv_times_every_rank_sending_to_the_next():
    # nccl-tests' sendrecv: 16 ranks of h100-sxm span two nodes, so ranks 7 -> 8 and 15 -> 0
    # cross the NICs and bound the row; 8 ranks stay on the NVSwitch.
    def t(ranks):
        res = run("collbench", "--model-only", "--preset", "h100-sxm", "--ranks", str(ranks), "--op", "send_recv",
                  "--min-bytes", "1G", "--max-bytes", "1G", "--csv")
        assert res.returncode == 0, res.stderr
        return float(rows(res.stdout)[0]["time_us"])
    assert t(2) == pytest.approx(t(8), rel=1e-9)
    assert t(16) > 5 * t(8)


def test_sizes_are_whole_float32_shares_as_the_live_run_moves():
    res = run("collbench", "--model-only", "--ranks", "3", "--op", "all_gather", "--min-bytes", "100K",
              "--max-bytes", "100K", "--csv")
    assert res.returncode == 0, res.stderr
    assert rows(res.stdout)[0]["bytes"] == "102396"     # 25599 elements: 8533 per rank
    res = run("collbench", "--model-only", "--ranks", "8", "--op", "all_reduce", "--min-bytes", "1001",
              "--max-bytes", "1001", "--csv")
    assert rows(res.stdout)[0]["bytes"] == "1000"


def test_a_factor_below_two_still_grows_every_row():
    res = run("collbench", "--model-only", "--min-bytes", "4", "--max-bytes", "64", "--factor", "1.2", "--csv")
    assert res.returncode == 0, res.stderr
    sizes = [int(r["bytes"]) for r in rows(res.stdout)]
    # one row per size asked for (each at least a byte more than the last), rounded down to
    # whole float32 elements, as nccl-tests prints its sweep
    asked = [4]
    while max(int(asked[-1] * 1.2), asked[-1] + 1) <= 64:
        asked.append(max(int(asked[-1] * 1.2), asked[-1] + 1))
    assert sizes == [4 * (a // 4) for a in asked] and len(sizes) > 5, (sizes, asked)


def test_a_size_too_small_for_one_element_per_rank_is_an_empty_row():
    res = run("collbench", "--model-only", *MESH, "--ranks", "8", "--op", "all_gather", "--min-bytes", "8",
              "--max-bytes", "64", "--csv")
    assert res.returncode == 0, res.stderr
    got = [(int(r["bytes"]), float(r["time_us"])) for r in rows(res.stdout)]
    assert [b for b, _ in got] == [0, 0, 32, 64] and got[0][1] == got[1][1] == 0 and got[2][1] > 0, got


def test_a_barrier_moves_no_bytes_so_reports_no_bandwidth():
    res = run("collbench", "--model-only", "--op", "barrier", "--min-bytes", "1K", "--max-bytes", "1G",
              "--factor", "1024", "--csv")
    assert res.returncode == 0, res.stderr
    for r in rows(res.stdout):
        assert float(r["time_us"]) > 0 and float(r["algbw_GBps"]) == 0 and float(r["busbw_GBps"]) == 0, r


def test_sizes_past_the_models_limit_are_refused_at_once():
    for size in ("1e30", "1024T"):
        res = run("collbench", "--model-only", "--algo", "tree", "--min-bytes", "1K", "--max-bytes", size)
        assert res.returncode == 2 and "limit" in res.stderr, (size, res.stderr)


def test_nodes_without_ranks_cost_nothing_and_change_nothing():
    """Configured nodes past the ranks' hold nothing: a job of 4 ranks times the same on 2
    nodes as on 65536 (which once built half a million devices: 3.3 s and 1 GB)."""
    times = []
    for n in ("2", "65536"):
        res = run("collbench", "--model-only", "--preset", "br100", "--ranks", "4", "--set", f"fabric.nodes={n}",
                  "--min-bytes", "1M", "--max-bytes", "1M", "--csv", timeout=20)
        assert res.returncode == 0, res.stderr
        times.append(rows(res.stdout)[0]["time_us"])
    assert times[0] == times[1]


def test_cardsim_nodes_sets_the_node_count():
    res = run("collbench", "--model-only", "--ranks", "8", "--min-bytes", "1M", "--max-bytes", "1M",
              env={"CARDSIM_NODES": "2"})
    assert res.returncode == 0, res.stderr
    assert "2 node(s) x 8 devices" in res.stdout, res.stdout
    res = run("collbench", "--model-only", "--ranks", "1", "--op", "send_recv")
    assert res.returncode == 2 and "send_recv needs --ranks 2" in res.stderr, res.stderr


def test_an_all_to_all_over_a_thousand_ranks_is_bounded_by_the_nics():
    # A million transfers at once (every pair): all but 7 of each rank's 1023 peers are on
    # other nodes, so nearly all its bytes leave through its NIC; the time is at least that.
    res = run("collbench", "--model-only", "--preset", "h100-sxm", "--ranks", "1024", "--op", "all_to_all",
              "--min-bytes", "64M", "--max-bytes", "64M", "--csv")
    assert res.returncode == 0, res.stderr
    (r,) = rows(res.stdout)
    nic = run("collbench", "--model-only", "--preset", "h100-sxm", "--ranks", "16", "--op", "send_recv",
              "--min-bytes", "1G", "--max-bytes", "1G", "--csv")
    assert nic.returncode == 0, nic.stderr
    leaving = (64 << 20) * 1016 / 1024
    assert r["algo"] == "direct" and float(r["time_us"]) > 0
    # no faster than the bytes leaving over the NIC at the NIC-bound pair's own rate
    pair_gbps = float(rows(nic.stdout)[0]["algbw_GBps"])
    assert float(r["time_us"]) * 1e-6 >= leaving / (pair_gbps * 1e9) * 0.99, (r, pair_gbps)


def test_a_preferred_algorithm_from_the_configuration_or_the_environment():
    # fabric.algorithm (or CARDSIM_COLL_ALGO, which overrides it) is run where it can run the
    # op; elsewhere the tuner chooses, as without a preference. --algo is run or refused.
    args = ["collbench", "--model-only", *MESH, "--ranks", "8", "--min-bytes", "1M", "--max-bytes", "1M", "--csv"]
    tuned = {op: rows(run(*args, "--op", op).stdout)[0] for op in ("all_reduce", "all_gather")}
    assert tuned["all_reduce"]["algo"] != "tree"
    for how in ({"set": ["--set", "fabric.algorithm=tree"]}, {"env": {"CARDSIM_COLL_ALGO": "tree"}},
                {"set": ["--set", "fabric.algorithm=ring"], "env": {"CARDSIM_COLL_ALGO": "tree"}}):
        got = {op: rows(run(*args, *how.get("set", []), "--op", op, env=how.get("env")).stdout)[0]
               for op in ("all_reduce", "all_gather")}
        assert got["all_reduce"]["algo"] == "tree", (how, got)
        assert got["all_gather"] == tuned["all_gather"], (how, got)
    bad = run(*args, "--set", "fabric.algorithm=butterfly")
    assert bad.returncode == 2 and "fabric.algorithm" in bad.stderr and "ring, tree" in bad.stderr, bad.stderr
    bad = run(*args, env={"CARDSIM_COLL_ALGO": "butterfly"})   # named by where it came from
    assert bad.returncode == 2 and "CARDSIM_COLL_ALGO: unknown collective algorithm 'butterfly'" in bad.stderr, bad.stderr
    refused = run(*args, "--op", "all_gather", "--algo", "tree")
    assert refused.returncode == 2 and "tree does not do all_gather" in refused.stderr, refused.stderr
    assert "(algorithms that can: ring, direct" in refused.stderr, refused.stderr   # what to force instead


def test_sizes_take_iec_suffixes_and_the_rank_count_is_bounded():
    base = ["collbench", "--model-only", *MESH, "--ranks", "8", "--csv"]
    a = rows(run(*base, "--min-bytes", "64K", "--max-bytes", "1M").stdout)
    b = rows(run(*base, "--min-bytes", "64KiB", "--max-bytes", "1MiB").stdout)
    assert a == b and [int(r["bytes"]) for r in a] == [65536 << i for i in range(5)]
    res = run("collbench", "--model-only", *MESH, "--ranks", "16385")
    assert res.returncode == 2 and "--ranks 16385 is over the limit of 16384" in res.stderr, res.stderr
    # a node count set by hand is not grown to fit the ranks (the default of one node is)
    for how in ({"env": {"CARDSIM_NODES": "1"}}, {"set": ["--set", "fabric.nodes=1"]}):
        res = run("collbench", "--model-only", *MESH, "--ranks", "16", *how.get("set", []), env=how.get("env"))
        assert res.returncode == 2 and "1 node(s) of 8 devices" in res.stderr and "16 ranks" in res.stderr, res.stderr
    grown = run("collbench", "--model-only", *MESH, "--ranks", "16", "--min-bytes", "1K", "--max-bytes", "1K")
    assert grown.returncode == 0 and "2 node(s) x 8 devices" in grown.stdout, grown.stdout


def test_hierarchical_runs_its_rings_inside_a_node_on_every_channel():
    one = ["collbench", "--model-only", "--preset", "br100", "--min-bytes", "1G", "--max-bytes", "1G", "--csv"]
    t = {a: float(rows(run(*one, "--ranks", "8", "--algo", a).stdout)[0]["time_us"]) for a in ("ring", "hierarchical")}
    assert t["hierarchical"] == t["ring"], t   # on one node it is the node's ring, channels and all
    two = [float(rows(run(*one, "--ranks", "16", "--algo", "hierarchical", "--set", f"fabric.channels={c}").stdout)[0]
                 ["time_us"]) for c in (1, 4)]
    assert two[1] < two[0], two


def test_in_switch_reduction_goes_in_nccl_nvls_rounds_and_the_keys_are_what_ifs():
    """h100-sxm's NVLS: rounds of 16 channels x 8 ranks x 128 KiB (16 MiB), S(1+1/n) each way per
    rank, one round's multicast overlapping the next round's reduction; fabric.switch_chunk=0 B
    is the textbook streaming reduction (S up, S down)."""
    args = ["collbench", "--model-only", *STAR, "--ranks", "8", "--algo", "switch", "--min-bytes", "1M",
            "--max-bytes", "64M", "--factor", "64", "--csv"]
    res = run(*args)
    assert res.returncode == 0, res.stderr
    got = {int(r["bytes"]): float(r["time_us"]) for r in rows(res.stdout)}
    route = 1e-6 + 0.5e-6
    # one round or less: the reduction, then the multicast: 2 S / B
    assert got[1 << 20] == pytest.approx((route + 2 * (1 << 20) / 400e9) * 1e6, abs=1e-3)
    # four rounds of 16 MiB and the unpaired halves, 7/9 of a round
    rnd = (16 << 20) * 9 / 8 / 400e9
    assert got[64 << 20] == pytest.approx((route + (4 + 7 / 9) * rnd) * 1e6, abs=1e-3)
    res = run(*args, "--set", "fabric.switch_chunk=0 B")
    assert res.returncode == 0, res.stderr
    stream = {int(r["bytes"]): float(r["time_us"]) for r in rows(res.stdout)}
    for s in (1 << 20, 64 << 20):
        assert stream[s] == pytest.approx((route + s / 400e9) * 1e6, abs=1e-3)
    # 32 channels: rounds of 32 MiB, two of them
    res = run(*args, "--set", "fabric.switch_channels=32")
    assert res.returncode == 0, res.stderr
    wide = {int(r["bytes"]): float(r["time_us"]) for r in rows(res.stdout)}
    assert wide[64 << 20] == pytest.approx((route + (2 + 7 / 9) * 2 * rnd) * 1e6, abs=1e-3)
    res = run(*args, "--set", "fabric.switch_channels=0")
    assert res.returncode == 2 and "switch_channels" in res.stderr, res.stderr


def test_a_bad_value_outside_the_fabric_is_refused_too():
    res = run("collbench", "--model-only", "--preset", "h100-sxm", "--ranks", "8", "--max-bytes", "1K",
              "--set", "memory.bandwidth=-3 TB/s")
    assert res.returncode == 2, res.stdout
    assert "device.memory.bandwidth" in res.stderr and "negative" in res.stderr, res.stderr
    assert "size" not in res.stdout
    res = run("collbench", "--model-only", "--preset", "h100-sxm", "--ranks", "8", "--max-bytes", "1K",
              "--set", "memory.bandwidth=3 GiB")
    assert res.returncode == 2 and "not a bandwidth unit" in res.stderr, res.stderr


def test_in_switch_reduction_runs_on_a_node_of_a_larger_fabric():
    # 8 ranks on node 0 of 4: each GPU also has a NIC to the leaf switch, but all its NVLinks
    # go to the node's reducing NVSwitch, so NVLS runs there as on a lone node (and is chosen).
    one = rows(run("collbench", "--model-only", "--preset", "h100-sxm", "--ranks", "8", "--algo", "switch",
                   "--min-bytes", "1M", "--max-bytes", "1M", "--csv").stdout)
    for extra in (["--algo", "switch"], []):
        res = run("collbench", "--model-only", "--preset", "h100-sxm", "--ranks", "8", "--set", "fabric.nodes=4",
                  *extra, "--min-bytes", "1M", "--max-bytes", "1M", "--csv")
        assert res.returncode == 0, res.stderr
        got = rows(res.stdout)
        assert got[0]["algo"] == "switch" and got[0]["time_us"] == one[0]["time_us"], (got, one)


def test_count_is_per_rank_for_shared_buffers_and_send_recv_is_spelled_either_way():
    # nccl-tests' count column: elements of one rank's part for all_gather, reduce_scatter
    # and all_to_all (1 MiB of float32 over 8 ranks: 32768), of the whole buffer otherwise.
    def count(op):
        res = run("collbench", "--model-only", "--preset", "h100-sxm", "--ranks", "8", "--op", op,
                  "--min-bytes", "1M", "--max-bytes", "1M")
        assert res.returncode == 0, res.stderr
        return int(res.stdout.strip().splitlines()[-1].split()[1])
    assert [count(op) for op in ("all_gather", "reduce_scatter", "all_to_all")] == [32768] * 3
    assert count("all_reduce") == count("send/recv") == 262144


def test_an_all_to_all_past_the_direct_algorithms_limit_is_refused_at_once():
    # Every pair of 8192 ranks at once is 67 million transfers: refused naming the limit
    # (it used to take minutes and tens of GB), while 4096 ranks (the limit) still run.
    res = run("collbench", "--model-only", "--preset", "h100-sxm", "--ranks", "8192", "--op", "all_to_all",
              "--min-bytes", "1M", "--max-bytes", "1M", "--csv")
    assert res.returncode == 2, res.stderr
    assert "all_to_all over 8192 ranks is over its limit of 4096 ranks" in res.stderr, res.stderr


def test_algorithm_names_in_any_case():
    one = ["collbench", "--model-only", "--preset", "h100-sxm", "--min-bytes", "1M", "--max-bytes", "1M", "--csv"]
    want = rows(run(*one, "--algo", "ring").stdout)
    assert rows(run(*one, "--algo", "Ring").stdout) == want
    assert rows(run(*one, env={"CARDSIM_COLL_ALGO": "RING"}).stdout) == want
    assert want[0]["algo"] == "ring"
    bad = run(*one, "--algo", "Rung")
    assert bad.returncode == 2 and "unknown collective algorithm 'Rung'" in bad.stderr, bad.stderr
    # preset names too
    assert rows(run(*[a if a != "h100-sxm" else "H100-SXM" for a in one], "--algo", "ring").stdout) == want
