"""scripts/deepspeed-tests.sh, the runner of DeepSpeed's own unit tests on an emulated card.

Two parts: a stand-in source tree (a few tests of our own under tests/unit, shaped like a
DeepSpeed checkout) checks the table, the exit status, the card discovery for DeepSpeed's
harness and the per-test time limit without DeepSpeed's sources; and, when
CARDSIM_DEEPSPEED_SRC names a DeepSpeed source checkout, a tiny selection of DeepSpeed's
tests runs on each card (CI has no checkout: that part is skipped there)."""
import os
import pathlib
import re
import subprocess
import textwrap
import xml.etree.ElementTree as ET

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "deepspeed-tests.sh"
COLUMNS = ["path", "passed", "failed", "skipped", "errors", "wall", "note"]


def _run(args, env_extra=None, timeout=600):
    env = dict(os.environ)
    for k in ("CARDSIM_PRESET", "CARDSIM_DEVICES", "CARDSIM_CONFIG", "MLU_VISIBLE_DEVICES",
              "SUPA_VISIBLE_DEVICES", "DS_ACCELERATOR", "CUDA_VISIBLE_DEVICES",
              "DS_UNITTEST_TIMEOUT", "CARDSIM_DS_TEST_TIMEOUT", "CARDSIM_DS_PATH_TIMEOUT",
              "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update(env_extra or {})
    return subprocess.run(["bash", str(SCRIPT), "--no-setup", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=str(ROOT))


def _table(stdout: str) -> dict:
    """Parses the table the script prints last: {path: row dict}, with 'TOTAL'."""
    lines = stdout.splitlines()
    start = max(i for i, ln in enumerate(lines) if ln.split()[:len(COLUMNS)] == COLUMNS)
    rows = {}
    for ln in lines[start + 1:]:
        if not ln.strip() or set(ln.replace(" ", "")) == {"-"}:
            continue
        cells = ln.split(None, 6)
        assert len(cells) >= 6, f"malformed table row: {ln!r}"
        assert re.fullmatch(r"\d+m\d\ds", cells[5]), f"wall column: {ln!r}"
        rows[cells[0]] = dict(zip(COLUMNS, cells[:6] + [cells[6] if len(cells) > 6 else ""]))
        for k in ("passed", "failed", "skipped", "errors"):
            rows[cells[0]][k] = int(cells[COLUMNS.index(k)])
    assert "TOTAL" in rows, stdout[-2000:]
    for k in ("passed", "failed", "skipped", "errors"):
        assert rows["TOTAL"][k] == sum(r[k] for p, r in rows.items() if p != "TOTAL")
    return rows


def _junit_counts(xml_path: pathlib.Path) -> dict:
    suite = ET.parse(xml_path).getroot().find("testsuite")
    failed, errors, skipped = (int(suite.get(a)) for a in ("failures", "errors", "skipped"))
    return {"passed": int(suite.get("tests")) - failed - errors - skipped, "failed": failed,
            "skipped": skipped, "errors": errors}


# ---- a stand-in source tree -------------------------------------------------------------

_FAKE_TESTS = '''
import os, time
import pytest

def test_pass():
    pass

def test_cards_for_the_harness():
    # The plugin counted the cards with cnmon (CARDSIM_DEVICES=3) for DeepSpeed's harness.
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0,1,2"

def test_fail():
    assert 1 == 2

@pytest.mark.skip(reason="skipped on purpose")
def test_skip():
    pass

@pytest.fixture
def broken():
    raise RuntimeError("setup error on purpose")

def test_error(broken):
    pass

def test_hang():
    time.sleep(600)

def test_after_hang():
    pass
'''


@pytest.fixture(scope="module")
def fake_src(tmp_path_factory):
    src = tmp_path_factory.mktemp("fake-deepspeed")
    (src / "deepspeed").mkdir()
    (src / "deepspeed" / "__init__.py").write_text("")
    unit = src / "tests" / "unit"
    (unit / "more").mkdir(parents=True)
    (unit / "__init__.py").write_text("")
    (unit / "common.py").write_text("")
    (unit / "test_fake.py").write_text(textwrap.dedent(_FAKE_TESTS))
    (unit / "more" / "test_more.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    (src / "version.txt").write_text("0.0.0-fake\n")
    # As DeepSpeed's tests/conftest.py does: the checkout's directory goes first on sys.path.
    (src / "tests" / "conftest.py").write_text(
        "import sys, os\nsys.path.insert(1, os.path.abspath(os.path.dirname(os.path.dirname(__file__))))\n")
    (src / "tests" / "unit" / "which" ).mkdir()
    (src / "tests" / "unit" / "which" / "test_which_deepspeed.py").write_text(textwrap.dedent('''
        import os
        import deepspeed

        def test_package():
            from_checkout = os.path.dirname(deepspeed.__file__).startswith(os.environ["FAKE_SRC"])
            assert from_checkout == (os.environ["EXPECT_DEEPSPEED"] == "checkout"), deepspeed.__file__
            if not from_checkout:
                # The checkout's top-level accelerator package: the installed one stands in.
                import accelerator.real_accelerator as ra
                assert os.path.realpath(ra.__file__).startswith(os.path.realpath(os.path.dirname(deepspeed.__file__)))
        '''))
    return src


def test_table_counts_and_exit_status(fake_src, tmp_path):
    out = tmp_path / "out"
    r = _run(["--card", "mlu", "--out", out, "--test-timeout", "5", fake_src, "unit/test_fake.py",
              "unit/more"], env_extra={"CARDSIM_DEVICES": "3"}, timeout=300)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    rows = _table(r.stdout)
    assert set(rows) == {"unit/test_fake.py", "unit/more", "TOTAL"}
    fake = rows["unit/test_fake.py"]
    # test_hang fails on the per-test limit and the session goes on to test_after_hang.
    assert (fake["passed"], fake["failed"], fake["skipped"], fake["errors"]) == (3, 2, 1, 1), r.stdout
    more = rows["unit/more"]
    assert (more["passed"], more["failed"], more["skipped"], more["errors"]) == (2, 0, 0, 0)
    log = (out / "unit_test_fake.py.log").read_text()
    assert "timed out after 5 s (cardsim per-test limit" in log
    cases = {c.get("name"): {e.tag for e in c} for c in ET.parse(out / "unit_test_fake.py.xml").iter("testcase")}
    assert cases["test_hang"] == {"failure"} and cases["test_after_hang"] == set()
    assert "8 card" not in log and "3 card(s) in 'cnmon -l'" in log
    assert _junit_counts(out / "unit_test_fake.py.xml") == {k: fake[k] for k in ("passed", "failed", "skipped", "errors")}
    assert (out / "table.txt").read_text().splitlines()[0].split() == COLUMNS

    # Only passing paths: exit status 0.
    r = _run(["--out", out, fake_src, "unit/more"], timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert _table(r.stdout)["TOTAL"]["passed"] == 2


@pytest.mark.parametrize("against", ["installed", "checkout", None])
def test_which_deepspeed_package_is_tested(fake_src, tmp_path, against):
    # By default the installed package runs the checkout's tests, although the checkout's
    # conftest puts the checkout first on sys.path; --deepspeed checkout tests the checkout's.
    args = ["--out", tmp_path] + (["--deepspeed", against] if against else []) + [fake_src, "unit/which"]
    r = _run(args, env_extra={"FAKE_SRC": str(fake_src), "EXPECT_DEEPSPEED": against or "installed"},
             timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert _table(r.stdout)["unit/which"]["passed"] == 1
    header = [ln for ln in r.stdout.splitlines() if ln.startswith("== DeepSpeed tests on")][-1]
    if against == "checkout":
        assert f"DeepSpeed 0.0.0-fake from {fake_src}" in header, header
    else:
        import deepspeed
        assert f"DeepSpeed {deepspeed.__version__} (installed) with the tests of {fake_src} (0.0.0-fake)" in header
        assert "the tests come from DeepSpeed 0.0.0-fake" in r.stderr


def test_wall_limit_and_usage_errors(fake_src, tmp_path):
    r = _run(["--out", tmp_path, "--test-timeout", "0", "--path-timeout", "3", fake_src,
              "unit/test_fake.py::test_hang"], timeout=300)
    assert r.returncode == 1
    row = _table(r.stdout)["unit/test_fake.py::test_hang"]
    assert "wall limit 3 s hit" in row["note"]
    for args in (["--card", "cuda", fake_src], ["--deepspeed", "pip", fake_src], [tmp_path], [fake_src, "unit/no_such_dir"], []):
        r = _run(args, timeout=60)
        assert r.returncode == 2, (args, r.stdout, r.stderr)


# ---- DeepSpeed's own tests ----------------------------------------------------------------

def _deepspeed_src() -> pathlib.Path:
    value = os.environ.get("CARDSIM_DEEPSPEED_SRC", "")
    if not value:
        pytest.skip("CARDSIM_DEEPSPEED_SRC is not set: point it at a DeepSpeed source checkout "
                    "(with tests/unit) to run DeepSpeed's tests through the script")
    src = pathlib.Path(value)
    if not (src / "tests" / "unit" / "common.py").is_file():
        pytest.skip(f"CARDSIM_DEEPSPEED_SRC={value} is not a DeepSpeed source checkout "
                    "(no tests/unit/common.py)")
    return src


@pytest.mark.parametrize("card", ["mlu", "supa"])
def test_deepspeed_selection(card, tmp_path):
    src = _deepspeed_src()
    # One accelerator-free test module and one two-rank test through DeepSpeed's harness,
    # which finds the cards by itself (brsmi for supa, the plugin's cnmon count for mlu).
    paths = ["unit/v1/accelerator", "unit/comm/test_dist.py::TestDistArgs"]
    r = _run(["--card", card, "--out", tmp_path, src, *paths], timeout=900)
    assert r.returncode == 0, r.stdout[-5000:] + r.stderr[-3000:]
    rows = _table(r.stdout)
    assert set(rows) == {*paths, "TOTAL"}
    for p in paths:
        slug = re.sub(r"[^A-Za-z0-9._-]", "_", p)
        counts = _junit_counts(tmp_path / f"{slug}.xml")
        assert counts == {k: rows[p][k] for k in counts}
        assert rows[p]["failed"] == rows[p]["errors"] == 0
    assert rows["unit/comm/test_dist.py::TestDistArgs"]["passed"] >= 1
    assert rows["unit/v1/accelerator"]["passed"] >= 1
