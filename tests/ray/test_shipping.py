"""Every node of a cluster (issue 13): a worker on a Ray node that does not share the app's folder with the plane gets
its code and its environment through Ray.

A real two-node local Ray cluster (a head without GPUs, a node with four simulated H200s) runs in a mount namespace
where a tmpfs covers the test's ``hidden`` folder: the app module, the script and the plane's code files live there,
so no Ray process (and no worker) can read them. The plane runs outside, in a script of its own
(``tests/apps/ray_shipped_script.py``): a function pickled from that script using a module beside it, an app module
imported by path, an endpoint with ``dependencies=["six==1.15.0"]`` (the host has another six) and one whose
requirement does not exist.
Where ``unshare`` is refused (no user namespaces), the cluster runs unhidden and only what the workers report (their
code file, folder and interpreter are Ray's, not the plane's) is checked.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(420)]

APPS = Path(__file__).resolve().parents[1] / "apps"

#: the two-node cluster, started inside the namespace (after the tmpfs covers the hidden folder); it prints its address
#: and runs until its stdin closes, then removes its session folder
CLUSTER = """
import json, os, shutil, subprocess, sys
hidden, hide = sys.argv[1], sys.argv[2] == "hide"
if hide:
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "flashpoint-hidden", hidden], check=True)
import ray.cluster_utils
cluster = ray.cluster_utils.Cluster(
    initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False}
)
node = cluster.add_node(num_cpus=1, num_gpus=4, labels={"gpu-model": "NVIDIA-H200", "flashpoint-simulated": "1"})
cluster.wait_for_nodes()
print(json.dumps({"address": cluster.address, "gpu_node": node.node_id, "sees": os.listdir(hidden)}), flush=True)
sys.stdin.read()
session = cluster.head_node.get_session_dir_path()
cluster.shutdown()
shutil.rmtree(session, ignore_errors=True)  # its environments are copies of the whole virtualenv: 700 MB here
"""


def _namespace() -> list[str] | None:
    """The ``unshare`` prefix that gives the cluster a mount namespace of its own, or None where it is refused."""
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        return None
    prefix = [unshare, "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        prefix.insert(1, "--map-root-user")
    probe = subprocess.run([*prefix, "--", "true"], capture_output=True, timeout=30, check=False)
    return prefix if probe.returncode == 0 else None


@dataclass
class HiddenCluster:
    address: str
    gpu_node: str
    hidden: bool
    proc: subprocess.Popen[str]


@pytest.fixture(scope="module")
def hidden_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HiddenCluster, Path]]:
    """The cluster, and the folder its processes cannot see (empty there, for this module's tests)."""
    hidden = tmp_path_factory.mktemp("shipping") / "hidden"
    for folder in ("app", "script", "tmp"):
        (hidden / folder).mkdir(parents=True)
    prefix = _namespace()
    command = [sys.executable, "-c", CLUSTER, str(hidden), "hide" if prefix else "show"]
    if prefix is not None:
        command = [*prefix, "--", *command]
    # one try per node at installing an environment (Ray's default is three): a missing package fails sooner
    env = {**os.environ, "RUNTIME_ENV_RETRY_TIMES": "1"}
    proc = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        deadline = time.monotonic() + 120
        line = ""
        while not line and time.monotonic() < deadline and proc.poll() is None:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                line = proc.stdout.readline()
        assert line, f"the cluster did not start (exit {proc.poll()})"
        started = json.loads(line)
        if prefix is not None:
            assert started["sees"] == [], "the tmpfs does not cover the hidden folder inside the namespace"
        yield HiddenCluster(started["address"], started["gpu_node"], prefix is not None, proc), hidden
    finally:
        proc.stdin.close()  # the cluster shuts itself down; its process group is ended if it does not in time
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        proc.stdout.close()


def six_module_file() -> str:
    """Where the host's own six lives (its site-packages), which a worker in an environment must not put first."""
    import six

    return str(six.__file__)


def test_code_and_environment_reach_a_node_that_cannot_see_the_app(hidden_cluster, tmp_path: Path) -> None:
    cluster, hidden = hidden_cluster
    shutil.copy(APPS / "ray_shipped_app.py", hidden / "app")
    shutil.copy(APPS / "ray_shipped_script.py", hidden / "script")
    shutil.copy(APPS / "ray_shipped_helper.py", hidden / "script")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "FLASHPOINT_"))}
    env.update(
        FLASHPOINT_BACKEND="ray",
        FLASHPOINT_RAY_ADDRESS=cluster.address,
        FLASHPOINT_STATE_DIR=str(tmp_path / "state"),
        TMPDIR=str(hidden / "tmp"),  # the plane's code files: hidden from the nodes too
        SHIPPING_JOB_TIMEOUT_S="240",
    )
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, str(hidden / "script" / "ray_shipped_script.py"), str(hidden / "app"), str(hidden)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=360,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    jobs = json.loads(result.stdout.strip().splitlines()[-1])["jobs"]
    print(f"four jobs ended in {time.monotonic() - started:.0f}s (hidden folder: {cluster.hidden})")

    # (a) a function defined in the script: its pickled bytes came through Ray, into a file of the actor's own
    script = jobs["script"]
    assert script["status"] == "COMPLETED", script
    out = script["output"]
    assert out["node"] == cluster.gpu_node
    code_file = out["argv"][out["argv"].index("--pickle") + 1]
    assert not code_file.startswith(str(hidden)) and os.path.basename(os.path.dirname(code_file)).startswith(
        "flashpoint-code-"
    )
    assert out["hidden_visible"] is not cluster.hidden
    # the module beside the script, which the pickled function uses by reference, came as the working_dir
    assert out["cwd"] != str(hidden / "script") and "working_dir_files" in out["cwd"]
    assert out["helper_file"] == os.path.join(out["cwd"], "ray_shipped_helper.py")

    # (b) an app module imported by path: its folder came as the actor's working_dir, which the worker runs in
    app = jobs["app"]
    assert app["status"] == "COMPLETED", app
    out = app["output"]
    assert out["node"] == cluster.gpu_node
    assert out["argv"][-2:] == ["--import", "ray_shipped_app:from_app"]
    assert out["cwd"] != str(hidden / "app") and "working_dir_files" in out["cwd"]
    assert out["file"] == os.path.join(out["cwd"], "ray_shipped_app.py")
    # the worker imports from the shipped folder, first; the plane's folder for the app is not on its path
    pythonpath = out["pythonpath"].split(os.pathsep)
    assert pythonpath[0] == out["cwd"] and str(hidden / "app") not in pythonpath
    assert out["hidden_visible"] is not cluster.hidden

    # (c) dependencies: Ray's pip runtime_env on the node, whose interpreter runs the worker, the pin winning over the
    # host's six (PYTHONPATH does not name the host's site-packages)
    six = jobs["six"]
    assert six["status"] == "COMPLETED", six
    out = six["output"]
    assert out["six"] == "1.15.0"
    assert "runtime_resources" in out["executable"] and out["executable"] != sys.executable
    assert out["six_file"].startswith(os.path.dirname(os.path.dirname(out["executable"])))
    host_site = os.path.dirname(six_module_file())
    assert not any(p.startswith(host_site) for p in out["pythonpath"].split(os.pathsep)), out["pythonpath"]

    # (d) a requirement that does not exist: the worker never starts, and the job fails at the first attempt
    # (environment_failed: the same requirements would fail the same way) with pip's own words
    missing = jobs["missing"]
    assert missing["status"] == "FAILED", missing
    assert missing["reason"] == "environment_failed", missing
    assert missing["error"]["type"] == "EnvironmentSetupError", missing
    message = missing["error"]["message"]
    assert "could not set up its environment" in message, message
    assert "flashpoint-no-such-package==0.0.1" in message and "ERROR:" in message, message


async def test_an_installation_slower_than_its_timeout_fails_the_start_in_bounded_time(hidden_cluster) -> None:
    import ray

    from flashpoint.backends.base import Launch
    from flashpoint.backends.ray import RayBackend
    from flashpoint.backends.rayship import EnvironmentSetupError

    cluster, _ = hidden_cluster
    # Ray's own setup timeout (1 s) ends it, well before the start's own bound (ready 120 s + setup 1 s)
    backend = RayBackend(cluster.address, ready_timeout_s=120, env_setup_timeout_s=1)
    await asyncio.to_thread(backend.connect)
    try:
        (device, *_) = backend.devices()
        env = {"FLASHPOINT_DEPENDENCIES": json.dumps(["six==1.16.0"])}
        launch = Launch("w-slow-env", "ep", [sys.executable, "-c", "print('never runs')"], env, (device,))
        started = time.monotonic()
        with pytest.raises(EnvironmentSetupError, match="within the timeout of 1 seconds") as raised:
            await backend.start(launch, lambda *line: None, lambda *exit: None)
        assert time.monotonic() - started < 60
        assert raised.value.requirements == ("six==1.16.0",)
        assert "could not set up its environment" in str(raised.value)
    finally:
        await backend.close()
    assert not ray.is_initialized()
