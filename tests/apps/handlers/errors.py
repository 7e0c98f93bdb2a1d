"""An unmodified Runpod handler failing in both of Runpod's shapes: a raised exception, a returned error."""

import runpod


def handler(job):
    if job["input"].get("mode") == "raise":
        raise ValueError(f"raised {job['input'].get('why')}")
    return {"error": f"returned {job['input'].get('why')}"}


runpod.serverless.start({"handler": handler})
