"""``flashpoint deploy``, ``app``, ``env``, ``undeploy`` and ``rollback`` (cli/deploy.py, cli/apps.py) without a
server: their arguments and defaults, what they print from the contract's JSON shapes (decision 0097), the folder
check against the serving digest on real files, and the refusals made before any request."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from flashpoint.cli import app as cli_app
from flashpoint.cli.apps import (
    apps_table,
    endpoints_table,
    env_summary,
    envs_table,
    folder_note,
    serving_digest,
    show_env,
    versions_table,
)
from flashpoint.cli.deploy import exclusions, progress_line, result_table
from flashpoint.errors import BadInputError
from flashpoint.hosting.artifacts import pack
from flashpoint.sdk.deploy import DeployedEndpoint, DeployResult, Progress

URL = "http://10.0.0.5:8000"
AT = 1_800_000_000.0
ENV = {"app": "shop", "name": "production", "created_by": "ci", "created_at": AT, "serving": 2, "removed": ["api"]}
ENDPOINT = {"name": "embed", "id": "shop.production.embed", "kind": "queue", "url": f"{URL}/v2/shop.production.embed"}


def version(number: int, outcome: str, digest: str, detail: str = "") -> dict[str, Any]:
    return {"app": "shop", "env": "production", "number": number, "digest": digest, "created_by": "ci",
            "created_at": AT + number, "outcome": outcome, "detail": detail}  # fmt: skip


def env_body(digest: str = "a" * 64) -> dict[str, Any]:
    """``GET /v1/apps/shop/envs/production`` as decision 0097 writes it."""
    return {
        "env": ENV,
        "versions": [
            version(1, "replaced", "1" * 64),
            version(2, "serving", digest),
            version(3, "failed", "3" * 64, "worker exited with code 1"),
        ],
        "history": [],
        "endpoints": [ENDPOINT],
    }


def text(*renderables: Any) -> str:
    out = Console(file=io.StringIO(), width=200, color_system=None)
    for r in renderables:
        out.print(r)
    assert isinstance(out.file, io.StringIO)
    return out.file.getvalue()


# --------------------------------------------------------------------------------------------------------------------
# rendering the contract's shapes


def test_exclude_takes_package_names_repeated_or_comma_separated() -> None:
    assert exclusions(["torch,transformers", " numpy ", ","]) == ["torch", "transformers", "numpy"]
    assert exclusions(None) == []


def test_progress_lines_name_the_stage_version_and_detail() -> None:
    assert progress_line(Progress("upload", "1.2 MB in 14 files (300.0 kB packed)")) == (
        "upload: 1.2 MB in 14 files (300.0 kB packed)"
    )
    assert progress_line(Progress("warm", "1 of 2 workers ready", 3)) == "warm (version 3): 1 of 2 workers ready"
    assert progress_line(Progress("done", "", 3)) == "done (version 3)"


def test_the_result_table_lists_each_endpoint_with_id_kind_and_url() -> None:
    result = DeployResult("shop", "production", 3, (DeployedEndpoint(**ENDPOINT),))
    shown = text(result_table(result))
    assert "shop/production version 3 serves" in shown
    assert "shop.production.embed" in shown and "queue" in shown and f"{URL}/v2/shop.production.embed" in shown


def test_apps_and_envs_tables() -> None:
    apps = [{"name": "shop", "created_by": "ci", "created_at": AT, "envs": ["production", "staging"]}]
    assert "production, staging" in text(apps_table(apps))
    shown = text(envs_table([ENV, {**ENV, "name": "staging", "serving": None, "removed": []}]))
    assert "production" in shown and "api" in shown and "staging" in shown


def test_an_env_shows_its_endpoints_and_versions_newest_first_with_short_digests() -> None:
    body = env_body()
    shown = text(env_summary(body["env"]), endpoints_table(body["endpoints"]), versions_table(body["versions"]))
    assert "shop/production: version 2 serves (undeployed: api)" in shown
    assert "shop.production.embed" in shown
    rows = [line for line in shown.splitlines() if line.strip()[:3] in ("│ 1", "│ 2", "│ 3")]
    assert [row.split()[1] for row in rows] == ["3", "2", "1"]
    assert "a" * 12 in shown and "a" * 13 not in shown
    assert "worker exited with code 1" in shown


def test_tables_are_tables() -> None:  # the commands print them with the inert console
    assert isinstance(versions_table([]), Table)


# --------------------------------------------------------------------------------------------------------------------
# is this folder's code what serves?


def _project(root: Path) -> Path:
    root.mkdir()
    (root / "app.py").write_text("VALUE = 1\n")
    return root


def test_a_folder_named_as_the_app_says_whether_it_is_the_serving_code(tmp_path: Path) -> None:
    folder = _project(tmp_path / "shop")
    digest = pack(folder).digest
    assert serving_digest(env_body(digest)) == (2, digest)
    assert folder_note("shop", "production", (2, digest), folder) == "this folder is version 2's code"

    (folder / "app.py").write_text("VALUE = 2\n")
    assert folder_note("shop", "production", (2, digest), folder) == (
        "this folder differs from version 2 (production): run flashpoint deploy"
    )
    assert folder_note("shop", "staging", (2, digest), folder) == (
        "this folder differs from version 2 (staging): run flashpoint deploy -e staging"
    )


def test_no_folder_note_for_another_app_or_when_nothing_serves(tmp_path: Path) -> None:
    folder = _project(tmp_path / "other")
    assert folder_note("shop", "production", (2, "a" * 64), folder) is None
    assert folder_note("other", "production", None, folder) is None
    assert serving_digest({**env_body(), "env": {**ENV, "serving": None}}) is None


def test_show_env_ends_with_the_folder_note(tmp_path: Path) -> None:
    folder = _project(tmp_path / "shop")
    out = Console(file=io.StringIO(), width=200, color_system=None)
    show_env(out, env_body(pack(folder).digest), folder)
    assert isinstance(out.file, io.StringIO)
    assert out.file.getvalue().rstrip().endswith("this folder is version 2's code")


# --------------------------------------------------------------------------------------------------------------------
# refused before any request (nothing listens at the URL these name)


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


NOWHERE = ["--url", "http://127.0.0.1:9", "--key", "k"]


def test_deploy_of_a_folder_whose_name_is_no_app_name_asks_for_app(runner: CliRunner, tmp_path: Path) -> None:
    folder = tmp_path / "my project"
    folder.mkdir()
    result = runner.invoke(cli_app, ["deploy", str(folder), *NOWHERE])
    assert isinstance(result.exception, BadInputError) and "--app NAME" in str(result.exception)


def test_deploy_timeout_must_be_positive(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(cli_app, ["deploy", str(_project(tmp_path / "shop")), "--timeout", "0", *NOWHERE])
    assert result.exit_code == 2 and "positive number of seconds" in result.output


def test_undeploy_needs_a_name_or_all_and_not_both(runner: CliRunner) -> None:
    neither = runner.invoke(cli_app, ["undeploy", "--app", "shop", *NOWHERE])
    assert neither.exit_code == 2 and "--all" in neither.output
    both = runner.invoke(cli_app, ["undeploy", "embed", "--all", "--app", "shop", *NOWHERE])
    assert both.exit_code == 2


@pytest.mark.parametrize(
    "args",
    [
        ["undeploy", "embed", "--app", "shop"],
        ["undeploy", "--all", "--app", "shop", "-e", "staging"],
        ["env", "delete", "staging", "--app", "shop"],
        ["app", "delete", "shop"],
    ],
)
def test_what_takes_endpoints_down_asks_first_and_no_stops_it(runner: CliRunner, args: list[str]) -> None:
    result = runner.invoke(cli_app, [*args, *NOWHERE], input="n\n")
    assert result.exit_code == 1 and "Aborted" in result.output and "[y/N]" in result.output


def test_help_of_each_command(runner: CliRunner) -> None:
    for command in (["deploy"], ["undeploy"], ["rollback"], ["app", "list"], ["app", "get"], ["env", "get"],
                    ["env", "create"], ["env", "list"], ["env", "delete"], ["app", "delete"]):  # fmt: skip
        shown = runner.invoke(cli_app, [*command, "--help"])
        assert shown.exit_code == 0, shown.output
