"""scaled_dot_product_attention on the card: the backend the CPU would choose (fused flash
attention where it applies, honouring torch.nn.attention.sdpa_kernel), one kernel each way,
values bit for bit the CPU's, timed as attention (the products over the unmasked score
pairs, the score matrix never in memory)."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

FWD = "aten::_scaled_dot_product_flash_attention_for_cpu"
BWD = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"


def _qkv(shape_q, shape_kv, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape_q, generator=g).to(dtype)
    k = torch.randn(*shape_kv, generator=g).to(dtype)
    v = torch.randn(*shape_kv, generator=g).to(dtype)
    return q, k, v


def _run(q, k, v, **kw):
    """Forward and backward of SDPA on the tensors' device: output and the three gradients."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(q, k, v, **kw)
    g = torch.Generator().manual_seed(7)
    out.backward(torch.randn(out.shape, generator=g).to(out.dtype).to(out.device))
    return [t.detach().cpu() for t in (out, q.grad, k.grad, v.grad)]


MASK_CASES = {
    "plain": lambda L, S: {},
    "causal": lambda L, S: {"is_causal": True},
    "bool_mask": lambda L, S: {"attn_mask": torch.rand(L, S, generator=torch.Generator().manual_seed(3)) > 0.3},
    "float_mask": lambda L, S: {"attn_mask": torch.randn(L, S, generator=torch.Generator().manual_seed(4))},
    "scale": lambda L, S: {"scale": 0.3},
}


@pytest.mark.parametrize("case", sorted(MASK_CASES))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_forward_and_backward_equal_the_cpu_bit_for_bit(card, launched, case, dtype):
    q, k, v = _qkv((2, 3, 16, 8), (2, 3, 24, 8), dtype)
    kw = MASK_CASES[case](16, 24)
    want = _run(q, k, v, **kw)
    kw_dev = {n: (t.to(card) if isinstance(t, torch.Tensor) else t) for n, t in kw.items()}
    got = []
    names = [k[0] for k in launched(lambda: got.extend(_run(q.to(card), k.to(card), v.to(card), **kw_dev)))]
    for w, g, what in zip(want, got, ("out", "dq", "dk", "dv")):
        assert torch.equal(w, g), (what, (w.float() - g.float()).abs().max())
    # The CPU's choice is flash here: one fused kernel each way, no score matrix made.
    assert names.count(FWD) == 1 and names.count(BWD) == 1, names
    assert not [n for n in names if "bmm" in n or "softmax" in n], names


def test_the_users_backend_choice_is_honoured(card, launched):
    q, k, v = (t.to(card) for t in _qkv((2, 2, 16, 8), (2, 2, 16, 8)))
    with sdpa_kernel(SDPBackend.MATH):
        names = [n for n, *_ in launched(lambda: F.scaled_dot_product_attention(q, k, v))]
    assert FWD not in names and any("bmm" in n for n in names), names
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        names = [n for n, *_ in launched(lambda: F.scaled_dot_product_attention(q, k, v))]
    assert names == [FWD], names
    # Dropout is beyond the CPU's flash kernel: the math composite, as on the CPU.
    names = [n for n, *_ in launched(lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5))]
    assert FWD not in names, names
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), pytest.raises(RuntimeError, match="[Nn]o available kernel"):
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)


def _pairs(L, S, causal):
    """Unmasked (query, key) pairs, counted from PyTorch's own causal mask."""
    return int(torch.ones(L, S, dtype=torch.bool).tril().sum()) if causal else L * S


@pytest.mark.parametrize("L,S", [(32, 32), (16, 48), (48, 16)])
@pytest.mark.parametrize("causal", [False, True])
def test_cost_counts_the_products_over_unmasked_pairs(card, launched, L, S, causal):
    B, H, E, Ev = 2, 3, 16, 16   # the CPU flash kernel needs one head size for q, k and v
    q = torch.randn(B, H, L, E, device=card)
    k = torch.randn(B, H, S, E, device=card)
    v = torch.randn(B, H, S, Ev, device=card)
    ks = launched(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
    assert [x[0] for x in ks] == [FWD]
    flops = 2 * B * H * _pairs(L, S, causal) * (E + Ev)
    assert ks[0][2] == flops
    # Read q, k, v; written: the output and the fp32 log-sum-exp per query row.
    assert ks[0][3] == 4 * (B * H * (L * E + S * E + S * Ev) + B * H * L * Ev + B * H * L)

    qg, kg, vg = (t.detach().requires_grad_() for t in (q, k, v))
    out = F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal)
    grad = torch.ones_like(out)
    bwd = [x for x in launched(lambda: out.backward(grad)) if x[0] == BWD]
    assert len(bwd) == 1 and bwd[0][2] == 2.5 * flops   # five products to the forward's two


def test_causal_attention_takes_about_half_the_time_when_compute_bound(card, launched):
    # Long sequences: the products, not the operands' bytes, bound the kernel. Each kernel
    # also has a fixed cost (dispatch, fill and drain), measured on a tiny one and set aside.
    B, H, L, E = 1, 4, 2048, 32
    q, k, v = (torch.randn(B, H, L, E, device=card) for _ in range(3))
    tiny = [t[:, :, :16] for t in (q, k, v)]
    floor = launched(lambda: F.scaled_dot_product_attention(*tiny))[0][1]
    full = launched(lambda: F.scaled_dot_product_attention(q, k, v))[0]
    causal = launched(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))[0]
    share = _pairs(L, L, True) / (L * L)   # (L + 1) / 2L
    assert causal[2] == pytest.approx(share * full[2])
    ratio = (causal[1] - floor) / (full[1] - floor)
    assert 0.9 * share < ratio < 1.1 * share, (causal[1], full[1], floor)


def test_a_captured_graph_replays_attention_on_new_inputs(card, dm):
    q, k, v = _qkv((2, 2, 16, 8), (2, 2, 16, 8))
    sq, sk, sv = (t.to(card) for t in (q, k, v))
    side = dm.Stream()
    side.wait_stream(dm.current_stream())
    with dm.stream(side):
        F.scaled_dot_product_attention(sq, sk, sv, is_causal=True)   # warm-up off the graph
    dm.current_stream().wait_stream(side)
    g = dm.MLUGraph() if card == "mlu" else dm.SUPAGraph()
    with dm.graph(g):
        out = F.scaled_dot_product_attention(sq, sk, sv, is_causal=True)
    q2, k2, v2 = _qkv((2, 2, 16, 8), (2, 2, 16, 8), seed=5)
    for dst, src in ((sq, q2), (sk, k2), (sv, v2)):
        dst.copy_(src.to(card))
    g.replay()
    assert torch.equal(out.cpu(), F.scaled_dot_product_attention(q2, k2, v2, is_causal=True))
