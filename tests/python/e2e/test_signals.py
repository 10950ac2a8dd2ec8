"""A job stopped by a signal leaves nothing behind and keeps its trace: Ctrl-C (SIGINT, which
Python turns into KeyboardInterrupt and then ends itself by SIGINT, skipping C's atexit),
SIGTERM from a launcher and SIGHUP from a closed terminal all complete the trace (its End
record says how the run ended) and remove the status file, and the process still ends by
the signal. A process killed outright (SIGKILL) leaves a trace that readers report as
incomplete, naming the file. Under torchrun, Ctrl-C on the whole job (terminal and
launcher signals together) ends every rank, fabric server included, with every trace whole."""
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from conftest import PYTHON, ROOT, free_port

CARDSIM = str(ROOT / ".venv" / "bin" / "cardsim")
TORCHRUN = str(ROOT / ".venv" / "bin" / "torchrun")

# Works on the card until told to stop; prints "ready" once it has recorded something.
LOOP = r"""
import os, sys, time, torch, importlib
card = sys.argv[1]
importlib.import_module("torch_" + card)
dm = getattr(torch, card)
if int(os.environ.get("WORLD_SIZE", "1")) > 1:
    import torch.distributed as dist
    dist.init_process_group(backend={"mlu": "cncl", "supa": "bccl"}[card])
    dm.set_device(int(os.environ["LOCAL_RANK"]))
    t = torch.ones(1024, device=card)
    dist.all_reduce(t)
    assert t[0].item() == dist.get_world_size()
x = torch.ones(256, 256, device=card)
for _ in range(5):
    x = x @ x * 0.001
dm.synchronize()
print("ready", flush=True)
while True:
    x.add_(1.0)
    time.sleep(0.001)
"""


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CARDSIM_", "MLU_", "SUPA_")) and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(CARDSIM_TRACE=str(tmp_path / "trace"), CARDSIM_STATUS_DIR=str(tmp_path / "status"), **extra)
    return env


def _info(path):
    return subprocess.run([CARDSIM, "info", str(path), "--json"], capture_output=True, text=True, timeout=120)


def _start(tmp_path, sig, card="mlu"):
    # The signal at its default action whatever the runner left (under nohup SIGHUP is
    # ignored; a background job of a shell ignores SIGINT), as in a terminal.
    return subprocess.Popen([PYTHON, "-c", LOOP, card], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(tmp_path), cwd=str(ROOT),
                            preexec_fn=None if sig == signal.SIGKILL else lambda: signal.signal(sig, signal.SIG_DFL))


def _stop(proc, sig):
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        time.sleep(0.3)   # more work recorded after the first buffer
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, proc.stderr.read()


@pytest.mark.parametrize("sig,ended", [(signal.SIGINT, "exit"), (signal.SIGTERM, "signal SIGTERM"),
                                       (signal.SIGHUP, "signal SIGHUP")],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_a_signal_completes_the_trace_and_removes_the_status_file(tmp_path, sig, ended, card):
    rc, err = _stop(_start(tmp_path, sig, card), sig)
    assert rc == -sig, (rc, err[-2000:])   # still ended by the signal, as a launcher expects
    assert list((tmp_path / "status").iterdir()) == []
    res = _info(tmp_path / "trace")
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    assert [f["ended"] for f in j["files"]] == [ended]
    # Everything done before the signal is in it: the five matmuls and some of the loop. The
    # signal may land inside a launch, after its kernel reached the card and before the call
    # returned to be recorded: at most that one command has no call.
    launches, commands = j["records"]["kernel_launch"], j["records"]["device_command"]
    assert launches > 5 and launches <= commands <= launches + 1, (launches, commands)
    # Its replay says that the run was cut short (a signal that ends it), in the table and the JSON.
    rep = subprocess.run([str(ROOT / ".venv" / "bin" / "cardsim"), "replay", tmp_path / "trace", "--json",
                          tmp_path / "rep.json"], capture_output=True, text=True)
    assert rep.returncode == 0, rep.stderr
    notes = json.loads((tmp_path / "rep.json").read_text())["notes"]
    if ended == "exit":
        assert notes == [] and "note:" not in rep.stdout
    else:
        assert notes == [f"rank 0's recording ended by {ended}: the run was cut short; the replay covers what was "
                         "recorded"], notes
        assert f"note: {notes[0]}" in rep.stdout


def test_a_killed_process_leaves_a_trace_marked_incomplete(tmp_path):
    rc, _ = _stop(_start(tmp_path, signal.SIGKILL), signal.SIGKILL)
    assert rc == -signal.SIGKILL
    res = _info(tmp_path / "trace")
    assert res.returncode == 2
    f = str(tmp_path / "trace" / "rank0.cstrace")
    assert f + ": incomplete: the file ends after record #" in res.stderr, res.stderr
    assert "without the End record" in res.stderr and "was killed" in res.stderr, res.stderr


def test_ctrl_c_under_torchrun_ends_every_rank_with_whole_traces(tmp_path):
    port = free_port()
    cmd = [TORCHRUN, "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port", str(port),
           "-m", "_cardsim_signal_loop", "mlu"]
    (tmp_path / "_cardsim_signal_loop.py").write_text(LOOP)
    env = _env(tmp_path, PYTHONPATH=str(tmp_path), OMP_NUM_THREADS="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT),
                            start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # A rank that never gets ready must not hang the suite in readline: killed at the deadline.
    watchdog = threading.Timer(240, lambda: os.killpg(proc.pid, signal.SIGKILL))
    watchdog.start()
    try:
        ready = 0
        while ready < 2:
            line = proc.stdout.readline()
            if not line:
                break
            # Counted, not matched per line: the two ranks share the pipe, and an unbuffered
            # print writes "ready" and "\n" apart, so one line can read "readyready".
            ready += line.count("ready")
        watchdog.cancel()
        assert ready == 2, proc.stderr.read()[-4000:]
        time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)   # what Ctrl-C in the terminal does: every process
        proc.wait(timeout=120)
        err = proc.stderr.read()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode != 0, err[-3000:]
    # No rank outlives the launcher, and nothing of theirs stays behind.
    left = subprocess.run(["pgrep", "-f", "_cardsim_signal_loop"], capture_output=True, text=True).stdout.split()
    assert left == [], left
    assert list((tmp_path / "status").iterdir()) == []
    res = _info(tmp_path / "trace")
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    assert j["ranks"] == [0, 1] and j["records"]["collective"] == 2
    assert {f["ended"] for f in j["files"]} <= {"exit", "signal SIGTERM"}, j["files"]
