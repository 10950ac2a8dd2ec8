"""The cost descriptors kernels hand the timing model: what an operator reads and writes,
and the data type its arithmetic is timed in. Observed through the activity records
(name, simulated start and end, flops, bytes read + written) of the card's timeline."""
import pytest
import torch


N = 1 << 20  # elements: large enough that every kernel here is timed by its traffic or work


PS = 1e-3  # ns: durations come as picoseconds / 1000, compare them to the picosecond


def _one(launched, fn, prefix):
    ks = [k for k in launched(fn) if k[0].startswith(prefix)]
    assert len(ks) == 1, ks
    return ks[0]


# ---- out= forms write their out argument, they do not read it --------------------------

def test_out_form_reads_its_inputs_and_only_writes_its_output(card, dm, launched):
    a = torch.randn(N, device=card)
    b = torch.randn(N, device=card)
    c = torch.empty(N, device=card)
    functional = _one(launched, lambda: torch.add(a, b), "aten::add")
    out_form = _one(launched, lambda: torch.add(a, b, out=c), "aten::add.out")
    nbytes = 4 * N
    assert functional[3] == 3 * nbytes            # a and b read, the result written
    assert out_form[3] == 3 * nbytes, out_form    # not 4: c is written, never read
    assert out_form[2] == functional[2]
    assert out_form[1] == pytest.approx(functional[1], abs=PS)   # same traffic, same time


def test_out_argument_that_is_also_an_input_is_still_read(card, dm, launched):
    a = torch.randn(N, device=card)
    b = torch.randn(N, device=card)
    k = _one(launched, lambda: torch.add(a, b, out=a), "aten::add.out")
    assert k[3] == 3 * 4 * N   # a read as self, b read, a written


def test_in_place_form_reads_and_writes_its_target(card, dm, launched):
    a = torch.randn(N, device=card)
    k = _one(launched, lambda: a.exp_(), "aten::exp_")
    assert k[3] == 2 * 4 * N


def test_reduction_out_form_counts_neither_bytes_nor_work_for_its_output(card, dm, launched):
    x = torch.randn(1024, 1024, device=card)
    o = torch.empty(1024, device=card)
    functional = _one(launched, lambda: torch.sum(x, dim=0), "aten::sum")
    out_form = _one(launched, lambda: torch.sum(x, dim=0, out=o), "aten::sum.IntList_out")
    assert (out_form[2], out_form[3]) == (functional[2], functional[3])
    assert out_form[3] == 4 * (1024 * 1024 + 1024)
    assert out_form[1] == pytest.approx(functional[1], abs=PS)


def test_two_output_out_form(card, dm, launched):
    x = torch.randn(1024, 1024, device=card)
    vals, idx = torch.empty(1024, device=card), torch.empty(1024, dtype=torch.long, device=card)
    k = _one(launched, lambda: torch.max(x, dim=1, out=(vals, idx)), "aten::max.dim_max")
    assert k[3] == 4 * 1024 * 1024 + (4 + 8) * 1024   # x read; values and indices written


# ---- fp32 matmuls run as TF32 exactly where PyTorch would use TF32 ------------------------

M = 2048  # 2 x 2048^3 flops: compute-bound on every preset, in fp32 and in TF32
M_BF16 = 512


def _reset_fp32_precision():
    """PyTorch's defaults, whichever API changed them (the legacy matmul precision is
    remembered apart from fp32_precision, so it is reset first)."""
    torch.set_float32_matmul_precision("highest")
    torch.backends.fp32_precision = "none"
    torch.backends.cuda.matmul.fp32_precision = "none"


@pytest.fixture
def fp32_precision_restored():
    """Every scenario starts from PyTorch's defaults and leaves them so."""
    _reset_fp32_precision()
    yield
    _reset_fp32_precision()
    assert torch.get_float32_matmul_precision() == "highest"
    assert torch.backends.cuda.matmul.allow_tf32 is False


# Each: how a program asks for (or refuses) TF32 matmuls, and whether PyTorch then uses it.
SCENARIOS = [
    ("default", lambda: None, False),
    ("allow_tf32", lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True), True),
    ("allow_tf32 off", lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", False), False),
    ("precision high", lambda: torch.set_float32_matmul_precision("high"), True),
    ("precision medium", lambda: torch.set_float32_matmul_precision("medium"), True),
    ("precision highest", lambda: torch.set_float32_matmul_precision("highest"), False),
    ("cuda.matmul tf32", lambda: setattr(torch.backends.cuda.matmul, "fp32_precision", "tf32"), True),
    ("cuda.matmul ieee", lambda: setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee"), False),
    ("generic tf32", lambda: setattr(torch.backends, "fp32_precision", "tf32"), True),
    ("generic tf32, cuda.matmul ieee", lambda: (setattr(torch.backends, "fp32_precision", "tf32"),
                                                 setattr(torch.backends.cuda.matmul, "fp32_precision", "ieee")), False),
    ("generic ieee, precision high", lambda: (torch.set_float32_matmul_precision("high"),
                                              setattr(torch.backends, "fp32_precision", "ieee")), True),
]


def _matmul_ns(card, launched, dtype=torch.float32, m=M):
    a = torch.randn(m, m, device=card, dtype=dtype)
    b = torch.randn(m, m, device=card, dtype=dtype)
    k = _one(launched, lambda: torch.mm(a, b), "aten::mm")
    assert k[2] == 2.0 * m ** 3
    return k[1]


@pytest.mark.usefixtures("fp32_precision_restored")
def test_fp32_matmul_is_timed_as_tf32_exactly_where_pytorch_uses_tf32(card, dm, launched):
    props = dm.get_device_properties(0)
    fp32_ns = _matmul_ns(card, launched)
    torch.set_float32_matmul_precision("high")
    tf32_ns = _matmul_ns(card, launched)
    if props.peak_tf32_flops > 0:
        # Compute-bound both ways: at best the peaks' ratio faster (whole waves cost a little).
        ratio = props.peak_fp32_flops / props.peak_tf32_flops
        assert 0.95 * ratio * fp32_ns <= tf32_ns < 0.8 * fp32_ns, (tf32_ns, fp32_ns, ratio)
    else:
        assert tf32_ns == pytest.approx(fp32_ns, abs=PS)   # no TF32 units: nothing changes
    for name, setup, uses_tf32 in SCENARIOS:
        _reset_fp32_precision()
        setup()
        want = tf32_ns if uses_tf32 else fp32_ns
        assert _matmul_ns(card, launched) == pytest.approx(want, abs=PS), name


@pytest.mark.usefixtures("fp32_precision_restored")
def test_tf32_setting_leaves_other_dtypes_and_elementwise_work_alone(card, dm, launched):
    a = torch.randn(N, device=card)
    # A smaller bf16 product (the setting must leave any alone): a host without bf16
    # instructions (AVX2 only) takes about a minute for one of M x M.
    half = _matmul_ns(card, launched, torch.bfloat16, m=M_BF16)
    ew = _one(launched, lambda: torch.exp(a), "aten::exp")[1]
    torch.set_float32_matmul_precision("high")
    assert _matmul_ns(card, launched, torch.bfloat16, m=M_BF16) == pytest.approx(half, abs=PS)
    assert _one(launched, lambda: torch.exp(a), "aten::exp")[1] == pytest.approx(ew, abs=PS)
