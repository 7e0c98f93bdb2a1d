"""An unmodified Runpod sync handler that sleeps (it cannot be interrupted)."""

import os
import time

import runpod


def handler(job):
    time.sleep(job["input"]["seconds"])
    return os.environ["RUNPOD_POD_ID"]


runpod.serverless.start({"handler": handler})
