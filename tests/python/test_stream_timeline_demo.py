"""The demo program end to end: results, timeline, determinism, what-if overrides, errors."""
import re
import subprocess


def run(demo_bin, *args):
    return subprocess.run([str(demo_bin), *args], capture_output=True, text=True, timeout=120)


def timeline(stdout):
    """Rows of the printed timeline: (stream, start_us, end_us, what)."""
    rows = []
    for line in stdout.splitlines():
        m = re.match(r"\s+(compute|side)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(.+)$", line)
        if m:
            rows.append((m.group(1), float(m.group(2)), float(m.group(3)), m.group(5)))
    return rows


def span_us(stdout):
    m = re.search(r"device span\s+([\d.]+) us", stdout)
    assert m, stdout
    return float(m.group(1))


def test_demo_checks_its_results_and_prints_both_streams(demo_bin):
    r = run(demo_bin)
    assert r.returncode == 0, r.stderr
    assert "MLU370-X8" in r.stdout
    assert re.search(r"max abs error [\d.e+-]+ \(ok\)", r.stdout)
    rows = timeline(r.stdout)
    assert {s for s, *_ in rows} == {"compute", "side"}
    assert any("gemm" in w for *_, w in rows)
    # Within a stream, work runs in order and never overlaps.
    for stream in ("compute", "side"):
        ends = [(a, b) for s, a, b, _ in rows if s == stream]
        for (a0, b0), (a1, b1) in zip(ends, ends[1:]):
            assert a1 >= b0 - 1e-9
    # The scale kernel waits on the side stream's event.
    side_end = max(b for s, a, b, w in rows if s == "side" and "axpb" in w)
    scale_start = min(a for s, a, b, w in rows if "scale" in w)
    assert scale_start >= side_end - 1e-9
    # The streams overlapped: the span is shorter than their summed busy time.
    busy = sum(b - a for _, a, b, _ in rows)
    assert span_us(r.stdout) < busy


def test_demo_is_deterministic(demo_bin):
    a, b = run(demo_bin), run(demo_bin)
    assert a.returncode == b.returncode == 0
    assert a.stdout == b.stdout


def test_what_if_overrides_change_the_timeline(demo_bin):
    base = span_us(run(demo_bin).stdout)
    slow_link = run(demo_bin, "--set", "host_link.pcie_generation=3")
    assert slow_link.returncode == 0, slow_link.stderr
    assert span_us(slow_link.stdout) > 1.5 * base      # copies dominate the demo
    other_card = run(demo_bin, "--preset", "br100")
    assert other_card.returncode == 0, other_card.stderr
    assert "BR100" in other_card.stdout
    assert span_us(other_card.stdout) < base            # PCIe Gen5 and HBM2E


def test_bad_preset_and_key_are_named(demo_bin):
    r = run(demo_bin, "--preset", "mlu371")
    assert r.returncode != 0
    assert "mlu371" in r.stderr and "mlu370-x8" in r.stderr and "br100" in r.stderr
    r = run(demo_bin, "--set", "memory.bandwidht=1TB/s")
    assert r.returncode != 0
    assert "memory.bandwidht" in r.stderr and "bandwidth" in r.stderr
    r = run(demo_bin, "--set", "memory.bandwidth=1 TB")
    assert r.returncode != 0
    assert "device.memory.bandwidth" in r.stderr
