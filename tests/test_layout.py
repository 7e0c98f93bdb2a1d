"""Tests mirror the packages (docs/architecture.md, "Tests"): every module under ``src/flashpoint`` has a test file of
its own name in the matching folder (``sdk/endpoint.py`` -> ``tests/sdk/test_endpoint.py``; a flat vocabulary module
-> ``tests/test_<name>.py``), or ``COVERED_BY`` names the test file that covers it, and that file imports the module
or names it (its dotted name or its path) in its text, so an entry cannot point at a test that has nothing to do with
it. Test folders are packages of the source (or one of the cross-cutting groups), so a moved package moves its tests.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.test_import_graph import SRC, build_graph

TESTS = Path(__file__).resolve().parent
#: folders of tests that cut across packages, or hold what tests use rather than tests
CROSS_CUTTING = {"e2e", "hardening", "ray", "typing", "apps"}

#: module -> the test file that covers it, for modules without a test file of their own name
COVERED_BY = {
    "flashpoint.__main__": "cli/test_cli.py",
    "flashpoint._version": "test_public_api.py",
    "flashpoint.api.app": "api/test_docs_auth.py",
    "flashpoint.api.approutes": "hosting/test_deploy_serve.py",
    "flashpoint.api.deps": "api/test_docs_auth.py",
    "flashpoint.api.errors": "api/test_native.py",
    "flashpoint.api.flashroute": "api/test_flash_route.py",
    "flashpoint.api.runpod": "api/test_docs_auth.py",
    "flashpoint.api.schemas": "api/test_native.py",
    "flashpoint.api.webhooks": "api/test_webhooks_guard.py",
    "flashpoint.api.workers": "api/test_worker_routes.py",
    "flashpoint.backends.local": "ray/test_rayship.py",
    "flashpoint.backends.process": "e2e/test_lifecycle.py",
    "flashpoint.backends.ray": "ray/test_local_ray.py",
    "flashpoint.backends.rayship": "ray/test_rayship.py",
    "flashpoint.backends.stub": "scheduler/test_supervision.py",
    "flashpoint.cli.apps": "cli/test_deploy_cli.py",
    "flashpoint.cli.deploy": "cli/test_deploy_cli.py",
    "flashpoint.cli.dev": "e2e/test_dev.py",
    "flashpoint.cli.venv": "cli/test_venv_cli.py",
    "flashpoint.cli.explain": "cli/test_cli_inert.py",
    "flashpoint.cli.gpus": "cli/test_cli.py",
    "flashpoint.cli.holders": "cli/test_cli_holders.py",
    "flashpoint.cli.jobs": "cli/test_cli_inert.py",
    "flashpoint.cli.live": "cli/test_cli_planes.py",
    "flashpoint.cli.output": "cli/test_cli.py",
    "flashpoint.cli.run": "cli/test_cli_run.py",
    "flashpoint.cli.serve": "cli/test_serve_keys.py",
    "flashpoint.cli.status": "cli/test_cli_inert.py",
    "flashpoint.scheduler.quotagate": "scheduler/test_engine_quotas.py",
    "flashpoint.scheduler.signals": "scheduler/test_scalers.py",
    "flashpoint.cli.target": "cli/test_cli_planes.py",
    "flashpoint.clock": "scheduler/test_engine_jobs.py",
    "flashpoint.dev.app": "dev/test_devserver.py",
    "flashpoint.dev.docs": "dev/test_devserver.py",
    "flashpoint.dev.layout": "dev/test_devserver.py",
    "flashpoint.dev.server": "dev/test_devserver.py",
    "flashpoint.environments.build": "environments/test_cache.py",
    "flashpoint.environments.errors": "environments/test_cache.py",
    "flashpoint.environments.interrupt": "environments/test_stopping.py",
    "flashpoint.environments.lock": "environments/test_cache.py",
    "flashpoint.environments.records": "environments/test_cache.py",
    "flashpoint.errors": "sdk/test_remote_errors.py",
    "flashpoint.explain": "scheduler/test_reads.py",
    "flashpoint.flashtypes": "scheduler/placement/test_nodes.py",
    "flashpoint.fleet.inventory": "fleet/test_discovery.py",
    "flashpoint.hosting.embedded": "api/test_embedded_lazy.py",
    "flashpoint.hosting.server": "hosting/test_plane.py",
    "flashpoint.scheduler.commit": "scheduler/test_jobbook.py",
    "flashpoint.scheduler.credentials": "scheduler/test_caller_credential.py",
    "flashpoint.scheduler.departed": "scheduler/test_engine_away.py",
    "flashpoint.scheduler.loop": "scheduler/test_engine_jobs.py",
    "flashpoint.scheduler.optionnotes": "flash/test_options.py",
    "flashpoint.scheduler.ownership.leaserecords": "scheduler/ownership/test_leases.py",
    "flashpoint.scheduler.placement.filters": "scheduler/placement/test_nodes.py",
    "flashpoint.scheduler.readiness": "scheduler/test_routeserving.py",
    "flashpoint.scheduler.records": "scheduler/test_engine_workers.py",
    "flashpoint.scheduler.settings": "hosting/test_plane.py",
    "flashpoint.scheduler.state": "scheduler/test_protocol.py",
    "flashpoint.scheduler.views": "scheduler/test_reads.py",
    "flashpoint.scheduler.waiters": "scheduler/test_jobbook.py",
    "flashpoint.scheduler.watchdog": "scheduler/test_supervision.py",
    "flashpoint.sdk.callargs": "sdk/test_endpoint.py",
    "flashpoint.sdk.connection": "sdk/test_endpointjob.py",
    "flashpoint.sdk.endpointclient": "sdk/test_routes.py",
    "flashpoint.sdk.handles": "sdk/test_shared_names.py",
    "flashpoint.sdk.jobhandle": "sdk/test_remote_errors.py",
    "flashpoint.sdk.progress": "sdk/test_mapping.py",
    "flashpoint.spec": "flash/test_surface.py",
    "flashpoint.store.base": "store/test_conformance.py",
    "flashpoint.store.memory": "scheduler/test_engine_jobs.py",
    "flashpoint.wire.bodylimit": "hosting/test_bad_input.py",
    "flashpoint.wire.pickling": "sdk/test_remote_errors.py",
    "flashpoint.wire.protocol": "api/test_native.py",
    "flashpoint.worker.__main__": "e2e/test_route_worker.py",
    "flashpoint.worker.handler": "worker/test_instances.py",
    "flashpoint.worker.isolation": "fleet/test_volumes.py",
    "flashpoint.worker.launch": "environments/test_inuse.py",
    "flashpoint.worker.routeserver": "e2e/test_route_worker.py",
}


def modules() -> dict[str, Path]:
    """Every module but packages' ``__init__``, by dotted name."""
    found = {}
    for path in sorted((SRC / "flashpoint").rglob("*.py")):
        if path.name != "__init__.py":
            found[".".join(path.relative_to(SRC).with_suffix("").parts)] = path
    return found


def own_test(module: str) -> Path:
    """Where a module's own test file would be: ``flashpoint.a.b`` -> ``tests/a/test_b.py``."""
    *folders, name = module.split(".")[1:]
    return TESTS.joinpath(*folders, f"test_{name}.py")


def names(test_file: Path, module: str) -> bool:
    """Whether a test file imports ``module`` (any import, anywhere in it) or names it, dotted or by its path."""
    text = test_file.read_text(encoding="utf-8")
    path = module.replace(".", "/") + ".py"
    return bool(re.search(rf"{re.escape(module)}\b|{re.escape(path)}", text)) or module in _imports(text)


def _imports(text: str) -> set[str]:
    graph_modules = set(modules()) | {"flashpoint"}
    found: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & graph_modules


def test_every_module_has_a_test_file_or_a_named_one() -> None:
    missing = []
    for module in modules():
        if own_test(module).exists():
            continue
        named = COVERED_BY.get(module)
        if named is None:
            missing.append(f"{module}: add {own_test(module).relative_to(TESTS.parent)} or a COVERED_BY entry")
        elif not (TESTS / named).exists():
            missing.append(f"{module}: COVERED_BY names tests/{named}, which does not exist")
        elif not names(TESTS / named, module):
            missing.append(f"{module}: tests/{named} neither imports nor names it")
    assert not missing, "\n".join(missing)


def test_covered_by_has_no_stale_entry() -> None:
    known = modules()
    stale = [m for m in COVERED_BY if m not in known or own_test(m).exists()]
    assert not stale, f"COVERED_BY entries for modules that are gone or have their own test file now: {stale}"


def test_test_folders_are_packages_of_the_source() -> None:
    packages = {path.parent.relative_to(SRC / "flashpoint") for path in (SRC / "flashpoint").rglob("__init__.py")}
    folders = {
        path.relative_to(TESTS)
        for path in TESTS.rglob("*")
        if path.is_dir() and path.name != "__pycache__" and not path.name.startswith(".")
    }
    stray = sorted(str(folder) for folder in folders if folder.parts[0] not in CROSS_CUTTING and folder not in packages)
    assert not stray, f"test folders with no package of that name under src/flashpoint: {stray}"


def test_the_checks_can_fail(tmp_path: Path) -> None:
    # a test file that mentions a module only in passing does not count as covering another one
    test_file = tmp_path / "test_x.py"
    test_file.write_text('"""About flashpoint.scheduler.loop."""\nfrom flashpoint.wire import codec\n')
    assert names(test_file, "flashpoint.scheduler.loop")
    assert names(test_file, "flashpoint.wire.codec")
    assert not names(test_file, "flashpoint.scheduler.views")
    assert own_test("flashpoint.sdk.endpoint") == TESTS / "sdk" / "test_endpoint.py"
    assert own_test("flashpoint.spec") == TESTS / "test_spec.py"
    assert build_graph(SRC).modules >= set(modules())
