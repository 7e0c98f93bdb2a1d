"""An unmodified Runpod handler that cannot start: it fails before runpod.serverless.start."""

import runpod

raise RuntimeError("model weights not found at /models/sdxl")


def handler(job):
    return job["input"]


runpod.serverless.start({"handler": handler})
