"""An unmodified Runpod handler whose process is killed in the middle of its first job."""

import os
import signal

import runpod


def handler(job):
    marker = job["input"]["marker"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return os.environ["RUNPOD_POD_ID"]


runpod.serverless.start({"handler": handler})
