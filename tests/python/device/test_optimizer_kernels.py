"""DeepSpeed's fused optimizer kernels on the card against pure-PyTorch fp32 references
written from the documented semantics (DeepSpeed's reference CUDA kernels):

  MLU:  torch.ops.torch_mlu.fused_adam(noop, grads, params, exp_avgs, exp_avg_sqs, lr, beta1,
        beta2, eps, step, mode, bias_correction, weight_decay)              (13 args)
  SUPA: after `import torch_supa_ext.deepspeed`:
        torch.ops.deepspeed.multi_tensor_adam(chunk_size, <the 13 args above>) (14 args)
        torch.ops.deepspeed.multi_tensor_lion(chunk_size, noop, grads, params, exp_avgs, lr,
        beta1, beta2, step, weight_decay)                                  (10 args)
        torch.ops.deepspeed.lamb(p, p_copy, exp_avg, exp_avg_sq, grad, lr, beta1, beta2,
        max_coeff, min_coeff, eps, combined_scale, step, eps_mode, bias_correction,
        weight_decay) -> coefficient tensor                                (16 args)

All the maths is fp32; results are stored in the tensors' own dtype (params, exp_avg and
exp_avg_sq all have the param dtype, as DeepSpeed allocates them with zeros_like(p)).
"""
import importlib

import pytest
import torch
import torch.nn as nn

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
DTYPES = [F32, BF16, F16]
DT_ID = {F32: "fp32", BF16: "bf16", F16: "fp16"}
CHUNK = 2048 * 32
# Shapes of one call: several tensors, one of them larger than a 65536-element chunk.
SHAPES = [(7, 3), (5,), (2, 3, 4), (1,), (300, 250)]

# fp32: the kernel and the reference do the same fp32 operations (up to ordering).
# bf16/fp16: the fp32 results are rounded to the dtype on both sides; allow one unit in the
# last place for values that sit on a rounding boundary, and require nearly all to be exact.
ULP = {BF16: 2.0 ** -7, F16: 2.0 ** -10}


def assert_matches(dev, ref, dtype, what=""):
    assert dev.dtype == dtype, f"{what}: dtype {dev.dtype} != {dtype}"
    d = dev.detach().cpu()
    if dtype == F32:
        torch.testing.assert_close(d, ref, rtol=1e-6, atol=1e-7, msg=lambda m: f"{what}: {m}")
        return
    r = ref.to(dtype)
    torch.testing.assert_close(d.float(), r.float(), rtol=ULP[dtype], atol=1e-7, msg=lambda m: f"{what}: {m}")
    exact = (d == r).float().mean().item()
    assert exact >= 0.97, f"{what}: only {exact:.3f} of the elements match the fp32-then-round reference"


# --------------------------------------------------------------------------------------
# References (fp32, from the documented formulas)
# --------------------------------------------------------------------------------------
def adam_ref(g, p, m, v, lr, b1, b2, eps, step, mode, bias_correction, wd):
    """One step; returns fp32 (p, m, v). Inputs are upcast to fp32."""
    g, p, m, v = g.float(), p.float(), m.float(), v.float()
    bc1 = 1 - b1 ** step if bias_correction else 1.0
    bc2 = 1 - b2 ** step if bias_correction else 1.0
    if mode == 0:
        g = g + wd * p
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    update = (m / bc1) / (torch.sqrt(v / bc2) + eps)
    if mode == 1:
        update = update + wd * p
    p = p - lr * update
    return p, m, v


def lion_ref(g, p, m, lr, b1, b2, wd):
    """Returns fp32 (p, m) and a mask of the elements whose direction c is zero up to fp32
    rounding (b1*m == -(1-b1)*g on the bf16/fp16 grid happens): their sign depends on how the
    kernel rounds (FMA or not), so either step is right there."""
    g, p, m = g.float(), p.float(), m.float()
    c = b1 * m + (1 - b1) * g
    ambiguous = c.abs() <= 1e-6 * (b1 * m.abs() + (1 - b1) * g.abs())
    p_new = p * (1 - lr * wd) + torch.where(c > 0, -lr, lr)  # c == 0 steps by +lr, as CUDA
    m = b2 * m + (1 - b2) * g
    return p_new, m, ambiguous, p * (1 - lr * wd) + torch.where(c > 0, lr, -lr)


def lamb_ref(p, m, v, g, lr, b1, b2, max_coeff, min_coeff, eps, combined_scale, step, eps_mode,
             bias_correction, wd):
    g, p, m, v = g.float() / combined_scale, p.float(), m.float(), v.float()
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    denom = torch.sqrt(v + eps) if eps_mode == 0 else torch.sqrt(v) + eps
    update = m / denom + wd * p
    p_norm, u_norm = p.norm(), update.norm()
    if p_norm.item() == 0 or u_norm.item() == 0:
        coeff = torch.tensor(1.0)
    else:
        coeff = (p_norm / u_norm).clamp(min_coeff, max_coeff)
    if bias_correction:
        step_size = lr * (1 - b2 ** step) ** 0.5 / (1 - b1 ** step)
    else:
        step_size = lr
    p = p - step_size * coeff * update
    return p, m, v, coeff


# --------------------------------------------------------------------------------------
# State
# --------------------------------------------------------------------------------------
def make_state(dtype, seed=0, shapes=SHAPES, n_moments=2):
    """Params, grads and moments of `dtype` (CPU). Moments start non-zero (a mid-training state)."""
    g = torch.Generator().manual_seed(seed)
    params = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    grads = [torch.randn(s, generator=g).to(dtype) for s in shapes]
    moments = [[(0.1 * torch.randn(s, generator=g)).to(dtype) for s in shapes]]
    if n_moments == 2:
        moments.append([(0.01 * torch.rand(s, generator=g)).to(dtype) for s in shapes])
    return params, grads, moments


def to_dev(ts, card, param=False):
    if param:
        return [nn.Parameter(t.clone().to(card)) for t in ts]
    return [t.clone().to(card) for t in ts]


@pytest.fixture
def fused_adam(card):
    if card != "mlu":
        pytest.skip("torch.ops.torch_mlu.fused_adam is registered by torch_mlu only")
    return torch.ops.torch_mlu.fused_adam


@pytest.fixture
def ds_ops(card):
    if card != "supa":
        pytest.skip("torch.ops.deepspeed.* kernels come with torch_supa_ext (SUPA only)")
    importlib.import_module("torch_supa_ext.deepspeed")
    return torch.ops.deepspeed


def _noop(card, value=0):
    return torch.tensor([value], dtype=torch.int32, device=card)


# A uniform calling convention for fused_adam (MLU) and multi_tensor_adam (SUPA).
@pytest.fixture
def adam_op(card):
    if card == "mlu":
        op = torch.ops.torch_mlu.fused_adam
        return lambda noop, *rest: op(noop, *rest)
    importlib.import_module("torch_supa_ext.deepspeed")
    op = torch.ops.deepspeed.multi_tensor_adam
    return lambda noop, *rest: op(CHUNK, noop, *rest)


# --------------------------------------------------------------------------------------
# Availability
# --------------------------------------------------------------------------------------
def test_kernels_registered_on_their_card(card):
    if card == "mlu":
        assert hasattr(torch.ops.torch_mlu, "fused_adam")
        assert not hasattr(torch.ops.deepspeed, "multi_tensor_adam")
        with pytest.raises(ImportError):
            importlib.import_module("torch_supa_ext.deepspeed")
        # a second attempt fails the same way and registers nothing
        with pytest.raises(ImportError):
            importlib.import_module("torch_supa_ext.deepspeed")
        assert not hasattr(torch.ops.deepspeed, "multi_tensor_adam")
    else:
        assert not hasattr(torch.ops.torch_mlu, "fused_adam")
        importlib.import_module("torch_supa_ext.deepspeed")
        for name in ("multi_tensor_adam", "multi_tensor_lion", "lamb"):
            assert hasattr(torch.ops.deepspeed, name), name


# --------------------------------------------------------------------------------------
# Adam: fused_adam (MLU) / multi_tensor_adam (SUPA)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: DT_ID[d])
@pytest.mark.parametrize("mode", [0, 1], ids=["adam_l2", "adamw"])
@pytest.mark.parametrize("bias_correction", [1, 0], ids=["bc", "nobc"])
@pytest.mark.parametrize("wd", [0.0, 0.05], ids=["wd0", "wd"])
def test_adam_kernel_matches_reference(card, adam_op, dtype, mode, bias_correction, wd):
    lr, b1, b2, eps = 1e-2, 0.9, 0.999, 1e-8
    params, grads, (ms, vs) = make_state(dtype, seed=1)
    p_d, g_d, m_d, v_d = to_dev(params, card, param=True), to_dev(grads, card), to_dev(ms, card), to_dev(vs, card)
    ptrs = [t.data_ptr() for l in (p_d, m_d, v_d) for t in l]
    noop = _noop(card)
    for step in (1, 2, 3):
        # Each step is checked from the kernel's own previous state: in bf16/fp16 a value on
        # a rounding boundary may round one ulp apart, which must not compound over steps.
        before = [(p.detach().cpu(), m.cpu(), v.cpu()) for p, m, v in zip(p_d, m_d, v_d)]
        adam_op(noop, g_d, p_d, m_d, v_d, lr, b1, b2, eps, step, mode, bias_correction, wd)
        for i, (g, (p, m, v)) in enumerate(zip(grads, before)):
            rp, rm, rv = adam_ref(g, p, m, v, lr, b1, b2, eps, step, mode, bias_correction, wd)
            assert_matches(p_d[i], rp, dtype, f"step {step} param {i}")
            assert_matches(m_d[i], rm, dtype, f"step {step} exp_avg {i}")
            assert_matches(v_d[i], rv, dtype, f"step {step} exp_avg_sq {i}")
    assert ptrs == [t.data_ptr() for l in (p_d, m_d, v_d) for t in l], "the update must be in place"
    for gd, g in zip(g_d, grads):
        assert torch.equal(gd.cpu(), g), "grads must not change"
    for p in p_d:
        assert isinstance(p, nn.Parameter) and p.requires_grad and p.is_leaf and p.grad_fn is None
    assert noop.cpu().tolist() == [0]


def test_adam_kernel_params_changed_and_state_in_place(card, adam_op):
    params, grads, (ms, vs) = make_state(F32, seed=2)
    p_d, g_d, m_d, v_d = to_dev(params, card, param=True), to_dev(grads, card), to_dev(ms, card), to_dev(vs, card)
    objs = [id(t) for l in (p_d, m_d, v_d) for t in l]
    adam_op(_noop(card), g_d, p_d, m_d, v_d, 1e-3, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)
    assert objs == [id(t) for l in (p_d, m_d, v_d) for t in l]
    for before, after in ((params, p_d), (ms, m_d), (vs, v_d)):
        for b, a in zip(before, after):
            assert not torch.equal(a.detach().cpu(), b)


def test_adam_kernel_under_no_grad_and_with_param_grads(card, adam_op):
    """DeepSpeed passes p.data/p.grad.data (fp16/fp32) or p/p.grad (bf16), with or without no_grad."""
    params, grads, (ms, vs) = make_state(BF16, seed=3)
    p_d = to_dev(params, card, param=True)
    for p, g in zip(p_d, grads):
        p.grad = g.clone().to(card)
    m_d, v_d = to_dev(ms, card), to_dev(vs, card)
    calls = [
        lambda: adam_op(_noop(card), [p.grad for p in p_d], p_d, m_d, v_d, 1e-3, 0.9, 0.999, 1e-8, 1, 1, 1, 0.01),
        lambda: adam_op(_noop(card), [p.grad for p in p_d], p_d, m_d, v_d, 1e-3, 0.9, 0.999, 1e-8, 2, 1, 1, 0.01),
        lambda: adam_op(_noop(card), [p.grad.data for p in p_d], [p.data for p in p_d], m_d, v_d, 1e-3, 0.9,
                        0.999, 1e-8, 3, 1, 1, 0.01),
    ]
    for step, call in enumerate(calls, start=1):
        before = [(p.detach().cpu(), m.cpu(), v.cpu()) for p, m, v in zip(p_d, m_d, v_d)]
        if step == 2:
            with torch.no_grad():
                call()
        else:
            call()
        for i, (g, (p, m, v)) in enumerate(zip(grads, before)):
            rp, rm, _ = adam_ref(g, p, m, v, 1e-3, 0.9, 0.999, 1e-8, step, 1, 1, 0.01)
            assert_matches(p_d[i], rp, BF16, f"step {step} param {i}")
            assert_matches(m_d[i], rm, BF16, f"step {step} exp_avg {i}")
    # autograd still works with the updated leaves
    for p in p_d:
        p.grad = None
    loss = sum((p.float() ** 2).sum() for p in p_d)
    loss.backward()
    for p in p_d:
        torch.testing.assert_close(p.grad.float().cpu(), (2 * p.detach().float()).cpu().to(BF16).float(),
                                   rtol=1e-2, atol=1e-2)


def test_adam_kernel_ignores_noop_flag(card, adam_op):
    """The reference kernel does not consult noop_flag (it propagates infs/nans)."""
    params, grads, (ms, vs) = make_state(F32, seed=4, shapes=[(6, 5)])
    p_d, g_d, m_d, v_d = to_dev(params, card), to_dev(grads, card), to_dev(ms, card), to_dev(vs, card)
    adam_op(_noop(card, 1), g_d, p_d, m_d, v_d, 1e-2, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)
    p, m, v = adam_ref(grads[0], params[0], ms[0], vs[0], 1e-2, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)
    assert_matches(p_d[0], p, F32, "param")


def test_adam_kernel_propagates_nonfinite(card, adam_op):
    params, grads, (ms, vs) = make_state(F32, seed=5, shapes=[(4,)])
    grads[0][1] = float("inf")
    grads[0][2] = float("nan")
    p_d, g_d, m_d, v_d = to_dev(params, card), to_dev(grads, card), to_dev(ms, card), to_dev(vs, card)
    adam_op(_noop(card), g_d, p_d, m_d, v_d, 1e-2, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)
    p = p_d[0].cpu()
    assert torch.isfinite(p[[0, 3]]).all()
    assert not torch.isfinite(p[[1, 2]]).any()


def test_adam_kernel_empty_lists_and_zero_sized(card, adam_op):
    adam_op(_noop(card), [], [], [], [], 1e-3, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)
    e = [torch.empty(0, device=card) for _ in range(4)]
    adam_op(_noop(card), [e[0]], [e[1]], [e[2]], [e[3]], 1e-3, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)


def test_adam_kernel_rejects_bad_lists(card, adam_op):
    params, grads, (ms, vs) = make_state(F32, seed=6, shapes=[(3,), (4,)])
    p_d, g_d, m_d, v_d = to_dev(params, card), to_dev(grads, card), to_dev(ms, card), to_dev(vs, card)
    with pytest.raises((ValueError, RuntimeError)):
        adam_op(_noop(card), g_d[:1], p_d, m_d, v_d, 1e-3, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)
    with pytest.raises((ValueError, RuntimeError)):
        adam_op(_noop(card), g_d, [params[0], p_d[1]], m_d, v_d, 1e-3, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)
    with pytest.raises((ValueError, RuntimeError)):
        adam_op(_noop(card), g_d[::-1], p_d, m_d, v_d, 1e-3, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)
    # nothing was touched
    for d, c in zip(p_d, params):
        assert torch.equal(d.cpu(), c)


@pytest.mark.parametrize("mode", [1, 0], ids=["adamw", "adam_l2"])
@pytest.mark.parametrize("wd", [0.0, 0.1], ids=["wd0", "wd"])
def test_adam_kernel_matches_torch_optim(card, adam_op, mode, wd):
    """mode 1 is torch.optim.AdamW; mode 0 is torch.optim.Adam with L2 weight decay."""
    lr, betas, eps, steps = 3e-3, (0.9, 0.99), 1e-8, 5
    g = torch.Generator().manual_seed(7)
    init = [torch.randn(s, generator=g) for s in SHAPES[:4]]
    grads = [[torch.randn(t.shape, generator=g) for t in init] for _ in range(steps)]

    ref_params = [nn.Parameter(t.clone().to(card)) for t in init]
    cls = torch.optim.AdamW if mode == 1 else torch.optim.Adam
    opt = cls(ref_params, lr=lr, betas=betas, eps=eps, weight_decay=wd, foreach=False)
    ker_params = [nn.Parameter(t.clone().to(card)) for t in init]
    m_d = [torch.zeros_like(p) for p in ker_params]
    v_d = [torch.zeros_like(p) for p in ker_params]
    noop = _noop(card)
    for k in range(steps):
        for p, gr in zip(ref_params, grads[k]):
            p.grad = gr.to(card)
        opt.step()
        adam_op(noop, [gr.to(card) for gr in grads[k]], ker_params, m_d, v_d, lr, betas[0], betas[1], eps,
                k + 1, mode, 1, wd)
    for i, (a, b) in enumerate(zip(ker_params, ref_params)):
        torch.testing.assert_close(a.detach().cpu(), b.detach().cpu(), rtol=1e-5, atol=1e-6, msg=f"param {i}")
        torch.testing.assert_close(m_d[i].cpu(), opt.state[b]["exp_avg"].cpu(), rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(v_d[i].cpu(), opt.state[b]["exp_avg_sq"].cpu(), rtol=1e-5, atol=1e-9)


def test_fused_adam_mlu_only(card, fused_adam):
    """The MLU name: 13 positional args, the int32 [1] noop flag on the device, returns None."""
    params, grads, (ms, vs) = make_state(F32, seed=8, shapes=[(3, 3)])
    p_d, g_d, m_d, v_d = to_dev(params, card), to_dev(grads, card), to_dev(ms, card), to_dev(vs, card)
    r = fused_adam(_noop(card), g_d, p_d, m_d, v_d, 1e-3, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)
    assert r is None
    p, _, _ = adam_ref(grads[0], params[0], ms[0], vs[0], 1e-3, 0.9, 0.999, 1e-8, 1, 1, 1, 0.0)
    assert_matches(p_d[0], p, F32)


def test_multi_tensor_adam_supa_only(card, ds_ops):
    params, grads, (ms, vs) = make_state(F32, seed=8, shapes=[(3, 3)])
    p_d, g_d, m_d, v_d = to_dev(params, card), to_dev(grads, card), to_dev(ms, card), to_dev(vs, card)
    r = ds_ops.multi_tensor_adam(CHUNK, _noop(card), g_d, p_d, m_d, v_d, 1e-3, 0.9, 0.999, 1e-8, 1, 0, 1, 0.01)
    assert r is None
    p, _, _ = adam_ref(grads[0], params[0], ms[0], vs[0], 1e-3, 0.9, 0.999, 1e-8, 1, 0, 1, 0.01)
    assert_matches(p_d[0], p, F32)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: DT_ID[d])
def test_adam_kernel_noncontiguous_and_second_device(card, dm, adam_op, dtype):
    if dm.device_count() < 2:
        pytest.skip("needs two cards")
    dev = f"{card}:1"
    params, grads, (ms, vs) = make_state(dtype, seed=9, shapes=[(6, 8)])
    # non-contiguous views of bigger buffers, on the second card
    bufs = [torch.zeros(8, 12, dtype=dtype, device=dev) for _ in range(4)]
    views = [b[:, 2:8].t() for b in bufs]
    for v, src in zip(views, (grads[0], params[0], ms[0], vs[0])):
        v.copy_(src)
    adam_op(_noop(dev), [views[0]], [views[1]], [views[2]], [views[3]], 1e-2, 0.9, 0.999, 1e-8, 1, 1, 1, 0.1)
    p, m, v = adam_ref(grads[0], params[0], ms[0], vs[0], 1e-2, 0.9, 0.999, 1e-8, 1, 1, 1, 0.1)
    assert views[1].device == torch.device(card, 1)
    assert_matches(views[1], p, dtype, "param")
    assert_matches(views[2], m, dtype, "exp_avg")
    assert_matches(views[3], v, dtype, "exp_avg_sq")
    # outside the views nothing changed
    assert torch.count_nonzero(bufs[1][:, :2].cpu()) == 0 and torch.count_nonzero(bufs[1][:, 8:].cpu()) == 0


# --------------------------------------------------------------------------------------
# Lion (SUPA)
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: DT_ID[d])
@pytest.mark.parametrize("wd", [0.0, 0.1], ids=["wd0", "wd"])
def test_multi_tensor_lion_matches_reference(card, ds_ops, dtype, wd):
    lr, b1, b2 = 1e-3, 0.9, 0.99
    params, grads, (ms,) = make_state(dtype, seed=10, n_moments=1)
    p_d, g_d, m_d = to_dev(params, card, param=True), to_dev(grads, card), to_dev(ms, card)
    ptrs = [t.data_ptr() for l in (p_d, m_d) for t in l]
    for step in (1, 2, 3):
        before = [(p.detach().cpu(), m.cpu()) for p, m in zip(p_d, m_d)]
        r = ds_ops.multi_tensor_lion(CHUNK, _noop(card), g_d, p_d, m_d, lr, b1, b2, step, wd)
        assert r is None
        for i, (g, (p, m)) in enumerate(zip(grads, before)):
            rp, rm, ambiguous, other = lion_ref(g, p, m, lr, b1, b2, wd)
            assert ambiguous.sum().item() <= 2 + 0.01 * ambiguous.numel()
            got = p_d[i].detach().cpu()
            flipped = ambiguous & (got == other.to(dtype))
            rp = torch.where(flipped, other, rp)
            assert_matches(p_d[i], rp, dtype, f"step {step} param {i}")
            assert_matches(m_d[i], rm, dtype, f"step {step} exp_avg {i}")
    assert ptrs == [t.data_ptr() for l in (p_d, m_d) for t in l]
    for gd, g in zip(g_d, grads):
        assert torch.equal(gd.cpu(), g)
    for p in p_d:
        assert p.requires_grad and p.is_leaf


def test_multi_tensor_lion_zero_direction_steps_up(card, ds_ops):
    """c = b1*m + (1-b1)*g == 0 moves the parameter by +lr (CUDA), not by 0 (sign())."""
    p = torch.tensor([1.0, 1.0, 1.0], device=card)
    g = torch.tensor([0.0, 1.0, -1.0], device=card)
    m = torch.zeros(3, device=card)
    ds_ops.multi_tensor_lion(CHUNK, _noop(card), [g], [p], [m], 0.5, 0.9, 0.99, 1, 0.0)
    assert p.cpu().tolist() == [1.5, 0.5, 1.5]
    torch.testing.assert_close(m.cpu(), torch.tensor([0.0, 0.01, -0.01]))


# --------------------------------------------------------------------------------------
# LAMB (SUPA)
# --------------------------------------------------------------------------------------
LAMB_CASES = [
    # (id, max_coeff, min_coeff, eps_mode, bias_correction, wd, combined_scale)
    ("default", 10.0, 0.01, 1, 1, 0.01, 1.0),
    ("eps_inside_sqrt", 10.0, 0.01, 0, 1, 0.01, 1.0),
    ("no_bias_correction", 10.0, 0.01, 1, 0, 0.0, 1.0),
    ("clamped_max", 0.05, 0.01, 1, 1, 0.0, 1.0),
    ("clamped_min", 1e3, 50.0, 1, 1, 0.1, 1.0),
    ("combined_scale", 10.0, 0.01, 1, 1, 0.01, 128.0),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: DT_ID[d])
@pytest.mark.parametrize("case", LAMB_CASES, ids=[c[0] for c in LAMB_CASES])
def test_lamb_matches_reference(card, ds_ops, dtype, case):
    _, max_c, min_c, eps_mode, bc, wd, scale = case
    lr, b1, b2, eps = 1e-2, 0.9, 0.999, 1e-6
    params, grads, (ms, vs) = make_state(dtype, seed=11, shapes=[(6, 5), (40,)])
    grads = [(g.float() * scale).to(dtype) for g in grads]
    for i in range(len(params)):
        p_d = nn.Parameter(params[i].clone().to(card))
        g_d, m_d, v_d = grads[i].to(card), ms[i].to(card), vs[i].to(card)
        p_ptr = p_d.data_ptr()
        p, m, v = params[i], ms[i], vs[i]
        for step in (1, 2):
            coeff = ds_ops.lamb(p_d, torch.tensor([], dtype=torch.float), m_d, v_d, g_d, lr, b1, b2, max_c, min_c,
                                eps, scale, step, eps_mode, bc, wd)
            p, m, v, c_ref = lamb_ref(p, m, v, grads[i], lr, b1, b2, max_c, min_c, eps, scale, step, eps_mode, bc, wd)
            p, m, v = p.to(dtype), m.to(dtype), v.to(dtype)
            assert isinstance(coeff, torch.Tensor) and coeff.numel() == 1
            assert coeff.item() == pytest.approx(c_ref.item(), rel=1e-5)
            if case[0] == "clamped_max":
                assert coeff.item() == pytest.approx(max_c)
            if case[0] == "clamped_min":
                assert coeff.item() == pytest.approx(min_c)
        assert p_d.data_ptr() == p_ptr
        assert_matches(p_d, p.float(), dtype, f"param {i}")
        assert_matches(m_d, m.float(), dtype, f"exp_avg {i}")
        assert_matches(v_d, v.float(), dtype, f"exp_avg_sq {i}")
        assert torch.equal(g_d.cpu(), grads[i])
        assert p_d.requires_grad and p_d.is_leaf


def test_lamb_coefficient_is_one_for_zero_norms(card, ds_ops):
    p = torch.zeros(4, 4, device=card)
    m, v = torch.zeros_like(p), torch.zeros_like(p)
    g = torch.randn(4, 4).to(card)
    c = ds_ops.lamb(p, torch.tensor([]), m, v, g, 1e-2, 0.9, 0.999, 10.0, 0.01, 1e-6, 1.0, 1, 1, 1, 0.0)
    assert c.item() == 1.0
    pr, _, _, _ = lamb_ref(torch.zeros(4, 4), torch.zeros(4, 4), torch.zeros(4, 4), g.cpu(), 1e-2, 0.9, 0.999,
                           10.0, 0.01, 1e-6, 1.0, 1, 1, 1, 0.0)
    assert_matches(p, pr, F32)
    # zero gradient and zero moments: the update is 0, so is its norm
    p2 = torch.randn(5).to(card)
    before = p2.cpu()
    z = torch.zeros(5, device=card)
    c2 = ds_ops.lamb(p2, torch.tensor([]), z.clone(), z.clone(), z.clone(), 1e-2, 0.9, 0.999, 10.0, 0.01, 1e-6,
                     1.0, 1, 1, 1, 0.0)
    assert c2.item() == 1.0
    assert torch.equal(p2.cpu(), before)


@pytest.mark.parametrize("copy_kind", ["device_fp16", "device_fp32", "cpu_fp32"])
def test_lamb_writes_p_copy(card, ds_ops, copy_kind):
    params, grads, (ms, vs) = make_state(F32, seed=12, shapes=[(4, 6)])
    p_d, g_d, m_d, v_d = params[0].to(card), grads[0].to(card), ms[0].to(card), vs[0].to(card)
    if copy_kind == "device_fp16":
        p_copy = torch.zeros(24, dtype=F16, device=card)
    elif copy_kind == "device_fp32":
        p_copy = torch.zeros(4, 6, device=card)
    else:
        p_copy = torch.zeros(4, 6)
    ds_ops.lamb(p_d, p_copy, m_d, v_d, g_d, 1e-2, 0.9, 0.999, 10.0, 0.01, 1e-6, 1.0, 1, 1, 1, 0.01)
    p, _, _, _ = lamb_ref(params[0], ms[0], vs[0], grads[0], 1e-2, 0.9, 0.999, 10.0, 0.01, 1e-6, 1.0, 1, 1, 1, 0.01)
    assert_matches(p_d, p, F32, "param")
    torch.testing.assert_close(p_copy.cpu(), p.to(p_copy.dtype).reshape(p_copy.shape), rtol=1e-3, atol=1e-6)


# --------------------------------------------------------------------------------------
# The deepspeed namespace is SUPA's: in an MLU process it cannot be imported
# --------------------------------------------------------------------------------------
def test_supa_ext_import_fails_on_mlu(card):
    if card != "mlu":
        pytest.skip("checked in the MLU process")
    with pytest.raises(ImportError):
        import torch_supa_ext.deepspeed  # noqa: F401
    assert not hasattr(torch.ops.deepspeed, "multi_tensor_lion")
    assert not hasattr(torch.ops.deepspeed, "lamb")
