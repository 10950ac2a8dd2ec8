"""The process groups' end at exit (distributed.py): every group destroyed while the
interpreter is still whole, briefly once a collective failed for a member's loss."""
from __future__ import annotations

import atexit
import os
import sys
import threading

import torch.distributed as dist

from . import gloo_hold as _gloo_hold

# How long the exit handler waits for the process groups to shut down; once a collective
# failed for a member's loss (the job is broken: Gloo's transfers with it never end), only
# briefly, so that a survivor whose error ends the program exits promptly.
_EXIT_SHUTDOWN_S = 10.0
_EXIT_SHUTDOWN_BROKEN_S = 1.0
_exit_handler_registered = False
_job_broken = False
# The status the interpreter is ending with, as far as Python lets it be known at atexit
# (sys.exit's code, an uncaught exception's 1): the process ends with it when the groups
# cannot be shut down.
_exit_status = 0


def flush_limit_s() -> float:
    """How long a group's end waits for its sent bytes to reach the peers (socket_flush):
    within the exit's own limit, and only briefly once the job is broken."""
    return (_EXIT_SHUTDOWN_BROKEN_S if _job_broken else _EXIT_SHUTDOWN_S) / 2


def broken(err: Exception) -> Exception:
    """Notes that a collective failed (the exit then waits briefly); returns `err`."""
    global _job_broken
    _job_broken = True
    return err


def _destroy_groups_at_exit() -> None:
    """Destroys every process group while the interpreter is still whole.

    A program that ends without destroy_process_group() (most training scripts) would
    otherwise leave Gloo's worker threads holding tensors until interpreter finalization,
    and tearing those down then aborts the process ("terminate called without an active
    exception", exit status -6) at random: a run that succeeded would fail under its
    launcher. The vendor's library has no such failure, so the emulated backend must not
    either. The groups are destroyed on a helper thread so that a peer that never answers
    cannot keep this process from ending: after _EXIT_SHUTDOWN_S the exit goes on.
    """
    limit = _EXIT_SHUTDOWN_BROKEN_S if _job_broken else _EXIT_SHUTDOWN_S
    if not dist.is_initialized():
        _gloo_hold.drain(limit)   # groups destroyed by the program (gloo_hold)
        return

    def shutdown():
        try:
            dist.destroy_process_group()
        except Exception as e:  # a group already broken: nothing left to release cleanly
            sys.stderr.write(f"cardsim: destroying the process groups at exit: {e}\n")

    t = threading.Thread(target=shutdown, name="cardsim-pg-shutdown", daemon=True)
    t.start()
    t.join(limit)
    if t.is_alive():
        sys.stderr.write(f"cardsim: the process groups did not shut down within {limit:g} s "
                         "at exit (a collective of theirs failed, or a peer stopped answering); "
                         "exiting without them\n")
        _exit_now()
    else:
        _gloo_hold.drain(limit)


def _exit_now() -> None:
    """Ends the process without finalizing the interpreter: the shutdown thread, still inside
    torch, would take the GIL back from a finalized interpreter, and a thread ended there
    aborts the process ("terminate called without an active exception"). What the runtime
    does at exit (a trace completed, the status file removed, the fabric server's last
    answers) is done first, and the output flushed."""
    try:
        from . import _C
        _C._run_exit_cleanups("exit")
    except Exception as e:   # nothing must keep the process from ending
        sys.stderr.write(f"cardsim: at exit: {e}\n")
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    os._exit(_exit_status)


def _code_of(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    return 1   # a message: Python prints it and ends with 1


def _track_exit_status() -> None:
    """Notes the status the interpreter ends with: sys.exit's code, 1 for an uncaught
    exception (130 for Ctrl-C), as Python would end."""
    exit_, hook = sys.exit, sys.excepthook

    def tracked_exit(code=None):
        global _exit_status
        _exit_status = _code_of(code)
        exit_(code)

    def tracked_hook(kind, value, tb):
        global _exit_status
        _exit_status = 130 if issubclass(kind, KeyboardInterrupt) else 1
        hook(kind, value, tb)

    sys.exit, sys.excepthook = tracked_exit, tracked_hook


def register_exit_handler() -> None:
    global _exit_handler_registered
    if not _exit_handler_registered:
        # Registered after torch.distributed's import, so it runs before anything torch registered.
        atexit.register(_destroy_groups_at_exit)
        _track_exit_status()
        _exit_handler_registered = True
