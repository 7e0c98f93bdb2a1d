"""An unmodified Runpod async handler with concurrency_modifier: three jobs that only finish together."""

import asyncio
import os

import runpod


async def handler(job):
    mine, others = job["input"]["mine"], job["input"]["others"]
    open(mine, "w").close()
    while not all(os.path.exists(path) for path in others):
        await asyncio.sleep(0.01)
    return os.environ["RUNPOD_POD_ID"]


runpod.serverless.start({"handler": handler, "concurrency_modifier": lambda current: 3})
