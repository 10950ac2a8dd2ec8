"""module.to(device) and param.data = t keep Parameter objects, as on CUDA.

PyTorch asks `torch._has_compatible_shallow_copy_type(param, moved)` to decide whether
`module.to()` swaps a parameter's data in place or makes a new Parameter. Its built-in rule
knows CPU and CUDA but not PrivateUse1, so without the card's own answer an optimizer built
before `.to(device)` keeps the old CPU Parameters and silently trains nothing.
"""
import copy

import pytest
import torch


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def test_compatible_shallow_copy_type_between_host_and_card(card):
    cpu = torch.zeros(2)
    dev = torch.zeros(2, device=card)
    assert torch._has_compatible_shallow_copy_type(cpu, dev)
    assert torch._has_compatible_shallow_copy_type(dev, cpu)
    assert torch._has_compatible_shallow_copy_type(dev, torch.zeros(3, device=card))
    # A sparse tensor is not interchangeable with a dense one, on the card as on CUDA.
    assert not torch._has_compatible_shallow_copy_type(dev, torch.zeros(2).to_sparse())


def test_module_to_keeps_parameter_objects(card):
    m = _model()
    before = [id(p) for p in m.parameters()]
    m.to(card)
    assert [id(p) for p in m.parameters()] == before
    assert all(p.device.type == card for p in m.parameters())
    m.to("cpu")
    assert [id(p) for p in m.parameters()] == before
    assert all(p.device.type == "cpu" for p in m.parameters())


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_optimizer_built_before_to_trains_like_cpu(card, opt_name):
    ref, dev = _model(), _model()
    make = lambda m: getattr(torch.optim, opt_name)(m.parameters(), lr=0.05)
    ref_opt, dev_opt = make(ref), make(dev)     # built before the move, as in user code
    dev.to(card)
    torch.manual_seed(1)
    batches = [(torch.randn(8, 6), torch.randn(8, 3)) for _ in range(3)]
    for x, y in batches:
        for m, opt, d in ((ref, ref_opt, "cpu"), (dev, dev_opt, card)):
            opt.zero_grad()
            torch.nn.functional.mse_loss(m(x.to(d)), y.to(d)).backward()
            opt.step()
    start = _model()
    for p_ref, p_dev, p0 in zip(ref.parameters(), dev.parameters(), start.parameters()):
        assert not torch.equal(p_dev.detach().cpu(), p0.detach())   # it trained
        torch.testing.assert_close(p_dev.detach().cpu(), p_ref.detach(), rtol=1e-5, atol=1e-6)


def test_parameter_data_assignment_across_host_and_card(card):
    p = torch.nn.Parameter(torch.zeros(4))
    ident = id(p)
    p.data = torch.arange(4.0, device=card)
    assert id(p) == ident and p.device.type == card and p.requires_grad
    assert p.detach().cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    (p * 2).sum().backward()
    assert p.grad.device.type == card
    assert p.grad.cpu().tolist() == [2.0] * 4
    p.data = torch.full((4,), 5.0)
    assert id(p) == ident and p.device.type == "cpu"
    p.grad = None
    (p * 3).sum().backward()
    assert p.grad.tolist() == [3.0] * 4


def test_gradients_move_with_their_parameters(card):
    m = _model()
    m(torch.randn(2, 6)).sum().backward()
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    grad_ids = {n: id(p.grad) for n, p in m.named_parameters()}
    m.to(card)
    for n, p in m.named_parameters():
        assert p.grad.device.type == card
        assert id(p.grad) == grad_ids[n]
        torch.testing.assert_close(p.grad.cpu(), grads[n])


def test_deepcopy_and_state_dict_round_trip_on_card(card):
    m = _model().to(card)
    c = copy.deepcopy(m)
    for a, b in zip(m.parameters(), c.parameters()):
        assert a.device == b.device and a.data_ptr() != b.data_ptr()
        torch.testing.assert_close(a.cpu(), b.cpu())
    fresh = _model()
    fresh.load_state_dict({k: v.cpu() for k, v in m.state_dict().items()})
    fresh_ids = [id(p) for p in fresh.parameters()]
    fresh.to(card).load_state_dict(m.state_dict())
    assert [id(p) for p in fresh.parameters()] == fresh_ids
