"""make_graphed_callables and autograd inside a capture: graphed forward and backward give
the eager results (checked against the CPU), and events recorded inside a capture (the
autograd engine's stream synchronization) no longer invalidate it."""
import copy

import pytest
import torch


def _cpu_twin(module):
    twin = copy.deepcopy(module).cpu()
    return twin


def test_backward_captured_into_a_graph_matches_the_cpu(dm, card):
    torch.manual_seed(0)
    m = torch.nn.Linear(64, 32).to(card)
    x = torch.randn(8, 64, device=card, requires_grad=True)
    side = dm.Stream()
    side.wait_stream(dm.current_stream())
    with dm.stream(side):                                   # warm-up, as capture wants
        for _ in range(2):
            torch.autograd.grad(m(x).relu().sum(), (x, m.weight, m.bias))
    dm.current_stream().wait_stream(side)
    G = getattr(dm, "MLUGraph" if card == "mlu" else "SUPAGraph")
    fwd, bwd = G(), G()
    with dm.graph(fwd):
        out = m(x).relu()
    grad_out = torch.empty_like(out)
    with dm.graph(bwd):
        grads = torch.autograd.grad(out, (x, m.weight, m.bias), grad_outputs=grad_out)
    for seed in (1, 2):
        torch.manual_seed(seed)
        new_x, new_g = torch.randn(8, 64), torch.randn(8, 32)
        x.data.copy_(new_x.to(card))
        grad_out.copy_(new_g.to(card))
        fwd.replay()
        bwd.replay()
        dm.synchronize()
        ref = _cpu_twin(m)
        xr = new_x.clone().requires_grad_()
        want = torch.autograd.grad(ref(xr).relu(), (xr, ref.weight, ref.bias), grad_outputs=new_g)
        for got, exp in zip(grads, want):
            assert torch.allclose(got.cpu(), exp, atol=1e-5), (got.cpu() - exp).abs().max()


def test_make_graphed_callables_trains_like_eager(dm, card):
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 4)).to(card)
    graphed = copy.deepcopy(eager)
    sample = torch.randn(16, 32, device=card, requires_grad=True)
    graphed = dm.make_graphed_callables(graphed, (sample,))
    assert isinstance(graphed, torch.nn.Module)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_g = torch.optim.SGD(graphed.parameters(), lr=0.1)
    for step in range(3):
        torch.manual_seed(100 + step)
        x = torch.randn(16, 32, device=card, requires_grad=True)
        t = torch.randn(16, 4, device=card)
        for model, opt in ((eager, opt_e), (graphed, opt_g)):
            opt.zero_grad()
            xi = x.detach().clone().requires_grad_()
            loss = torch.nn.functional.mse_loss(model(xi), t)
            loss.backward()
            opt.step()
            if model is eager:
                eager_loss, eager_xgrad = loss.item(), xi.grad.cpu()
            else:
                assert loss.item() == pytest.approx(eager_loss, rel=1e-5, abs=1e-6), step
                assert torch.allclose(xi.grad.cpu(), eager_xgrad, atol=1e-6), step
    for pe, pg in zip(eager.parameters(), graphed.parameters()):
        assert torch.allclose(pe.cpu(), pg.cpu(), atol=1e-6)
    # in eval mode (not the captured training state) the module's own forward runs
    graphed.eval()
    with torch.no_grad():
        y = torch.randn(16, 32, device=card)
        assert torch.allclose(graphed(y).cpu(), eager.eval()(y).cpu(), atol=1e-6)


def test_make_graphed_callables_functions_and_tuples(dm, card):
    torch.manual_seed(0)
    w = torch.randn(8, 8, device=card, requires_grad=True)

    def f(a):
        return (a @ w).tanh()

    def g(b):
        return b.sigmoid() * 2

    a = torch.randn(4, 8, device=card, requires_grad=True)
    b = torch.randn(4, 8, device=card, requires_grad=True)
    gf, gg = dm.make_graphed_callables((f, g), ((a,), (b,)))
    x = torch.randn(4, 8, device=card, requires_grad=True)
    out = gg(gf(x))
    out.sum().backward()
    xr = x.detach().cpu().requires_grad_()
    ref = ((xr @ w.detach().cpu()).tanh().sigmoid() * 2)
    ref.sum().backward()
    assert torch.allclose(out.detach().cpu(), ref.detach(), atol=1e-6)
    assert torch.allclose(x.grad.cpu(), xr.grad, atol=1e-5)


def test_make_graphed_callables_refuses_bad_sample_args(dm, card):
    m = torch.nn.Linear(4, 4).to(card)
    with pytest.raises(TypeError, match="only tensors"):
        dm.make_graphed_callables(m, (3,))
    with pytest.raises(ValueError, match="callable"):
        dm.make_graphed_callables((m, m), ((torch.randn(2, 4, device=card),),))


def test_side_stream_forked_and_joined_inside_a_capture(dm, card):
    G = getattr(dm, "MLUGraph" if card == "mlu" else "SUPAGraph")
    x = torch.arange(4.0, device=card)
    side = dm.Stream()
    g = G()
    with dm.graph(g):
        y = x * 2
        side.wait_stream(dm.current_stream())        # fork: the side stream joins the capture
        with dm.stream(side):
            z = y + 1
        dm.current_stream().wait_stream(side)        # join
        w = z * 3
    x.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]).to(card))
    g.replay()
    dm.synchronize()
    assert torch.equal(w.cpu(), (torch.tensor([1.0, 2.0, 3.0, 4.0]) * 2 + 1) * 3)
    with dm.stream(side):                            # eager again outside the capture
        v = x + 10
    dm.synchronize()
    assert torch.equal(v.cpu(), torch.tensor([11.0, 12.0, 13.0, 14.0]))


def test_a_forked_stream_never_joined_back_fails_the_capture_and_streams_stay_usable(dm, card):
    G = getattr(dm, "MLUGraph" if card == "mlu" else "SUPAGraph")
    x = torch.ones(4, device=card)
    side = dm.Stream()
    g = G()
    with pytest.raises(RuntimeError, match="not joined back"):
        with dm.graph(g):
            side.wait_stream(dm.current_stream())
            with dm.stream(side):
                x.add_(1)
    assert dm.is_current_stream_capturing() is False
    with dm.stream(side):
        assert dm.is_current_stream_capturing() is False
        y = x * 2
    dm.synchronize()
    assert y.shape == (4,)
