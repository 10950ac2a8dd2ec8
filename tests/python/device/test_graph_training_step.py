"""A whole training step — forward, backward and the optimizer step — captured into one graph
replays to the same parameters as the eager step (checked on both cards), at a lower
simulated cost than eager launches."""
import copy

import pytest
import torch


def _model(card):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8)).to(card)


def _conv_model(card):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(4, 2, 3, stride=2), torch.nn.Flatten(),
                               torch.nn.Linear(2 * 5 * 5, 8)).to(card)


MODELS = {"mlp": (_model, (16, 32)), "conv": (_conv_model, (8, 3, 12, 12))}


@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9),
    lambda p: torch.optim.Adam(p, lr=1e-2, capturable=True),
    lambda p: torch.optim.Adam(p, lr=1e-2, capturable=True, fused=True),   # torch's fused Adam kernel
], ids=["sgd", "adam-capturable", "adam-fused-capturable"])
@pytest.mark.parametrize("model", ["mlp", "conv"])
def test_captured_training_step_matches_eager(dm, card, make_opt, model):
    make_model, x_shape = MODELS[model]
    eager, captured = make_model(card), make_model(card)
    opt_e, opt_c = make_opt(eager.parameters()), make_opt(captured.parameters())
    torch.manual_seed(1)
    batches = [(torch.randn(*x_shape), torch.randn(x_shape[0], 8)) for _ in range(6)]
    x = torch.zeros(*x_shape, device=card)
    t = torch.zeros(x_shape[0], 8, device=card)

    def step(model, opt):
        opt.zero_grad(set_to_none=False)
        loss = torch.nn.functional.mse_loss(model(x), t)
        loss.backward()
        opt.step()
        return loss

    # warm-up (optimizer state, autograd's buffers) on a side stream, both models alike
    side = dm.Stream()
    side.wait_stream(dm.current_stream())
    with dm.stream(side):
        for xb, tb in batches[:3]:
            x.copy_(xb.to(card)); t.copy_(tb.to(card))
            step(eager, opt_e)
            step(captured, opt_c)
    dm.current_stream().wait_stream(side)
    G = getattr(dm, "MLUGraph" if card == "mlu" else "SUPAGraph")
    g = G()
    with dm.graph(g):
        static_loss = step(captured, opt_c)
    # the capture ran nothing: replay each remaining batch, eager alongside
    for xb, tb in batches[3:]:
        x.copy_(xb.to(card)); t.copy_(tb.to(card))
        g.replay()
        eager_loss = step(eager, opt_e)
        dm.synchronize()
        assert static_loss.item() == pytest.approx(eager_loss.item(), rel=1e-5)
    for pe, pc in zip(eager.parameters(), captured.parameters()):
        assert torch.allclose(pe.cpu(), pc.cpu(), atol=1e-6), (pe.cpu() - pc.cpu()).abs().max()


def test_a_replayed_step_costs_less_simulated_time_than_eager(dm, card):
    model = _model(card)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, t = torch.randn(16, 32, device=card), torch.randn(16, 8, device=card)

    def step():
        opt.zero_grad(set_to_none=False)
        torch.nn.functional.mse_loss(model(x), t).backward()
        opt.step()

    side = dm.Stream()
    side.wait_stream(dm.current_stream())
    with dm.stream(side):
        for _ in range(2):
            step()
    dm.current_stream().wait_stream(side)
    G = getattr(dm, "MLUGraph" if card == "mlu" else "SUPAGraph")
    g = G()
    with dm.graph(g):
        step()

    def timed(f):
        a, b = dm.Event(enable_timing=True), dm.Event(enable_timing=True)
        dm.synchronize()
        a.record()
        for _ in range(4):
            f()
        b.record()
        b.synchronize()
        return a.elapsed_time(b)

    eager_ms, graph_ms = timed(step), timed(g.replay)
    assert 0 < graph_ms < eager_ms, (graph_ms, eager_ms)
