"""Extensions for the SUPA device; ``torch_supa_ext.deepspeed`` registers DeepSpeed's
fused kernels as ``torch.ops.deepspeed.*``."""
