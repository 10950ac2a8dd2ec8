# Golden trace: a 2-rank data-parallel step (cncl all-reduces of the gradients); rank 1
# works twice as long.
import torch, torch_mlu
import torch.distributed as dist
dist.init_process_group("cncl")
rank = dist.get_rank()
torch.mlu.set_device(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)).to("mlu")
x = torch.randn(64 * (rank + 1), 256, device="mlu")        # rank 1 works twice as long
for _ in range(2):
    loss = model(x).square().mean()
    loss.backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
torch.mlu.synchronize()
dist.destroy_process_group()
