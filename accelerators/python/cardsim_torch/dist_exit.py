"""The process groups' end at exit (distributed.py): every group destroyed while the
interpreter is still whole, briefly once a collective failed for a member's loss."""
from __future__ import annotations

import atexit
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
                         "at exit (a peer stopped answering); exiting without them\n")
    else:
        _gloo_hold.drain(limit)


def register_exit_handler() -> None:
    global _exit_handler_registered
    if not _exit_handler_registered:
        # Registered after torch.distributed's import, so it runs before anything torch registered.
        atexit.register(_destroy_groups_at_exit)
        _exit_handler_registered = True
