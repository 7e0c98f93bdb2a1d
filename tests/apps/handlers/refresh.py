"""An unmodified Runpod handler with refresh_worker: each worker process serves one job."""

import os

import runpod


def handler(job):
    return os.environ["RUNPOD_POD_ID"]


runpod.serverless.start({"handler": handler, "refresh_worker": True})
