"""`cardsim collbench --ranks N` without --model-only: N rank processes run the collective
through cncl/bccl on emulated devices sharing one fabric server, timed with device events.
The times must equal the fabric model's own (`--model-only`) for the same preset, ranks,
size and algorithm: that is the contract between the live path and the model."""
import csv
import io
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
CARDSIM = str(ROOT / ".venv" / "bin" / "cardsim")
HEADER = "op,algo,ranks,bytes,time_us,algbw_GBps,busbw_GBps"


def cardsim(*args, env=None, timeout=600):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith("CARDSIM_") and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                                                       "DS_ACCELERATOR")}
    e.update(env or {})
    return subprocess.run([CARDSIM, *args], capture_output=True, text=True, timeout=timeout, env=e)


def table(res):
    assert res.returncode == 0, res.stderr[-3000:]
    lines = res.stdout.strip().splitlines()
    assert lines[0] == HEADER, lines
    return list(csv.DictReader(io.StringIO(res.stdout)))


def assert_same(live, model):
    assert len(live) == len(model)
    for a, b in zip(live, model):
        for k in ("op", "algo", "ranks", "bytes"):
            assert a[k] == b[k], (k, a, b)
        # the model prints ps-exact times to 1 ns; the live run's mean of event times may
        # round the last digit the other way
        assert float(a["time_us"]) == pytest.approx(float(b["time_us"]), abs=2e-3), (a, b)
        assert float(a["busbw_GBps"]) == pytest.approx(float(b["busbw_GBps"]), rel=1e-3, abs=2e-3), (a, b)


def test_live_all_reduce_times_equal_the_models_on_mlu370_x8():
    common = ["--preset", "mlu370-x8", "--ranks", "4", "--op", "all_reduce", "--min-bytes", "1K",
              "--max-bytes", "32M", "--factor", "32", "--csv"]
    live = table(cardsim("collbench", *common))
    model = table(cardsim("collbench", "--model-only", *common))
    assert [int(r["bytes"]) for r in live] == [1024, 32768, 1 << 20, 32 << 20]
    assert_same(live, model)
    assert float(live[-1]["time_us"]) > float(live[0]["time_us"]) > 0


def test_live_all_gather_with_a_forced_algorithm_and_uneven_shares_on_br100():
    # 3 ranks: 1 MiB is not whole float32 shares, so the live run moves 1048572 bytes (as
    # nccl-tests rounds its count) and reports that size; the model agrees at that size.
    live = table(cardsim("collbench", "--preset", "br100", "--ranks", "3", "--op", "all_gather",
                         "--algo", "ring", "--min-bytes", "1M", "--max-bytes", "1M", "--csv"))
    assert live[0]["bytes"] == "1048572" and live[0]["algo"] == "ring"
    model = table(cardsim("collbench", "--model-only", "--preset", "br100", "--ranks", "3", "--op",
                          "all_gather", "--algo", "ring", "--min-bytes", "1048572", "--max-bytes", "1048572",
                          "--csv"))
    assert_same(live, model)


def test_live_rows_for_sizes_below_one_element_per_rank_are_empty_as_in_the_model():
    args = ["--preset", "mlu370-x8", "--ranks", "2", "--op", "all_gather", "--min-bytes", "4", "--max-bytes", "16",
            "--csv"]
    live, model = table(cardsim("collbench", *args)), table(cardsim("collbench", "--model-only", *args))
    assert [int(r["bytes"]) for r in live] == [int(r["bytes"]) for r in model] == [0, 8, 16]
    assert float(live[0]["time_us"]) == float(model[0]["time_us"]) == 0 and float(live[1]["time_us"]) > 0
    # Several sizes below one element each: a row apiece, as the model prints them.
    args = ["--preset", "mlu370-x8", "--ranks", "2", "--min-bytes", "1", "--max-bytes", "3", "--csv"]
    live, model = table(cardsim("collbench", *args)), table(cardsim("collbench", "--model-only", *args))
    assert [r["bytes"] for r in live] == [r["bytes"] for r in model] == ["0", "0"]


def test_live_tiny_messages_time_the_collective_not_the_hosts_launches():
    # A 1 KiB all-reduce on br100's mesh takes ~3 us on the fabric, less than the host's cost
    # of issuing one through torch.distributed: the live run queues its timed calls behind a
    # hold of the stream, so they run back to back as the device gets to them and the row is
    # the collective's own time, as --model-only gives it (send_recv: two calls and a posting
    # event per iteration on the host, still hidden).
    for op in ("all_reduce", "send_recv"):
        args = ["--preset", "br100", "--ranks", "2", "--op", op, "--min-bytes", "1K", "--max-bytes", "4K", "--csv"]
        live, model = table(cardsim("collbench", *args)), table(cardsim("collbench", "--model-only", *args))
        assert_same(live, model)
        assert float(model[0]["time_us"]) < 4, model   # below the host's launch cost per call


def test_live_full_execution_checks_results_and_keeps_the_times_and_overrides_apply():
    # --execution full moves the bytes through Gloo and checks each result (a wrong one
    # fails the run); the simulated times are those of timing mode. --set reaches the ranks (ranks 0 and 1 are the two chips of one card).
    args = ["--preset", "mlu370-x8", "--ranks", "2", "--op", "reduce_scatter", "--min-bytes", "64K",
            "--max-bytes", "256K", "--factor", "4", "--set", "fabric.on_card.latency=7 us", "--csv"]
    full = table(cardsim("collbench", *args, "--execution", "full", "--iters", "2"))
    model = table(cardsim("collbench", "--model-only", *args))
    assert_same(full, model)
    base = table(cardsim("collbench", "--model-only", *args[:-3], "--csv"))
    assert float(model[0]["time_us"]) > float(base[0]["time_us"]) + 5   # the override is felt


def test_live_send_recv_is_nccl_tests_ring_shift():
    # Every rank sends to the next and receives from the previous (checked with --execution
    # full); on mlu370-x8, 3 ranks put chip 1 -> chip 2 and chip 2 -> chip 0 across cards, so
    # the row's time is the slower card-to-card pair's, not the on-card 0 -> 1.
    args = ["--preset", "mlu370-x8", "--ranks", "3", "--op", "send_recv", "--min-bytes", "1M", "--max-bytes", "1M",
            "--csv"]
    live = table(cardsim("collbench", *args, "--execution", "full", "--iters", "2"))
    model = table(cardsim("collbench", "--model-only", *args))
    assert_same(live, model)
    pair = table(cardsim("collbench", "--model-only", *args[:3], "2", *args[4:]))
    assert float(model[0]["time_us"]) > 1.5 * float(pair[0]["time_us"]), (model, pair)


def test_live_flag_errors_are_named():
    res = cardsim("collbench", "--model-only", "--iters", "3")
    assert res.returncode == 2 and "--iters applies to live runs" in res.stderr, res.stderr
    res = cardsim("collbench", "--ranks", "2", "--execution", "fast")
    assert res.returncode == 2 and "--execution must be timing or full, got 'fast'" in res.stderr, res.stderr
    res = cardsim("collbench", "--ranks", "1", "--op", "send_recv")
    assert res.returncode == 2 and "send_recv needs --ranks 2" in res.stderr, res.stderr
    res = cardsim("collbench", "--ranks", "2", "--max-bytes", "1K", env={"CARDSIM_PYTHON": "/nonexistent/python"})
    assert res.returncode == 1 and "cannot run '/nonexistent/python'" in res.stderr, res.stderr
