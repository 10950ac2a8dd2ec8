"""Numerics of ATen operators on the card against the host CPU: forward values and autograd
gradients for fp32, bf16 and fp16, plus views, in-place ops, out= resizing, copies between
devices, dtype conversions, factories, integer/bool tensors, _foreach ops, torch.optim and a
small training loop. Every test is written against the `card`/`dm` fixtures, so the same file
runs as mlu (default) and as supa (CARDSIM_TEST_CARD=supa)."""
import copy
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
FLOAT_DTYPES = [F32, BF16, F16]
DT_ID = {F32: "fp32", BF16: "bf16", F16: "fp16"}

# Forward tolerances by dtype (the reference runs in the same dtype on the CPU).
TOL = {
    F32: dict(rtol=1e-5, atol=1e-5),
    BF16: dict(rtol=1.6e-2, atol=1e-2),
    F16: dict(rtol=1e-3, atol=1e-3),
}
# Used when the CPU has no kernel for the dtype and the reference is computed in fp32.
LOOSE = {BF16: dict(rtol=5e-2, atol=5e-2), F16: dict(rtol=1e-2, atol=1e-2)}


def tol_for(dtype, scale=1.0):
    t = TOL.get(dtype, dict(rtol=0, atol=0))
    return {k: v * scale for k, v in t.items()}


# --------------------------------------------------------------------------------------
# Input specifications of the operator table
# --------------------------------------------------------------------------------------
# ("randn", shape, layout)      float, normal
# ("pos", shape, layout)        float in [0.5, 1.5)  (log, sqrt, division, pow base)
# ("int", shape, high)          int64 in [0, high)
# ("target", shape, high)       int64 class labels with some entries == -100 (ignore_index)
# ("bool", shape)               random mask
# ("perm", shape, k)            per row, k distinct column indices of a row of length shape[1]
# layout "c" contiguous, "t" transposed view of the last two dims, "s" stride-2 slice of the
# last dim: the op then sees a non-contiguous tensor, and gradients flow to the base.


def R(*shape, layout="c"):
    return ("randn", shape, layout)


def P(*shape, layout="c"):
    return ("pos", shape, layout)


def I(high, *shape):
    return ("int", shape, high)


def T(high, *shape):
    return ("target", shape, high)


def B(*shape):
    return ("bool", shape)


def PERM(rows, n, k):
    return ("perm", (rows, n), k)


def _base(spec, dtype, g):
    kind, shape = spec[0], list(spec[1])
    if kind in ("randn", "pos"):
        layout = spec[2]
        if layout == "t":
            shape[-1], shape[-2] = shape[-2], shape[-1]
        elif layout == "s":
            shape[-1] *= 2
        if kind == "randn":
            return torch.randn(shape, generator=g).to(dtype), True
        return (torch.rand(shape, generator=g) + 0.5).to(dtype), True
    if kind == "int":
        return torch.randint(0, spec[2], shape, generator=g), False
    if kind == "target":
        t = torch.randint(0, spec[2], shape, generator=g)
        t[torch.rand(shape, generator=g) < 0.3] = -100
        return t, False
    if kind == "bool":
        return torch.rand(shape, generator=g) > 0.5, False
    if kind == "perm":
        rows, n = shape
        return torch.rand(rows, n, generator=g).argsort(dim=1)[:, : spec[2]].contiguous(), False
    raise AssertionError(kind)


def _layout(spec, t):
    if spec[0] in ("randn", "pos"):
        if spec[2] == "t":
            return t.transpose(-1, -2)
        if spec[2] == "s":
            return t[..., ::2]
    return t


def _flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    res = []
    for o in out:
        res.extend(_flat(o))
    return res


def _forward_backward(fn, specs, bases, is_float, device, grad, seed):
    leaves = []
    for b, f in zip(bases, is_float):
        leaf = b.detach().clone().to(device)
        if grad and f:
            leaf.requires_grad_(True)
        leaves.append(leaf)
    args = [_layout(s, leaf) for s, leaf in zip(specs, leaves)]
    outs = _flat(fn(*args))
    grads = None
    if grad:
        diff_outs = [o for o in outs if o.requires_grad]
        wrt = [leaf for leaf in leaves if leaf.requires_grad]
        assert diff_outs and wrt
        g = torch.Generator().manual_seed(seed + 1)
        gos = [torch.randn(o.shape, generator=g).to(o.dtype).to(device) for o in diff_outs]
        grads = torch.autograd.grad(diff_outs, wrt, gos, allow_unused=True)
    return [o.detach() for o in outs], grads


def _assert_match(dev, ref, device_type, dtype, tol, what):
    assert dev.device.type == device_type, f"{what}: result on {dev.device}"
    dev = dev.cpu()
    if ref.dtype != dev.dtype and ref.dtype == F32 and dev.is_floating_point():
        dev = dev.float()  # fp32 reference for a dtype the CPU lacks
    if ref.is_floating_point():
        torch.testing.assert_close(dev, ref, **tol, equal_nan=True, msg=lambda m: f"{what}: {m}")
    else:
        assert dev.dtype == ref.dtype, what
        assert torch.equal(dev, ref), f"{what}: {dev} != {ref}"


def check_op(card, fn, specs, dtype, grad=True, tol_scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    made = [_base(s, dtype, g) for s in specs]
    bases = [m[0] for m in made]
    is_float = [m[1] for m in made]
    tol = tol_for(dtype, tol_scale)
    try:
        ref_out, ref_grads = _forward_backward(fn, specs, bases, is_float, "cpu", grad, seed)
    except (RuntimeError, NotImplementedError) as e:  # no CPU kernel for this dtype
        if dtype == F32 or "not implemented for" not in str(e):
            raise
        bases32 = [b.float() if f else b for b, f in zip(bases, is_float)]
        ref_out, ref_grads = _forward_backward(fn, specs, bases32, is_float, "cpu", grad, seed)
        tol = {k: v * tol_scale for k, v in LOOSE[dtype].items()}
    dev_out, dev_grads = _forward_backward(fn, specs, bases, is_float, card, grad, seed)
    assert len(dev_out) == len(ref_out)
    for i, (d, r) in enumerate(zip(dev_out, ref_out)):
        assert d.shape == r.shape, f"output {i}: shape {tuple(d.shape)} != {tuple(r.shape)}"
        _assert_match(d, r, card, dtype, tol, f"output {i}")
    if grad:
        gtol = {k: v * 2 for k, v in tol.items()}
        for i, (d, r) in enumerate(zip(dev_grads, ref_grads)):
            assert (d is None) == (r is None), f"grad {i}: one side has no gradient"
            if d is not None:
                _assert_match(d, r, card, dtype, gtol, f"grad {i}")


# --------------------------------------------------------------------------------------
# The operator table: (id, fn, input specs, kwargs)
# --------------------------------------------------------------------------------------
def _case(name, fn, specs, grad=True, tol=1.0, dtypes=None):
    return (name, fn, specs, grad, tol, dtypes)


NOGRAD = dict(grad=False)

FLOAT_CASES = [
    # elementwise arithmetic
    _case("add", lambda a, b: a + b, [R(4, 5), R(4, 5)]),
    _case("add_bcast", lambda a, b: a + b, [R(3, 4, 5), R(5)]),
    _case("add_bcast_outer", lambda a, b: a + b, [R(4, 1), R(1, 5)]),
    _case("add_alpha", lambda a, b: torch.add(a, b, alpha=2.5), [R(4, 5), R(4, 5)]),
    _case("add_scalar", lambda a: a + 3, [R(4, 5)]),
    _case("sub", lambda a, b: a - b, [R(4, 5), R(5)]),
    _case("rsub_scalar", lambda a: 2 - a, [R(4, 5)]),
    _case("mul", lambda a, b: a * b, [R(4, 5), R(4, 5)]),
    _case("mul_bcast", lambda a, b: a * b, [R(2, 3, 4), R(3, 1)]),
    _case("mul_scalar", lambda a: a * 2.5, [R(4, 5)]),
    _case("div", lambda a, b: a / b, [R(4, 5), P(4, 5)]),
    _case("div_bcast", lambda a, b: a / b, [R(4, 5), P(4, 1)]),
    _case("div_scalar", lambda a: a / 3, [R(4, 5)]),
    _case("rdiv_scalar", lambda a: 1 / a, [P(4, 5)]),
    _case("div_floor", lambda a, b: torch.div(a, b, rounding_mode="floor"), [R(4, 5), P(4, 5)], **NOGRAD),
    _case("pow_scalar", lambda a: a ** 2, [R(4, 5)]),
    _case("pow_frac", lambda a: a ** 1.5, [P(4, 5)]),
    _case("pow_tensor", lambda a, b: a ** b, [P(4, 5), R(4, 5)]),
    _case("pow_scalar_base", lambda a: 2 ** a, [R(4, 5)]),
    _case("exp", torch.exp, [R(4, 5)]),
    _case("log", torch.log, [P(4, 5)]),
    _case("sqrt", torch.sqrt, [P(4, 5)]),
    _case("rsqrt", torch.rsqrt, [P(4, 5)]),
    _case("abs", torch.abs, [R(4, 5)]),
    _case("neg", torch.neg, [R(4, 5)]),
    _case("reciprocal", torch.reciprocal, [P(4, 5)]),
    _case("clamp", lambda a: torch.clamp(a, -0.5, 0.7), [R(6, 7)]),
    _case("clamp_min", lambda a: a.clamp(min=0.1), [R(6, 7)]),
    _case("clamp_tensor", lambda a, lo: torch.clamp(a, min=lo), [R(6, 7), R(7)]),
    _case("maximum", torch.maximum, [R(4, 5), R(4, 5)]),
    _case("minimum", torch.minimum, [R(4, 5), R(5)]),
    _case("where", lambda m, a, b: torch.where(m, a, b), [B(4, 5), R(4, 5), R(4, 5)]),
    _case("where_scalar", lambda m, a: torch.where(m, a, 0.0), [B(4, 5), R(4, 5)]),
    _case("masked_fill", lambda a, m: a.masked_fill(m, -1.5), [R(4, 5), B(4, 5)]),
    _case("masked_fill_bcast", lambda a, m: a.masked_fill(m, float("-inf")).softmax(-1),
          [R(2, 4, 5), B(4, 5)], tol=2),
    _case("gt", lambda a, b: a > b, [R(4, 5), R(4, 5)], **NOGRAD),
    _case("lt_scalar", lambda a: a < 0.3, [R(4, 5)], **NOGRAD),
    _case("ge_le", lambda a, b: (a >= b, a <= b), [R(4, 5), R(5)], **NOGRAD),
    _case("eq_ne", lambda a: (a == a[0], a != a[:, :1]), [R(4, 5)], **NOGRAD),
    _case("addcmul", lambda a, b, c: torch.addcmul(a, b, c, value=0.5), [R(4, 5), R(4, 5), R(4, 5)]),
    _case("addcdiv", lambda a, b, c: torch.addcdiv(a, b, c, value=0.5), [R(4, 5), R(4, 5), P(4, 5)]),
    _case("lerp", lambda a, b: torch.lerp(a, b, 0.3), [R(4, 5), R(4, 5)]),
    _case("erf_sin_cos", lambda a: (torch.erf(a), torch.sin(a), torch.cos(a)), [R(4, 5)]),
    _case("log1p_expm1", lambda a: (torch.log1p(a), torch.expm1(a)), [P(4, 5)]),
    # activations
    _case("relu", F.relu, [R(6, 7)]),
    _case("gelu", F.gelu, [R(6, 7)]),
    _case("gelu_tanh", lambda a: F.gelu(a, approximate="tanh"), [R(6, 7)]),
    _case("silu", F.silu, [R(6, 7)]),
    _case("sigmoid", torch.sigmoid, [R(6, 7)]),
    _case("tanh", torch.tanh, [R(6, 7)]),
    _case("leaky_relu", lambda a: F.leaky_relu(a, 0.1), [R(6, 7)]),
    _case("softmax_last", lambda a: torch.softmax(a, -1), [R(3, 4, 9)]),
    _case("softmax_dim0", lambda a: F.softmax(a, dim=0), [R(5, 6)]),
    _case("log_softmax", lambda a: F.log_softmax(a, dim=-1), [R(3, 4, 9)]),
    _case("log_softmax_dim1", lambda a: F.log_softmax(a, dim=1), [R(3, 4, 9)]),
    # reductions
    _case("sum_all", lambda a: a.sum(), [R(4, 5, 6)], tol=2),
    _case("sum_dim_keepdim", lambda a: a.sum(dim=1, keepdim=True), [R(4, 5, 6)]),
    _case("sum_dims", lambda a: a.sum(dim=(0, 2)), [R(4, 5, 6)], tol=2),
    _case("mean_all", lambda a: a.mean(), [R(4, 5, 6)]),
    _case("mean_dim", lambda a: a.mean(dim=-1), [R(4, 5, 6)]),
    _case("mean_keepdim", lambda a: a.mean(dim=0, keepdim=True), [R(4, 5, 6)]),
    _case("max_all", lambda a: a.max(), [R(4, 7)]),
    _case("max_dim", lambda a: tuple(a.max(dim=1)), [R(4, 7)]),
    _case("min_dim_keepdim", lambda a: tuple(a.min(dim=0, keepdim=True)), [R(4, 7)]),
    _case("argmax_argmin", lambda a: (a.argmax(dim=1), a.argmin(dim=0), a.argmax()), [R(4, 7)], **NOGRAD),
    _case("amax", lambda a: a.amax(dim=-1), [R(4, 7)]),
    _case("norm", lambda a: a.norm(), [R(4, 7)]),
    _case("norm_dim", lambda a: torch.linalg.vector_norm(a, ord=2, dim=1, keepdim=True), [R(4, 7)]),
    _case("norm_p1", lambda a: a.norm(p=1, dim=0), [R(4, 7)]),
    _case("var", lambda a: a.var(dim=1), [R(4, 7)]),
    _case("var_keepdim", lambda a: a.var(dim=0, keepdim=True, unbiased=False), [R(4, 7)]),
    _case("std", lambda a: a.std(dim=-1), [R(4, 7)]),
    _case("std_all", lambda a: a.std(), [R(4, 7)]),
    _case("cumsum", lambda a: torch.cumsum(a, dim=1), [R(4, 7)], tol=2),
    _case("cumsum_dim0", lambda a: a.cumsum(0), [R(4, 7)], tol=2),
    _case("logsumexp", lambda a: torch.logsumexp(a, dim=-1), [R(4, 7)]),
    _case("prod", lambda a: a.prod(dim=1), [P(4, 5)]),
    # matrix products
    _case("mm", torch.mm, [R(8, 16), R(16, 4)], tol=2),
    _case("matmul_batched_bcast", torch.matmul, [R(2, 3, 8, 16), R(16, 5)], tol=2),
    _case("matmul_vec", torch.matmul, [R(8, 16), R(16)], tol=2),
    _case("addmm", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), [R(4), R(8, 16), R(16, 4)], tol=2),
    _case("addmm_matrix_bias", torch.addmm, [R(8, 4), R(8, 16), R(16, 4)], tol=2),
    _case("bmm", torch.bmm, [R(3, 4, 5), R(3, 5, 6)], tol=2),
    _case("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.5), [R(3, 4, 6), R(3, 4, 5), R(3, 5, 6)], tol=2),
    _case("linear", F.linear, [R(2, 7, 16), R(8, 16), R(8)], tol=2),
    _case("linear_nobias", F.linear, [R(5, 16), R(8, 16)], tol=2),
    _case("einsum_bmm", lambda a, b: torch.einsum("bij,bjk->bik", a, b), [R(3, 4, 5), R(3, 5, 6)], tol=2),
    _case("einsum_dot", lambda a, b: torch.einsum("ij,ij->i", a, b), [R(4, 5), R(4, 5)], tol=2),
    _case("einsum_outer", lambda a, b: torch.einsum("i,j->ij", a, b), [R(4), R(5)]),
    _case("mm_transposed", torch.mm, [R(8, 16, layout="t"), R(16, 4, layout="t")], tol=2),
    _case("sdpa_causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
          [R(2, 3, 5, 8), R(2, 3, 5, 8), R(2, 3, 5, 8)], tol=2),
    # normalization and losses
    _case("layer_norm", lambda x, w, b: F.layer_norm(x, (16,), w, b), [R(3, 5, 16), R(16), R(16)], tol=2),
    _case("layer_norm_noaffine", lambda x: F.layer_norm(x, (4, 8)), [R(3, 4, 8)], tol=2),
    _case("rms_norm", lambda x, w: F.rms_norm(x, (16,), w), [R(3, 16), R(16)], tol=2),
    _case("embedding", lambda idx, w: F.embedding(idx, w), [I(10, 4, 6), R(10, 8)], tol=2),
    _case("embedding_padding", lambda idx, w: F.embedding(idx, w, padding_idx=0), [I(10, 4, 6), R(10, 8)], tol=2),
    _case("cross_entropy", lambda x, t: F.cross_entropy(x, t), [R(8, 5), I(5, 8)]),
    _case("cross_entropy_ignore", lambda x, t: F.cross_entropy(x, t, ignore_index=-100), [R(12, 5), T(5, 12)]),
    _case("cross_entropy_smooth", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), [R(8, 5), I(5, 8)]),
    _case("cross_entropy_smooth_ignore", lambda x, t: F.cross_entropy(x, t, label_smoothing=0.2),
          [R(12, 5), T(5, 12)]),
    _case("cross_entropy_sum", lambda x, t: F.cross_entropy(x, t, reduction="sum"), [R(8, 5), I(5, 8)], tol=2),
    _case("cross_entropy_none_3d", lambda x, t: F.cross_entropy(x, t, reduction="none"), [R(2, 5, 3), I(5, 2, 3)]),
    _case("nll_loss", lambda x, t: F.nll_loss(F.log_softmax(x, -1), t), [R(8, 5), I(5, 8)]),
    _case("mse_loss", F.mse_loss, [R(4, 5), R(4, 5)]),
    _case("bce_logits", F.binary_cross_entropy_with_logits, [R(4, 5), P(4, 5)]),
    # views and indexing
    _case("view", lambda a: a.view(3, 20) * 2, [R(4, 5, 3)]),
    _case("reshape_noncontig", lambda a: a.reshape(-1) * 2, [R(4, 6, layout="t")]),
    _case("transpose", lambda a: a.transpose(0, 2) * 2, [R(2, 3, 4)]),
    _case("permute", lambda a: a.permute(2, 0, 1).contiguous(), [R(2, 3, 4)]),
    _case("slice", lambda a: a[1:3, ::2] * 2, [R(4, 7)]),
    _case("select", lambda a: a[:, 2] + a[-1], [R(4, 4)]),
    _case("expand", lambda a: a.expand(3, 4, 5) * 1.5, [R(4, 1)]),
    _case("contiguous", lambda a: a.contiguous(), [R(4, 6, layout="t")]),
    _case("index_select", lambda a, i: torch.index_select(a, 0, i), [R(6, 5), I(6, 9)]),
    _case("gather", lambda a, i: torch.gather(a, 1, i), [R(4, 6), I(6, 4, 3)]),
    _case("scatter", lambda a, i, s: torch.scatter(a, 1, i, s), [R(4, 6), PERM(4, 6, 3), R(4, 3)]),
    _case("scatter_add", lambda a, i, s: a.scatter_add(1, i, s), [R(4, 6), I(6, 4, 5), R(4, 5)]),
    _case("index_adv", lambda a, i: a[i], [R(6, 5), I(6, 8)]),
    _case("index_adv_2d", lambda a, i, j: a[i, j], [R(6, 5), I(6, 7), I(5, 7)]),
    _case("index_mask", lambda a, m: a[m], [R(6, 5), B(6, 5)]),
    _case("index_put_accumulate", lambda a, i, v: a.index_put((i,), v, accumulate=True),
          [R(6, 5), I(6, 8), R(8, 5)]),
    _case("index_add", lambda a, i, s: a.index_add(0, i, s), [R(6, 5), I(6, 8), R(8, 5)]),
    _case("masked_select", torch.masked_select, [R(6, 5), B(6, 5)]),
    _case("cat", lambda a, b: torch.cat([a, b], dim=1), [R(4, 3), R(4, 5)]),
    _case("cat_dim0_noncontig", lambda a, b: torch.cat([a, b]), [R(3, 4, layout="t"), R(2, 4)]),
    _case("stack", lambda a, b: torch.stack([a, b], dim=1), [R(4, 3), R(4, 3)]),
    _case("split", lambda a: tuple(t * (i + 1) for i, t in enumerate(a.split([2, 3], dim=1))), [R(4, 5)]),
    _case("chunk", lambda a: tuple(t * (i + 1) for i, t in enumerate(a.chunk(3, dim=0))), [R(7, 5)]),
    _case("narrow", lambda a: a.narrow(1, 1, 3) * 2, [R(4, 5)]),
    _case("unsqueeze_squeeze", lambda a: a.unsqueeze(1).unsqueeze(-1) * a.unsqueeze(0).unsqueeze(-1).squeeze(-1)[..., None],
          [R(4, 5)]),
    _case("flip_roll", lambda a: (a.flip(0), a.roll(2, dims=1)), [R(4, 5)]),
    _case("tril_triu", lambda a: (a.tril(), a.triu(1)), [R(5, 5)]),
    _case("repeat", lambda a: a.repeat(2, 3), [R(2, 3)]),
    _case("diagonal", lambda a: a.diagonal() * 3, [R(5, 5)]),
    _case("unfold_view", lambda a: a.unfold(1, 3, 2).sum(-1), [R(4, 9)]),
    _case("pad", lambda a: F.pad(a, (1, 2, 0, 1)), [R(3, 4)]),
    _case("topk_sort", lambda a: (a.topk(3, dim=1)[0], a.sort(dim=0, descending=True)[0]), [R(4, 7)]),
    _case("normalize_cosine", lambda a, b: (F.normalize(a, dim=-1), F.cosine_similarity(a, b)), [R(4, 7), R(4, 7)]),
    # non-contiguous inputs through ops
    _case("nc_add", lambda a, b: a + b, [R(5, 6, layout="t"), R(5, 6, layout="s")]),
    _case("nc_exp", torch.exp, [R(5, 6, layout="s")]),
    _case("nc_softmax", lambda a: torch.softmax(a, -1), [R(5, 6, layout="t")]),
    _case("nc_sum", lambda a: a.sum(0), [R(5, 6, layout="t")]),
    _case("nc_layer_norm", lambda x: F.layer_norm(x, (6,)), [R(5, 6, layout="t")], tol=2),
    _case("nc_linear", F.linear, [R(5, 6, layout="s"), R(4, 6, layout="t")], tol=2),
    _case("nc_bmm", torch.bmm, [R(2, 4, 5, layout="t"), R(2, 5, 3, layout="s")], tol=2),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DT_ID[d])
@pytest.mark.parametrize("name,fn,specs,grad,tol,dtypes", FLOAT_CASES, ids=[c[0] for c in FLOAT_CASES])
def test_op_matches_cpu(card, name, fn, specs, grad, tol, dtypes, dtype):
    if dtypes is not None and dtype not in dtypes:
        pytest.skip(f"{name} is not defined for {dtype}")
    check_op(card, fn, specs, dtype, grad=grad, tol_scale=tol)


# Integer and bool tensors (no gradients).
INT_CASES = [
    _case("int_add_sub_mul", lambda a, b: (a + b, a - b, a * b, a * 3, a + 1), [I(10, 4, 5), I(10, 4, 5)]),
    _case("int_floordiv_rem", lambda a, b: (a // (b + 1), a % (b + 1), torch.remainder(a, 3)),
          [I(100, 4, 5), I(10, 4, 5)]),
    _case("int_truediv_promotes", lambda a, b: a / (b + 1), [I(100, 4, 5), I(10, 4, 5)]),
    _case("int_float_promotion", lambda a: (a * 0.5, a + 1.5), [I(10, 4, 5)]),
    _case("int_bitwise", lambda a, b: (a & b, a | b, a ^ b, a << 1, a >> 1), [I(64, 4, 5), I(64, 4, 5)]),
    _case("int_compare", lambda a, b: (a > b, a == b, a <= 3), [I(5, 4, 5), I(5, 4, 5)]),
    _case("int_reduce", lambda a: (a.sum(), a.sum(1), a.max(), a.argmax(1), a.min(0)[0], a.cumsum(1), a.prod(1)),
          [I(5, 4, 5)]),
    _case("int_abs_neg_clamp", lambda a: ((a - 5).abs(), -a, a.clamp(2, 7)), [I(10, 4, 5)]),
    _case("int_where_index", lambda m, a, i: (torch.where(m, a, -1), a[i], a.gather(1, i[:4].view(4, 1))),
          [B(4, 5), I(10, 4, 5), I(4, 6)]),
    _case("int_sort_topk", lambda a: (a.sort(dim=1, stable=True)[1], torch.topk(a * 1000 + torch.arange(5, device=a.device), 2)[0]),
          [I(10, 4, 5)]),
    _case("bool_logic", lambda a, b: (a & b, a | b, ~a, a ^ b, torch.logical_not(a), torch.logical_and(a, b)),
          [B(4, 5), B(4, 5)]),
    _case("bool_reduce", lambda a: (a.any(), a.all(), a.any(dim=1), a.all(dim=0), a.sum(), a.sum(1)), [B(4, 5)]),
    _case("bool_to_number", lambda a: (a.float(), a.long(), a.int() + 1, a * 2.0), [B(4, 5)]),
    _case("nonzero", lambda a: (a.nonzero(), torch.count_nonzero(a)), [B(4, 5)]),
    _case("int32", lambda a: (a.int() + a.int(), a.int().sum(), (a.int() * 2).to(torch.int64)), [I(10, 4, 5)]),
    _case("unique", lambda a: torch.unique(a, return_counts=True), [I(6, 20)]),
]


@pytest.mark.parametrize("name,fn,specs,grad,tol,dtypes", INT_CASES, ids=[c[0] for c in INT_CASES])
def test_int_bool_op_matches_cpu(card, name, fn, specs, grad, tol, dtypes):
    check_op(card, fn, specs, F32, grad=False)


# --------------------------------------------------------------------------------------
# Dropout
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DT_ID[d])
@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_train(card, dm, dtype, p):
    dm.manual_seed(1234)
    x = torch.ones(400, 250, device=card, dtype=dtype, requires_grad=True)
    y = F.dropout(x, p=p, training=True)
    assert y.device.type == card and y.dtype == dtype and y.shape == x.shape
    y_cpu = y.detach().float().cpu()
    zero_frac = (y_cpu == 0).float().mean().item()
    assert abs(zero_frac - p) < 0.01, zero_frac
    scale = torch.tensor(1 / (1 - p), dtype=dtype).float()
    kept = y_cpu[y_cpu != 0]
    torch.testing.assert_close(kept, scale.expand_as(kept), **tol_for(dtype))
    # gradient: the same mask, the same scale
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad.float().cpu(), y_cpu, **tol_for(dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DT_ID[d])
def test_dropout_eval_and_edge_cases(card, dtype):
    x = torch.randn(64, 32, dtype=dtype).to(card)
    assert torch.equal(F.dropout(x, p=0.5, training=False).cpu(), x.cpu())
    m = nn.Dropout(0.3).to(card).eval()
    assert torch.equal(m(x).cpu(), x.cpu())
    assert torch.equal(F.dropout(x, p=0.0, training=True).cpu(), x.cpu())
    assert torch.count_nonzero(F.dropout(x, p=1.0, training=True).cpu()).item() == 0


def test_dropout_reproducible_with_seed(card, dm):
    x = torch.ones(1000, device=card)
    dm.manual_seed(7)
    a = F.dropout(x, 0.5).cpu()
    dm.manual_seed(7)
    b = F.dropout(x, 0.5).cpu()
    c = F.dropout(x, 0.5).cpu()
    assert torch.equal(a, b)
    assert not torch.equal(b, c)


# --------------------------------------------------------------------------------------
# In-place operations on views
# --------------------------------------------------------------------------------------
INPLACE_VIEW_CASES = [
    ("column_add_", lambda x: x[:, 1].add_(1)),
    ("row_mul_", lambda x: x[2].mul_(-3)),
    ("transpose_mul_", lambda x: x.t().mul_(2)),
    ("slice_zero_", lambda x: x[1:3].zero_()),
    ("strided_fill_", lambda x: x.view(-1)[::3].fill_(5)),
    ("diagonal_copy_", lambda x: x.diagonal().copy_(torch.arange(4.0, device=x.device))),
    ("narrow_clamp_", lambda x: x.narrow(1, 1, 2).clamp_(-0.1, 0.1)),
    ("setitem_scalar", lambda x: x.__setitem__((slice(None), slice(2, None)), 7.0)),
    ("setitem_mask", lambda x: x.__setitem__(x > 0.5, 0.0)),
    ("setitem_index_add", lambda x: x.__setitem__(torch.tensor([0, 2], device=x.device),
                                                  x[torch.tensor([0, 2], device=x.device)] + 1)),
    ("index_put_accumulate_", lambda x: x.index_put_((torch.tensor([1, 1, 3], device=x.device),),
                                                     torch.ones(3, 4, device=x.device), accumulate=True)),
    ("unsqueeze_view_addcmul_", lambda x: x.unsqueeze(0)[0, :, 0].addcmul_(x[:, 1], x[:, 2], value=2.0)),
    ("exp_on_reshape_view", lambda x: x.reshape(2, 8)[1].exp_()),
    ("masked_fill_on_view_", lambda x: x[1:].masked_fill_(x[1:] < 0, -9.0)),
]


@pytest.mark.parametrize("name,fn", INPLACE_VIEW_CASES, ids=[c[0] for c in INPLACE_VIEW_CASES])
def test_inplace_on_view_modifies_base(card, name, fn):
    base = torch.randn(4, 4, generator=torch.Generator().manual_seed(3))
    x_cpu = base.clone()
    x_dev = base.clone().to(card)
    storage_ptr = x_dev.data_ptr()
    fn(x_cpu)
    fn(x_dev)
    assert x_dev.data_ptr() == storage_ptr
    assert x_dev.device.type == card
    assert not torch.equal(x_cpu, base), "the case must change the tensor"
    torch.testing.assert_close(x_dev.cpu(), x_cpu, rtol=1e-6, atol=1e-6)


def test_inplace_view_example_from_brief(card):
    x = torch.zeros(3, 4, device=card)
    x[:, 1].add_(1)
    expected = torch.zeros(3, 4)
    expected[:, 1] = 1
    assert torch.equal(x.cpu(), expected)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DT_ID[d])
def test_inplace_on_view_autograd(card, dtype):
    def run(device):
        leaf = torch.randn(4, 5, generator=torch.Generator().manual_seed(0)).to(dtype).to(device)
        leaf.requires_grad_(True)
        y = leaf * 1.5
        y[:, 1].mul_(2)
        y.t()[0].add_(1)
        y[2:].sigmoid_()
        (y * torch.arange(20.0).view(4, 5).to(dtype).to(device)).sum().backward()
        return y.detach(), leaf.grad

    y_d, g_d = run(card)
    y_c, g_c = run("cpu")
    torch.testing.assert_close(y_d.cpu(), y_c, **tol_for(dtype))
    torch.testing.assert_close(g_d.cpu(), g_c, **tol_for(dtype, 2))


# --------------------------------------------------------------------------------------
# out= variants with wrongly shaped out tensors (resized by the op)
# --------------------------------------------------------------------------------------
def _a(*shape, seed=0):
    """A seeded CPU tensor."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


OUT_CASES = [
    ("add", lambda a, b, out: torch.add(a, b, out=out), (4, 5), (4, 5), torch.float32),
    ("mul_bcast", lambda a, b, out: torch.mul(a, b[0], out=out), (4, 5), (4, 5), torch.float32),
    ("exp", lambda a, b, out: torch.exp(a, out=out), (4, 5), (1,), torch.float32),
    ("mm", lambda a, b, out: torch.mm(a, b.t(), out=out), (4, 5), (3, 5), torch.float32),
    ("matmul", lambda a, b, out: torch.matmul(a, b.t(), out=out), (4, 5), (3, 5), torch.float32),
    ("addmm", lambda a, b, out: torch.addmm(b[0, :3], a, b.t(), out=out), (4, 5), (3, 5), torch.float32),
    ("sum_dim", lambda a, b, out: torch.sum(a, dim=1, out=out), (4, 5), (1,), torch.float32),
    ("cumsum", lambda a, b, out: torch.cumsum(a, 0, out=out), (4, 5), (1,), torch.float32),
    ("cat", lambda a, b, out: torch.cat([a, b], out=out), (4, 5), (3, 5), torch.float32),
    ("clamp", lambda a, b, out: torch.clamp(a, -0.5, 0.5, out=out), (4, 5), (1,), torch.float32),
    ("index_select", lambda a, b, out: torch.index_select(a, 1, torch.tensor([4, 0, 2], device=a.device), out=out),
     (4, 5), (1,), torch.float32),
    ("gt", lambda a, b, out: torch.gt(a, b, out=out), (4, 5), (4, 5), torch.bool),
    ("atan2_fallback", lambda a, b, out: torch.atan2(a, b, out=out), (4, 5), (4, 5), torch.float32),
    ("fmod_fallback", lambda a, b, out: torch.fmod(a, b, out=out), (4, 5), (5,), torch.float32),
]


@pytest.mark.parametrize("out_shape", [(0,), (2, 2), (7, 9)], ids=["empty", "small", "large"])
@pytest.mark.parametrize("name,fn,sa,sb,odt", OUT_CASES, ids=[c[0] for c in OUT_CASES])
def test_out_variant_resizes(card, name, fn, sa, sb, odt, out_shape):
    a = _a(*sa, seed=1)
    b = _a(*sb, seed=2)
    ref = fn(a, b, None)
    out = torch.empty(out_shape, dtype=odt, device=card)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "An output with one or more elements was resized"
        res = fn(a.to(card), b.to(card), out)
    assert res is out
    assert out.device.type == card
    assert out.shape == ref.shape, f"{tuple(out.shape)} != {tuple(ref.shape)}"
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)
    # the resized out tensor is usable afterwards
    torch.testing.assert_close((out.float() * 2).cpu(), ref.float() * 2, rtol=1e-5, atol=1e-5)


def test_out_variant_tuple_resizes(card):
    a = _a(4, 5)
    vals = torch.empty(0, device=card)
    idx = torch.empty(3, 3, dtype=torch.long, device=card)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "An output with one or more elements was resized"
        torch.max(a.to(card), dim=1, out=(vals, idx))
    rv, ri = torch.max(a, dim=1)
    assert vals.shape == rv.shape and idx.shape == ri.shape
    assert torch.equal(vals.cpu(), rv) and torch.equal(idx.cpu(), ri)


def test_out_variant_noncontiguous_out(card):
    a, b = _a(4, 5, seed=1), _a(4, 5, seed=2)
    buf = torch.zeros(5, 4, device=card)
    out = buf.t()
    torch.add(a.to(card), b.to(card), out=out)
    torch.testing.assert_close(out.cpu(), a + b)
    torch.testing.assert_close(buf.cpu(), (a + b).t())


# --------------------------------------------------------------------------------------
# Copies between devices and between host and device
# --------------------------------------------------------------------------------------
@pytest.fixture
def two_devices(dm):
    if dm.device_count() < 2:
        pytest.skip("needs two cards")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [torch.int64, torch.bool], ids=str)
def test_copy_between_devices(card, dm, two_devices, dtype):
    src_cpu = (torch.randn(6, 7) * 10).to(dtype)
    a = src_cpu.to(f"{card}:0")
    assert a.device == torch.device(card, 0)
    b = a.to(f"{card}:1")
    assert b.device == torch.device(card, 1)
    assert torch.equal(b.cpu(), src_cpu)
    assert torch.equal(a.cpu(), src_cpu)
    # the copy is independent of its source
    a.zero_()
    assert torch.equal(b.cpu(), src_cpu)
    # ops on device 1 stay on device 1
    c = b + b if dtype != torch.bool else b | b
    assert c.device == torch.device(card, 1)
    assert torch.equal(c.cpu(), src_cpu + src_cpu if dtype != torch.bool else src_cpu)


def test_copy_between_devices_noncontig_and_dtype(card, dm, two_devices):
    src = torch.randn(5, 8)
    a = src.to(f"{card}:0")
    # non-contiguous source
    b = a.t().to(f"{card}:1")
    assert b.device.index == 1 and torch.equal(b.cpu(), src.t())
    # non-contiguous destination, dtype change on the way
    dst = torch.zeros(8, 5, dtype=torch.float16, device=f"{card}:1").t()
    dst.copy_(a)
    assert dst.device.index == 1
    assert torch.equal(dst.cpu(), src.to(torch.float16))
    # strided slice into a slice of another card
    dst2 = torch.zeros(5, 8, device=f"{card}:1")
    dst2[:, ::2].copy_(a[:, 1::2])
    expected = torch.zeros(5, 8)
    expected[:, ::2] = src[:, 1::2]
    assert torch.equal(dst2.cpu(), expected)
    # to() with device and dtype at once, and back
    c = a.to(f"{card}:1", dtype=torch.bfloat16)
    assert c.device.index == 1 and c.dtype == torch.bfloat16
    assert torch.equal(c.cpu(), src.to(torch.bfloat16))
    d = c.to(f"{card}:0")
    assert d.device.index == 0 and torch.equal(d.cpu(), src.to(torch.bfloat16))


def test_current_device_context(card, dm, two_devices):
    with dm.device(1):
        t = torch.ones(3, device=card)
        assert t.device == torch.device(card, 1)
        u = torch.arange(3, device=card) + t
        assert u.device == torch.device(card, 1)
        assert torch.equal(u.cpu(), torch.arange(3.0) + 1)
    assert torch.zeros(1, device=card).device.index == 0


def test_host_device_copies(card):
    src = torch.randn(6, 8)
    d = src.to(card)
    # device -> host of non-contiguous and expanded views
    assert torch.equal(d.t().cpu(), src.t())
    assert torch.equal(d[:, 1::3].cpu(), src[:, 1::3])
    assert torch.equal(d[0:1].expand(4, 8).cpu(), src[0:1].expand(4, 8))
    # host -> device into non-contiguous destinations
    dst = torch.zeros(8, 6, device=card)
    dst.t().copy_(src)
    assert torch.equal(dst.cpu(), src.t())
    dst2 = torch.zeros(6, 8, device=card)
    dst2[:, ::2] = src[:, :4]
    exp = torch.zeros(6, 8)
    exp[:, ::2] = src[:, :4]
    assert torch.equal(dst2.cpu(), exp)
    # host -> device with a dtype change and broadcasting
    dst3 = torch.zeros(3, 8, dtype=torch.float16, device=card)
    dst3.copy_(src[0])
    assert torch.equal(dst3.cpu(), src[0].to(torch.float16).expand(3, 8))
    # device -> host into a non-contiguous host tensor
    host = torch.zeros(8, 6)
    host.t().copy_(d)
    assert torch.equal(host, src.t())
    # same-device copy with dtype change and non-contiguous source
    e = torch.empty(8, 6, dtype=torch.bfloat16, device=card)
    e.copy_(d.t())
    assert torch.equal(e.cpu(), src.t().to(torch.bfloat16))
    # clone keeps values and is independent
    f = d.clone()
    d.add_(1)
    assert torch.equal(f.cpu(), src)
    # item() and tolist()
    assert d[2, 3].item() == pytest.approx(src[2, 3].item() + 1, rel=1e-6)
    assert torch.tensor([1, 2, 3], device=card).tolist() == [1, 2, 3]


# --------------------------------------------------------------------------------------
# dtype conversions on the device
# --------------------------------------------------------------------------------------
CONV_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32,
               torch.int8, torch.uint8, torch.bool]


@pytest.mark.parametrize("dst", CONV_DTYPES, ids=str)
@pytest.mark.parametrize("src", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool], ids=str)
def test_dtype_conversion(card, src, dst):
    base = torch.randn(5, 6, generator=torch.Generator().manual_seed(5)) * 4
    if src == torch.bool:
        x = base > 0
    else:
        x = base.to(src)
    if dst == torch.uint8 and src != torch.bool:
        x = x.abs()  # negative float -> uint8 is undefined behaviour
    xd = x.to(card)
    for view in (lambda t: t, lambda t: t.t()):  # contiguous and non-contiguous sources
        yd = view(xd).to(dst)
        ref = view(x).to(dst)
        assert yd.device.type == card and yd.dtype == dst
        assert torch.equal(yd.cpu(), ref)
    # methods too
    if dst == torch.float16:
        assert torch.equal(xd.half().cpu(), x.half())
    if dst == torch.bfloat16:
        assert torch.equal(xd.bfloat16().cpu(), x.bfloat16())


def test_type_as_and_to_other(card):
    a = torch.randn(4).to(card)
    b = torch.zeros(2, dtype=torch.float16, device=card)
    c = a.type_as(b)
    assert c.dtype == torch.float16 and c.device.type == card
    d = a.to(b)
    assert d.dtype == torch.float16
    assert torch.equal(c.cpu(), a.cpu().half())


# --------------------------------------------------------------------------------------
# Factories
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DT_ID[d])
def test_factories(card, dm, dtype):
    def chk(t, ref):
        assert t.device.type == card, t.device
        assert t.dtype == ref.dtype and t.shape == ref.shape
        torch.testing.assert_close(t.cpu(), ref, rtol=0, atol=0)

    chk(torch.zeros(2, 3, dtype=dtype, device=card), torch.zeros(2, 3, dtype=dtype))
    chk(torch.ones((4,), dtype=dtype, device=card), torch.ones(4, dtype=dtype))
    chk(torch.full((2, 2), 3.5, dtype=dtype, device=card), torch.full((2, 2), 3.5, dtype=dtype))
    chk(torch.arange(0, 5, 0.5, dtype=dtype, device=card), torch.arange(0, 5, 0.5, dtype=dtype))
    chk(torch.linspace(-1, 1, 9, dtype=dtype, device=card), torch.linspace(-1, 1, 9, dtype=dtype))
    chk(torch.eye(4, dtype=dtype, device=card), torch.eye(4, dtype=dtype))
    chk(torch.eye(3, 5, dtype=dtype, device=card), torch.eye(3, 5, dtype=dtype))
    chk(torch.tensor([[1.5, 2.0], [3.0, -4.0]], dtype=dtype, device=card),
        torch.tensor([[1.5, 2.0], [3.0, -4.0]], dtype=dtype))
    src = torch.randn(3, 4, dtype=dtype, device=card)
    for fn in (torch.zeros_like, torch.ones_like):
        chk(fn(src), fn(src.cpu()))
    chk(torch.full_like(src, 2.0), torch.full((3, 4), 2.0, dtype=dtype))
    for e in (torch.empty_like(src), torch.empty(3, 4, dtype=dtype, device=card), src.new_empty((3, 4))):
        assert e.device.type == card and e.dtype == dtype and e.shape == (3, 4)
    nz = src.new_zeros(2, 5)
    assert nz.device.type == card and nz.dtype == dtype
    chk(nz, torch.zeros(2, 5, dtype=dtype))
    r = torch.randn(64, 64, dtype=dtype, device=card)
    assert r.device.type == card and r.dtype == dtype and r.shape == (64, 64)
    rf = r.float().cpu()
    assert torch.isfinite(rf).all()
    assert abs(rf.mean().item()) < 0.1 and abs(rf.std().item() - 1) < 0.1
    u = torch.rand(1000, dtype=dtype, device=card).float().cpu()
    assert (u >= 0).all() and (u <= 1).all() and abs(u.mean().item() - 0.5) < 0.05


def test_integer_factories(card, dm):
    a = torch.arange(10, device=card)
    assert a.dtype == torch.int64 and a.device.type == card and torch.equal(a.cpu(), torch.arange(10))
    assert torch.equal(torch.arange(2, 11, 3, device=card).cpu(), torch.arange(2, 11, 3))
    z = torch.zeros(3, dtype=torch.int32, device=card)
    assert z.dtype == torch.int32 and torch.equal(z.cpu(), torch.zeros(3, dtype=torch.int32))
    b = torch.ones(2, 2, dtype=torch.bool, device=card)
    assert b.dtype == torch.bool and b.all().item()
    dm.manual_seed(0)
    ri = torch.randint(3, 9, (500,), device=card)
    assert ri.device.type == card and ri.dtype == torch.int64
    ric = ri.cpu()
    assert ric.min().item() >= 3 and ric.max().item() <= 8 and len(ric.unique()) == 6
    p = torch.randperm(20, device=card)
    assert p.device.type == card and torch.equal(p.cpu().sort()[0], torch.arange(20))


def test_random_factories_seeded(card, dm):
    dm.manual_seed(42)
    a = torch.randn(100, device=card)
    dm.manual_seed(42)
    b = torch.randn(100, device=card)
    c = torch.randn(100, device=card)
    assert torch.equal(a.cpu(), b.cpu())
    assert not torch.equal(b.cpu(), c.cpu())
    g = torch.Generator(device=card)
    g.manual_seed(3)
    x = torch.randn(10, device=card, generator=g)
    g.manual_seed(3)
    y = torch.randn(10, device=card, generator=g)
    assert torch.equal(x.cpu(), y.cpu())


# --------------------------------------------------------------------------------------
# _foreach ops
# --------------------------------------------------------------------------------------
SHAPES = [(3, 4), (7,), (2, 3, 5), (1,)]


def _tensor_list(dtype, seed, positive=False):
    g = torch.Generator().manual_seed(seed)
    ts = [torch.randn(s, generator=g) for s in SHAPES]
    if positive:
        ts = [t.abs() + 0.5 for t in ts]
    return [t.to(dtype) for t in ts]


FOREACH_CASES = [
    ("add_list", lambda xs, ys, zs: torch._foreach_add_(xs, ys)),
    ("add_list_alpha", lambda xs, ys, zs: torch._foreach_add_(xs, ys, alpha=-0.5)),
    ("add_scalar", lambda xs, ys, zs: torch._foreach_add_(xs, 1.25)),
    ("add_scalarlist", lambda xs, ys, zs: torch._foreach_add_(xs, [1.0, 2.0, -3.0, 0.5])),
    ("mul_scalar", lambda xs, ys, zs: torch._foreach_mul_(xs, 0.9)),
    ("mul_list", lambda xs, ys, zs: torch._foreach_mul_(xs, ys)),
    ("mul_tensor", lambda xs, ys, zs: torch._foreach_mul_(xs, zs[3][0])),
    ("addcmul", lambda xs, ys, zs: torch._foreach_addcmul_(xs, ys, zs, value=0.3)),
    ("addcmul_default", lambda xs, ys, zs: torch._foreach_addcmul_(xs, ys, zs)),
    ("addcdiv", lambda xs, ys, zs: torch._foreach_addcdiv_(xs, ys, zs, value=-0.1)),
    ("div_scalar", lambda xs, ys, zs: torch._foreach_div_(xs, 3.0)),
    ("sub_list", lambda xs, ys, zs: torch._foreach_sub_(xs, ys)),
    ("lerp", lambda xs, ys, zs: torch._foreach_lerp_(xs, ys, 0.25)),
    ("sqrt_", lambda xs, ys, zs: torch._foreach_sqrt_(zs)),
    ("zero_", lambda xs, ys, zs: torch._foreach_zero_(xs)),
    ("copy_", lambda xs, ys, zs: torch._foreach_copy_(xs, ys)),
    ("maximum_", lambda xs, ys, zs: torch._foreach_maximum_(xs, ys)),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DT_ID[d])
@pytest.mark.parametrize("name,fn", FOREACH_CASES, ids=[c[0] for c in FOREACH_CASES])
def test_foreach_inplace(card, name, fn, dtype):
    lists = [_tensor_list(dtype, 1), _tensor_list(dtype, 2), _tensor_list(dtype, 3, positive=True)]
    cpu = [[t.clone() for t in l] for l in lists]
    dev = [[t.to(card) for t in l] for l in lists]
    ptrs = [t.data_ptr() for l in dev for t in l]
    fn(*cpu)
    fn(*dev)
    assert ptrs == [t.data_ptr() for l in dev for t in l], "in-place foreach must not reallocate"
    for ld, lc in zip(dev, cpu):
        for d, c in zip(ld, lc):
            assert d.device.type == card
            torch.testing.assert_close(d.cpu(), c, **tol_for(dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=lambda d: DT_ID[d])
def test_foreach_functional(card, dtype):
    xs, ys = _tensor_list(dtype, 1), _tensor_list(dtype, 2)
    xd, yd = [t.to(card) for t in xs], [t.to(card) for t in ys]
    for fn in (lambda a, b: torch._foreach_add(a, b), lambda a, b: torch._foreach_mul(a, 2.0),
               lambda a, b: torch._foreach_div(a, b), lambda a, b: torch._foreach_norm(a),
               lambda a, b: torch._foreach_neg(a), lambda a, b: torch._foreach_sqrt([t.abs() for t in a])):
        rd, rc = fn(xd, yd), fn(xs, ys)
        for d, c in zip(rd, rc):
            assert d.device.type == card
            torch.testing.assert_close(d.cpu(), c, **tol_for(dtype, 2))
    # inputs untouched
    for d, c in zip(xd, xs):
        assert torch.equal(d.cpu(), c)


# --------------------------------------------------------------------------------------
# torch.optim on device parameters
# --------------------------------------------------------------------------------------
def _params_and_grads(steps):
    g = torch.Generator().manual_seed(11)
    params = [torch.randn(s, generator=g) for s in [(8, 4), (4,), (3, 2, 5)]]
    grads = [[torch.randn(p.shape, generator=g) for p in params] for _ in range(steps)]
    return params, grads


def _run_optimizer(make_opt, device, steps=4):
    params, grads = _params_and_grads(steps)
    ps = [nn.Parameter(p.clone().to(device)) for p in params]
    opt = make_opt(ps)
    for k in range(steps):
        for p, g in zip(ps, grads[k]):
            p.grad = g.clone().to(device)
        opt.step()
    return ps, opt


OPTIMS = [
    ("adamw", lambda ps, fe: torch.optim.AdamW(ps, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1, foreach=fe)),
    ("adamw_amsgrad", lambda ps, fe: torch.optim.AdamW(ps, lr=1e-2, amsgrad=True, foreach=fe)),
    ("adam_l2", lambda ps, fe: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.05, foreach=fe)),
    ("sgd", lambda ps, fe: torch.optim.SGD(ps, lr=0.1, foreach=fe)),
    ("sgd_momentum", lambda ps, fe: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-2, foreach=fe)),
    ("sgd_nesterov", lambda ps, fe: torch.optim.SGD(ps, lr=0.05, momentum=0.8, nesterov=True, foreach=fe)),
]


@pytest.mark.parametrize("foreach", [False, True], ids=["single", "foreach"])
@pytest.mark.parametrize("name,make", OPTIMS, ids=[o[0] for o in OPTIMS])
def test_optimizer_matches_cpu(card, name, make, foreach):
    pd, opt_d = _run_optimizer(lambda ps: make(ps, foreach), card)
    pc, opt_c = _run_optimizer(lambda ps: make(ps, foreach), "cpu")
    for d, c in zip(pd, pc):
        assert d.device.type == card
        torch.testing.assert_close(d.detach().cpu(), c.detach(), rtol=1e-5, atol=1e-6)
    for d, c in zip(pd, pc):
        sd, sc = opt_d.state[d], opt_c.state[c]
        assert sd.keys() == sc.keys()
        for k in sd:
            if isinstance(sd[k], torch.Tensor):
                torch.testing.assert_close(sd[k].cpu(), sc[k], rtol=1e-5, atol=1e-6)
                if sd[k].dim() > 0:
                    assert sd[k].device.type == card, f"state {k} on {sd[k].device}"


# --------------------------------------------------------------------------------------
# A small MLP trained for 5 steps
# --------------------------------------------------------------------------------------
def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.LayerNorm(32), nn.ReLU(),
                         nn.Linear(32, 5))


@pytest.mark.parametrize("opt_name", ["adamw", "sgd"])
def test_mlp_training_loop(card, opt_name):
    g = torch.Generator().manual_seed(4)
    # one batch, five steps: the loss must go down
    xs = [torch.randn(24, 16, generator=g)] * 5
    ys = [torch.randint(0, 5, (24,), generator=g)] * 5
    cpu_model = _mlp()
    dev_model = copy.deepcopy(cpu_model).to(card)
    assert all(p.device.type == card for p in dev_model.parameters())

    def opt(m):
        if opt_name == "adamw":
            return torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.01)
        return torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)

    losses = {}
    for device, model in (("cpu", cpu_model), (card, dev_model)):
        o = opt(model)
        ls = []
        for x, y in zip(xs, ys):
            o.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x.to(device)), y.to(device), label_smoothing=0.05)
            loss.backward()
            o.step()
            ls.append(loss.item())
        losses[device] = ls
    assert losses[card] == pytest.approx(losses["cpu"], rel=1e-5, abs=1e-6)
    assert losses["cpu"][-1] < losses["cpu"][0]
    for (n, pd), (_, pc) in zip(dev_model.named_parameters(), cpu_model.named_parameters()):
        assert pd.device.type == card
        torch.testing.assert_close(pd.detach().cpu(), pc.detach(), rtol=1e-4, atol=1e-5, msg=n)
        torch.testing.assert_close(pd.grad.cpu(), pc.grad, rtol=1e-4, atol=1e-5, msg=n)


def test_mlp_eval_bf16(card):
    model = _mlp().to(torch.bfloat16)
    dev_model = copy.deepcopy(model).to(card)
    x = torch.randn(6, 16).to(torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(dev_model(x.to(card)).cpu(), model(x), **tol_for(BF16, 2))


# --------------------------------------------------------------------------------------
# The hot operators have their own kernels (they are not in the generic fallback)
# --------------------------------------------------------------------------------------
HOT = {"add", "add_", "mul", "mul_", "mm", "addmm", "_softmax", "native_layer_norm"}


def test_hot_ops_not_in_fallback(card, dm):
    a = torch.randn(8, 16, device=card, requires_grad=True)
    w = torch.randn(4, 16, device=card, requires_grad=True)
    b = torch.randn(4, device=card, requires_grad=True)
    y = a + a
    y = y * a
    y = y.mul(2.0).add(1.0)
    z = torch.mm(y, w.t())
    z = torch.addmm(b, y, w.t()) + z
    z = torch.softmax(z, -1)
    z = F.layer_norm(z, (4,))
    z.add_(1).mul_(0.5)
    z.sum().backward()
    dm.synchronize()
    ran = set(dm.fallback_operators())
    hot = sorted(op for op in ran if op.removeprefix("aten::").split(".")[0] in HOT)
    assert not hot, f"hot operators went through the generic fallback: {hot}"


# Small same-shape float operands take the card's own elementwise loop (no host views):
# every element bit for bit as the CPU kernel, special values included; other shapes,
# sizes and alphas the general path, the same.
SPECIAL = [0.0, -0.0, 1.0, -1.0, float("inf"), float("-inf"), float("nan"), 1e-40, -1e-40, 3.0e38, 0.1, 1 / 3,
           6e-8, 65504.0, 1e-5, 3.3895e38]


def _bits(t):
    return t.view({torch.float64: torch.int64, torch.float32: torch.int32}.get(t.dtype, torch.int16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, BF16, F16], ids=["fp32", "fp64", "bf16", "fp16"])
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div"])
def test_small_binary_ops_are_bitwise_the_cpus(card, dtype, op):
    v = torch.tensor(SPECIAL, dtype=dtype)
    spread = torch.logspace(-6, 6, 4096, dtype=torch.float64).to(dtype)
    cases = [(v.repeat_interleave(len(v)), v.repeat(len(v))),              # every pair of specials
             (torch.randn(16, dtype=dtype), torch.randn(16, dtype=dtype)),  # the bench's size
             (torch.randn(4096, dtype=dtype) * spread, torch.randn(4096, dtype=dtype).flip(0) * spread),
             (torch.randn(3, 5, dtype=dtype), torch.randn(3, 5, dtype=dtype)),
             (torch.randn(1 << 15, dtype=dtype), torch.randn(1 << 15, dtype=dtype)),   # over the loop's size
             (torch.randn(4, 8, dtype=dtype), torch.randn(8, dtype=dtype))]          # broadcast
    for a, b in cases:
        want = getattr(torch, op)(a, b)
        got = getattr(torch, op)(a.to(card), b.to(card)).cpu()
        same = (_bits(want) == _bits(got)) | (want.isnan() & got.isnan())
        assert bool(same.all()), (op, dtype, a.shape, b.shape)
        if a.shape == b.shape:
            x = a.to(card)
            getattr(x, op + "_")(b.to(card))
            same = (_bits(want) == _bits(x.cpu())) | (want.isnan() & x.cpu().isnan())
            assert bool(same.all()), (op + "_", dtype, a.shape)
    if op in ("add", "sub"):
        a, b = torch.randn(16, dtype=dtype), torch.randn(16, dtype=dtype)
        for alpha in (2.5, -1, 0):
            assert torch.equal(getattr(torch, op)(a.to(card), b.to(card), alpha=alpha).cpu(),
                               getattr(torch, op)(a, b, alpha=alpha))


# --------------------------------------------------------------------------------------
# Device checks, memory overlap, convolution and conjugate views (bugs found and fixed)
# --------------------------------------------------------------------------------------
MIXED_CARD_OPS = [
    ("add", lambda a, b: a + b),
    ("mm", lambda a, b: torch.mm(a.view(1, 3), b.view(3, 1))),
    ("cat", lambda a, b: torch.cat([a, b])),
    ("maximum", lambda a, b: torch.maximum(a, b)),
]


@pytest.mark.parametrize("name,fn", MIXED_CARD_OPS, ids=[c[0] for c in MIXED_CARD_OPS])
def test_op_with_tensors_on_two_cards_raises(card, dm, two_devices, name, fn):
    a = torch.ones(3, device=f"{card}:0")
    b = torch.ones(3, device=f"{card}:1")
    with pytest.raises(RuntimeError):
        fn(a, b)


@pytest.mark.parametrize("name,fn", MIXED_CARD_OPS + [("where", lambda a, b: torch.where(a > 0, a, b))],
                         ids=[c[0] for c in MIXED_CARD_OPS] + ["where"])
def test_op_with_device_and_cpu_tensor_raises(card, name, fn):
    a = torch.ones(3, device=card)
    b = torch.ones(3)
    with pytest.raises(RuntimeError):
        fn(a, b)


def test_generic_fallback_op_checks_devices(card, dm):
    """Operators without a kernel of their own (atan2 through the generic fallback) do check."""
    a = torch.ones(3, device=card)
    with pytest.raises(RuntimeError, match="same device"):
        torch.atan2(a, torch.ones(3))
    if dm.device_count() > 1:
        with pytest.raises(RuntimeError, match="same device"):
            torch.atan2(a, torch.ones(3, device=f"{card}:1"))


def test_op_with_device_and_cpu_scalar_tensor_is_allowed(card):
    a = torch.arange(3.0, device=card)
    r = a + torch.tensor(2.0)
    assert r.device.type == card and r.cpu().tolist() == [2.0, 3.0, 4.0]


OVERLAP_CASES = [
    ("add_", lambda x: x[1:].add_(x[:-1])),
    ("mul_out", lambda x: torch.mul(x[:-1], 2.0, out=x[1:])),
    ("exp_out", lambda x: torch.exp(x[:-1], out=x[1:])),
    ("copy_", lambda x: x[1:].copy_(x[:-1])),
]


@pytest.mark.parametrize("name,fn", OVERLAP_CASES, ids=[c[0] for c in OVERLAP_CASES])
def test_partial_overlap_raises_like_cpu(card, name, fn):
    with pytest.raises(RuntimeError, match="unsupported operation"):
        fn(torch.arange(8.0))  # the CPU refuses
    with pytest.raises(RuntimeError, match="unsupported operation"):
        fn(torch.arange(8.0, device=card))


@pytest.mark.parametrize("dims", [1, 2])
def test_convolution(card, dims):
    g = torch.Generator().manual_seed(0)
    x = torch.randn((2, 3) + (8,) * dims, generator=g)
    w = torch.randn((4, 3) + (3,) * dims, generator=g)
    conv = F.conv1d if dims == 1 else F.conv2d
    ref = conv(x, w, padding=1)
    out = conv(x.to(card), w.to(card), padding=1)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-5)


CL_CASES = [  # (conv, dims, input channels_last, weight channels_last, dtype, transposed)
    (F.conv2d, 2, True, False, torch.float32, False),
    (F.conv2d, 2, False, True, torch.float32, False),
    (F.conv2d, 2, True, True, torch.float64, False),   # float64: the CPU's other backend
    (F.conv2d, 2, False, False, torch.float32, False),
    (F.conv3d, 3, True, False, torch.float32, False),
    (F.conv_transpose2d, 2, True, False, torch.float32, True),
]


@pytest.mark.parametrize("conv,dims,x_cl,w_cl,dtype,transposed", CL_CASES,
                         ids=[f"{c[0].__name__}-x{int(c[2])}w{int(c[3])}-{str(c[4])[6:]}" for c in CL_CASES])
def test_convolution_keeps_channels_last_as_the_cpu(card, conv, dims, x_cl, w_cl, dtype, transposed):
    # The results and gradients come in the memory format the CPU (and CUDA) gives them:
    # channels_last when the input or the weight is, so layout-sensitive code takes the same path.
    fmt = torch.channels_last if dims == 2 else torch.channels_last_3d
    g = torch.Generator().manual_seed(0)
    x = torch.randn((2, 4) + (6,) * dims, generator=g, dtype=dtype)
    w = torch.randn((4, 6 if transposed else 4) + (3,) * dims, generator=g, dtype=dtype)
    x = x.to(memory_format=fmt) if x_cl else x
    w = w.to(memory_format=fmt) if w_cl else w
    xd, wd = x.to(card).requires_grad_(), w.to(card).requires_grad_()
    x.requires_grad_(), w.requires_grad_()
    ref, out = conv(x, w, padding=1), conv(xd, wd, padding=1)
    grad = torch.randn(ref.shape, generator=g, dtype=dtype)
    ref.backward(grad)
    out.backward(grad.to(card))
    for name, a, b in (("output", out, ref), ("input grad", xd.grad, x.grad), ("weight grad", wd.grad, w.grad)):
        assert a.stride() == b.stride(), (name, a.stride(), b.stride())
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-4, atol=1e-4)
    assert out.is_contiguous(memory_format=fmt) == (x_cl or w_cl)


CNN_OPS = {  # the layers of a convolutional network around its convolutions
    "batch_norm": lambda t, p: F.batch_norm(t, p[0].clone(), p[1].clone(), p[2], p[3], training=True),
    "group_norm": lambda t, p: F.group_norm(t, 2, p[2], p[3]),
    "max_pool2d": lambda t, p: F.max_pool2d(t, 3, stride=2, padding=1),
    "avg_pool2d": lambda t, p: F.avg_pool2d(t, 2),
    "adaptive_avg_pool2d": lambda t, p: F.adaptive_avg_pool2d(t, 3),
    "upsample_nearest": lambda t, p: F.interpolate(t, scale_factor=2, mode="nearest"),
    "upsample_bilinear": lambda t, p: F.interpolate(t, scale_factor=2, mode="bilinear"),
}


CNN_KERNELS = ("batch_norm", "group_norm", "var_mean", "pool2d", "upsample")


@pytest.mark.parametrize("channels_last", [False, True], ids=["nchw", "channels_last"])
@pytest.mark.parametrize("name", sorted(CNN_OPS))
def test_cnn_layers_as_the_cpu_with_their_own_cost(card, dm, name, channels_last):
    # Values, gradients and memory formats as on the CPU (group_norm's composite form failed
    # on a channels_last input); each runs as a kernel with its own cost, not the fallback.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 8, 8, generator=g)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    params = [torch.zeros(4), torch.ones(4), torch.randn(4, generator=g), torch.randn(4, generator=g)]
    xd = x.to(card).requires_grad_()
    x.requires_grad_()
    ref, out = CNN_OPS[name](x, params), CNN_OPS[name](xd, [p.to(card) for p in params])
    grad = torch.randn(ref.shape, generator=g)
    ref.backward(grad)
    out.backward(grad.to(card))
    dm.synchronize()
    for what, a, b in (("output", out, ref), ("input grad", xd.grad, x.grad)):
        assert a.stride() == b.stride(), (what, a.stride(), b.stride())
        torch.testing.assert_close(a.detach().cpu(), b.detach(), rtol=1e-4, atol=1e-4)
    # (fallback_operators is every operator that ever fell back in this process)
    fell_back = sorted(op for op in dm.fallback_operators() if any(k in op for k in CNN_KERNELS))
    assert not fell_back, f"{name} went through the generic fallback: {fell_back}"


def test_conjugate_view_to_host_does_not_crash(card):
    code = (f"import torch, torch_{card}\n"
            "x = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64)\n"
            f"d = x.to('{card}')\n"
            "assert torch.equal(d.conj().cpu(), x.conj())\n"
            "assert torch.equal((d.conj() * 2).cpu(), x.conj() * 2)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"exit code {r.returncode}: {r.stderr[-500:]}"


def test_every_costed_operator_exists_and_has_a_device_kernel(dm):
    """The cost table names real ATen overloads (a typo would silently leave an operator on
    the generic fallback), and each has a kernel for the card."""
    from cardsim_torch import _C
    names = _C._costed_operators()
    assert len(names) > 250
    missing = [n for n in names if not torch._C._dispatch_has_kernel_for_dispatch_key(
        "aten::" + n, "PrivateUse1")]
    assert not missing, missing


def test_complex_real_views_are_views_with_no_device_time(card, dm):
    # torch.distributed hands complex tensors to the backends as their real views: a view of
    # the same memory, as on CPU, taking no kernel (it went through the generic fallback and
    # cost device time as a copy would)
    c = torch.randn(1 << 16, 2).to(card)
    z = torch.view_as_complex(c)
    r = torch.view_as_real(z)
    assert z.dtype == torch.complex64 and z.data_ptr() == c.data_ptr() == r.data_ptr()
    torch.testing.assert_close(z.cpu(), torch.view_as_complex(c.cpu()), rtol=0, atol=0)
    z[0] = 5 + 6j                                   # writes through the view
    assert c[0].tolist() == [5.0, 6.0]
    dm.synchronize()
    s, e = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
    s.record()
    torch.view_as_real(torch.view_as_complex(c))
    e.record()
    e.synchronize()
    assert s.elapsed_time(e) <= 0.0011, s.elapsed_time(e)   # the end event's own record, 1 us
    assert not [op for op in dm.fallback_operators() if "view_as" in op]
