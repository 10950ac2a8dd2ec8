"""Prints the per-path table of scripts/deepspeed-tests.sh from pytest's junit files.

Input: a tab-separated manifest, one line per test path:
    path <TAB> junit-xml <TAB> pytest exit code <TAB> wall seconds <TAB> wall limit seconds
    [<TAB> note]
Output: one row per path (passed, failed, skipped, errors, wall time, note) and a total
line. Exit status 1 if any test failed or errored, or a path did not finish (no junit
file, pytest interrupted or crashed, wall limit hit); else 0.

A test case counts once: failed if it has a <failure>, else an error if it has an <error>
(an error in setup or teardown, a collection error), else skipped if it has a <skipped>
(skips and expected failures), else passed.
"""
from __future__ import annotations

import sys
import xml.etree.ElementTree as ET

# pytest's exit codes: 0 all passed, 1 some failed, 2 interrupted, 3 internal error,
# 4 usage error, 5 no tests collected. timeout(1) exits 124, or 128+9 after SIGKILL.
_EXIT_NOTES = {2: "interrupted", 3: "pytest internal error", 4: "pytest usage error"}


def count(xml_path: str) -> dict[str, int]:
    root = ET.parse(xml_path).getroot()
    n = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    for case in root.iter("testcase"):
        tags = {child.tag for child in case}
        if "failure" in tags:
            n["failed"] += 1
        elif "error" in tags:
            n["errors"] += 1
        elif "skipped" in tags:
            n["skipped"] += 1
        else:
            n["passed"] += 1
    return n


def _wall(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 60}m{s % 60:02d}s"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: junit_table.py MANIFEST", file=sys.stderr)
        return 2
    rows, bad = [], False
    total = {"passed": 0, "failed": 0, "skipped": 0, "errors": 0}
    total_wall = 0.0
    with open(argv[1]) as f:
        for line in f:
            if not line.strip():
                continue
            fields = line.rstrip("\n").split("\t")
            path, xml_path, rc, wall, limit = fields[:5]
            rc, wall, limit = int(rc), float(wall), int(limit)
            total_wall += wall
            notes = [fields[5]] if len(fields) > 5 and fields[5] else []
            try:
                n = count(xml_path)
            except (OSError, ET.ParseError):
                n = None
                notes.append("no junit report")
            if rc in (124, 137):
                notes.append(f"wall limit {limit} s hit")
            elif rc == 5:
                notes.append("no tests collected")
            elif rc in _EXIT_NOTES:
                notes.append(_EXIT_NOTES[rc])
            elif rc not in (0, 1):
                notes.append(f"exit code {rc}")
            if n is None:
                bad = True
                cells = ["-"] * 4
            else:
                for k in total:
                    total[k] += n[k]
                bad |= n["failed"] > 0 or n["errors"] > 0
                cells = [str(n[k]) for k in ("passed", "failed", "skipped", "errors")]
            bad |= rc not in (0, 1, 5)
            rows.append([path, *cells, _wall(wall), "; ".join(notes)])
    rows.append(["TOTAL", *(str(total[k]) for k in ("passed", "failed", "skipped", "errors")),
                 _wall(total_wall), ""])
    header = ["path", "passed", "failed", "skipped", "errors", "wall", "note"]
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]

    def fmt(r):
        cells = [r[0].ljust(widths[0])] + [r[i].rjust(widths[i]) for i in range(1, 6)] + [r[6]]
        return "  ".join(cells).rstrip()

    print(fmt(header))
    print("  ".join("-" * w for w in widths[:6]) + "  " + "-" * max(4, widths[6]))
    for r in rows[:-1]:
        print(fmt(r))
    print("  ".join("-" * w for w in widths[:6]) + "  " + "-" * max(4, widths[6]))
    print(fmt(rows[-1]))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
