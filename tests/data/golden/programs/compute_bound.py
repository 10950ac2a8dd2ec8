# Golden trace: compute-bound bf16 GEMMs (memory bandwidth barely matters).
import torch, torch_mlu
x = torch.randn(2048, 2048, device="mlu", dtype=torch.bfloat16)
for _ in range(6):
    y = x @ x
torch.mlu.synchronize()
