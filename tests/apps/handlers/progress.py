"""An unmodified Runpod handler that reports progress, then waits for a gate file before it returns."""

import os
import time

import runpod


def handler(job):
    runpod.serverless.progress_update(job, {"step": "half"})
    while not os.path.exists(job["input"]["gate"]):
        time.sleep(0.01)
    return {"step": "done"}


runpod.serverless.start({"handler": handler})
