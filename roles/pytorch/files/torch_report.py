"""Print, as JSON, what this node's torch is and which GPUs it can use."""

import glob
import json

import torch

# What the kernel driver sees, independent of torch: a node can have GPUs that
# torch cannot use (no driver, a driver too old for the CUDA build, a CPU build).
nvidia_gpus = len(glob.glob("/proc/driver/nvidia/gpus/*")) or len(glob.glob("/dev/nvidia[0-9]*"))

# The NCCL torch loads (its nvidia-nccl wheel's), not the system's libnccl.
try:
    nccl_version = ".".join(str(part) for part in torch.cuda.nccl.version())
except (AttributeError, RuntimeError):
    nccl_version = ""

print(
    json.dumps(
        {
            "torch": torch.__version__,
            "cuda_build": torch.version.cuda,
            "cuda_available": torch.cuda.is_available(),
            "gpu_count": torch.cuda.device_count(),
            "nvidia_gpus": nvidia_gpus,
            "nccl": torch.distributed.is_nccl_available(),
            "nccl_version": nccl_version,
            "gloo": torch.distributed.is_gloo_available(),
        }
    )
)
