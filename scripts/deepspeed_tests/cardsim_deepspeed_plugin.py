"""pytest plugin that scripts/deepspeed-tests.sh loads (``-p cardsim_deepspeed_plugin``) when
it runs DeepSpeed's unit tests on an emulated card. DeepSpeed's files stay untouched.

Card discovery. DeepSpeed's harness (tests/unit/common.py, ``set_accelerator_visible``)
fills ``CUDA_VISIBLE_DEVICES`` in each rank from the vendor tool when the variable is unset:
``brsmi gpu list`` for supa, but for mlu it has no branch and asserts the device is the cpu.
The variable only lists the cards the harness rotates over (the MLU and SUPA accelerators
pick their card with ``set_device(local_rank)``, not from it), so for mlu this plugin counts
the cards in ``cnmon -l`` (or, without cnmon, asks the runtime in a separate process) and
sets ``CUDA_VISIBLE_DEVICES=0,...,N-1`` before any test runs; the ranks inherit it. For supa
the harness's own ``brsmi`` path is left to do its work.

Processes. The pytest process itself initializes the emulated runtime (test classes call
``device_count()`` when they are defined), and the shim refuses the device to a child
forked after that. The harness never forks it, though: it starts ranks through a
``forkserver`` (a fresh interpreter that has not touched the device) or with ``spawn``.

Per-test time limit. DeepSpeed's harness waits ``DS_UNITTEST_TIMEOUT`` seconds (600 by
default) for a distributed test and then ends the whole session (``pytest.exit``) after
tearing down its process pool, which itself waits for the hung ranks. This plugin puts a
shorter limit (``CARDSIM_DS_TEST_TIMEOUT`` seconds, 0 = none) on each test's setup, call
and teardown together: when it expires, the test's processes (the ranks; not the
multiprocessing fork server and resource tracker) are killed and the test fails with
"timed out", and the run goes on with the next test. A test stuck inside a C call without
returning to Python cannot be interrupted this way; the script's per-path wall limit
covers that case.

Also: ``CARDSIM_DS_SAMPLE=N`` runs one in N parametrizations of each test function, and
DeepSpeed's DistributedFixture classes are registered as fixtures on pytest >= 8.4 (see
``pytest_collectstart``).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

_ENV_TIMEOUT = "CARDSIM_DS_TEST_TIMEOUT"
_RETRY_S = 20          # after a timeout, raise again this often while cleanup is stuck
_discovery = ""        # what the report header says about the cards
_timed_out = []        # node ids of the tests that hit the limit
_exitstatus = None


def _count_mlu_cards() -> tuple[int, str]:
    cnmon = shutil.which("cnmon")
    if cnmon:
        out = subprocess.run([cnmon, "-l"], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise pytest.UsageError(f"cardsim: '{cnmon} -l' failed ({out.returncode}): {out.stderr.strip()}")
        n = len(re.findall(r"^Card \d+:", out.stdout, flags=re.M))
        return n, f"{n} card(s) in 'cnmon -l'"
    code = "import torch, torch_mlu; print(torch.mlu.device_count())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise pytest.UsageError(f"cardsim: no cnmon on PATH and the runtime query failed: {out.stderr.strip()[-2000:]}")
    n = int(out.stdout.strip().splitlines()[-1])
    return n, f"{n} card(s) from torch.mlu.device_count() (no cnmon on PATH)"


def pytest_configure(config):
    global _discovery
    card = os.environ.get("DS_ACCELERATOR", "")
    if card == "mlu" and "CUDA_VISIBLE_DEVICES" not in os.environ:
        n, how = _count_mlu_cards()
        if n < 1:
            raise pytest.UsageError(f"cardsim: no MLU cards found ({how})")
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, range(n)))
        _discovery = f"{how}; CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']} for DeepSpeed's harness"
    elif "CUDA_VISIBLE_DEVICES" in os.environ:
        _discovery = f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']} (given)"
    elif card == "supa":
        _discovery = "DeepSpeed's harness counts the cards in 'brsmi gpu list'"


def pytest_report_header(config):
    limit = _limit()
    return [f"cardsim: DS_ACCELERATOR={os.environ.get('DS_ACCELERATOR', '')}; {_discovery}",
            f"cardsim: per-test limit {limit or 'none'} s ({_ENV_TIMEOUT}), "
            f"DeepSpeed's DS_UNITTEST_TIMEOUT={os.environ.get('DS_UNITTEST_TIMEOUT', '600 (default)')}"]


def _limit() -> int:
    try:
        return max(0, int(os.environ.get(_ENV_TIMEOUT, "0")))
    except ValueError:
        raise pytest.UsageError(f"{_ENV_TIMEOUT} must be a number of seconds, got {os.environ[_ENV_TIMEOUT]!r}")


def _kill_test_processes():
    """Kills this process's descendants except multiprocessing's fork server and resource
    tracker (which serve later tests)."""
    import psutil
    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for p in kids:
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "multiprocessing.forkserver" in cmd or "multiprocessing.resource_tracker" in cmd:
            continue
        try:
            p.kill()
        except psutil.Error:
            pass


class _Deadline:
    def __init__(self, nodeid: str, limit: int):
        self.nodeid, self.limit = nodeid, limit
        self.deadline = time.monotonic() + limit
        self.expired = False


_current: _Deadline | None = None


def _on_alarm(signum, frame):
    d = _current
    if d is None:
        return
    first = not d.expired
    d.expired = True
    if first:
        _timed_out.append(d.nodeid)
        # The harness's pool stays unusable once its ranks are killed: forget cached pools
        # so that later tests of a reuse_dist_env class start new ones.
        common = sys.modules.get("unit.common")
        if common is not None and hasattr(common, "DistributedExec"):
            common.DistributedExec._pool_cache.clear()
    _kill_test_processes()
    # If cleanup code (the harness's pool teardown) is stuck behind the killed ranks, the
    # next alarm raises again out of it.
    signal.alarm(_RETRY_S)
    pytest.fail(f"timed out after {d.limit} s (cardsim per-test limit, {_ENV_TIMEOUT})", pytrace=False)


def _arm():
    d = _current
    if d is None:
        return
    if d.expired:
        signal.alarm(_RETRY_S)
    else:
        signal.alarm(max(1, int(d.deadline - time.monotonic() + 0.999)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _current
    limit = _limit()
    if limit and hasattr(signal, "SIGALRM"):
        _current = _Deadline(item.nodeid, limit)
        old = signal.signal(signal.SIGALRM, _on_alarm)
    try:
        yield
    finally:
        if _current is not None:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
            _current = None


def _phase():
    _arm()
    try:
        yield
    finally:
        signal.alarm(0)


# Each phase arms the alarm for what is left of the test's budget; between phases (while
# pytest reports) no alarm is pending, so the exception always lands inside a phase.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    yield from _phase()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    yield from _phase()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield from _phase()


def pytest_collection_modifyitems(session, config, items):
    """CARDSIM_DS_SAMPLE=N keeps one in N parametrizations of each test function (the 1st,
    (N+1)th, ...): every test function still runs, on fewer parameter combinations. For
    paths that would take hours on a small machine."""
    try:
        n = int(os.environ.get("CARDSIM_DS_SAMPLE", "1") or "1")
    except ValueError:
        raise pytest.UsageError(f"CARDSIM_DS_SAMPLE must be a whole number, got {os.environ['CARDSIM_DS_SAMPLE']!r}")
    if n <= 1:
        return
    seen: dict = {}
    keep, drop = [], []
    for item in items:
        key = (str(item.path), item.cls.__name__ if getattr(item, "cls", None) else "",
               getattr(item, "originalname", item.name))
        i = seen[key] = seen.get(key, -1) + 1
        (keep if i % n == 0 else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collectstart(collector):
    """DeepSpeed's DistributedFixture classes (tests/unit/common.py) become fixtures through
    the ``_pytestfixturefunction`` attribute, which pytest 8.4 and later no longer reads
    (DeepSpeed pins pytest<8.4; this venv has a newer one): each test using one errors with
    "fixture '...' not found". On such a pytest, register every concrete DistributedFixture
    class of a test module as a fixture of its name whose function is the class itself, as
    older pytest did; DeepSpeed's conftest (pytest_fixture_setup) then runs it as usual."""
    if not isinstance(collector, pytest.Module):
        return
    try:
        from _pytest.fixtures import FixtureFunctionDefinition, FixtureFunctionMarker
    except ImportError:       # pytest < 8.4 reads _pytestfixturefunction itself
        return
    try:
        module = collector.obj
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:     # an import error or a module-level skip: collect() imports it
        return                # again and reports that
    import inspect
    import types
    # The classes stay where they are (the harness pickles their instances by reference to
    # the module); the fixture definitions live in a holder of their own.
    holder = types.ModuleType(f"{module.__name__}.<cardsim distributed fixtures>")
    for name, value in list(vars(module).items()):
        if (inspect.isclass(value) and getattr(value, "is_dist_fixture", False)
                and not inspect.isabstract(value)):
            marker = FixtureFunctionMarker(scope="function", params=None, name=name, _ispytest=True)
            setattr(holder, name, FixtureFunctionDefinition(function=value, fixture_function_marker=marker,
                                                            _ispytest=True))
    if vars(holder).keys() - {"__name__", "__doc__", "__package__", "__loader__", "__spec__"}:
        collector.session._fixturemanager.parsefactories(holder=holder, node=collector)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    global _exitstatus
    _exitstatus = int(exitstatus)


def pytest_terminal_summary(terminalreporter):
    if _timed_out:
        terminalreporter.write_sep("=", f"cardsim: {len(_timed_out)} test(s) hit the per-test limit")
        for nodeid in _timed_out:
            terminalreporter.write_line(nodeid)


def pytest_unconfigure(config):
    # Process pools whose ranks were killed cannot be shut down (multiprocessing's exit
    # handlers wait on locks the killed ranks held): once the report and the junit file are
    # written, leave without running them.
    if _timed_out:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_exitstatus if _exitstatus is not None else 1)
