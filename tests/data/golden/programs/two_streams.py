# Golden trace: one rank, two streams with an event wait, a pinned copy, the second card.
import torch, torch_mlu
x = torch.randn(384, 384, device="mlu")
side = torch.mlu.Stream()
h = torch.empty(1 << 16).pin_memory()
for i in range(4):
    y = (x @ x).relu()
    with torch.mlu.stream(side):
        w = torch.ones(1 << 18, device="mlu") * 3
        done = torch.mlu.Event()
        done.record()
    torch.mlu.current_stream().wait_event(done)
    z = y.sum() + w.sum()
    h.copy_(w[: 1 << 16], non_blocking=True)
    torch.ones(8, device="mlu:1").add_(1)          # the second card too
torch.mlu.synchronize()
print(z.item())
