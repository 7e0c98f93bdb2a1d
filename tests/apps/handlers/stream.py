"""An unmodified Runpod generator handler; AGGREGATE=1 turns on return_aggregate_stream."""

import os
import time

import runpod


def handler(job):
    for i in range(job["input"]["n"]):
        time.sleep(0.02)
        yield {"i": i}


runpod.serverless.start({"handler": handler, "return_aggregate_stream": os.environ.get("AGGREGATE") == "1"})
