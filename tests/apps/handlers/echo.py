"""An unmodified Runpod handler: echoes its input and says where it ran."""

import os

import runpod


def handler(job):
    return {
        "input": job["input"],
        "worker": os.environ["RUNPOD_POD_ID"],
        "gpu": os.environ.get("FLASHPOINT_GPU_MODEL"),
        "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


runpod.serverless.start({"handler": handler})
