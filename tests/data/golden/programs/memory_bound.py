# Golden trace: memory-bound elementwise kernels (a what-if on memory bandwidth).
import torch, torch_mlu
x = torch.ones(1 << 22, device="mlu")
for _ in range(20):
    x = x * 1.0001 + 0.5
torch.mlu.synchronize()
print(torch.mlu.get_device_properties(0).memory_bandwidth)
