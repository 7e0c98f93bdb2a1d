"""``flashpoint serve``'s sharing options: --priority-class NAME=RANK, --app-weight APP=W, --preempt-grace-s."""

from __future__ import annotations

import pytest

from flashpoint.cli.serve import _rank, _weight, pairs
from flashpoint.config import Settings
from flashpoint.errors import ConfigError
from flashpoint.hosting.plane import PlaneRole, plane_settings
from flashpoint.hosting.server import Server


def test_pairs_read_names_and_values() -> None:
    assert pairs("--priority-class", ["urgent=9", " batch = -1 "], _rank) == {"urgent": 9, "batch": -1}
    assert pairs("--app-weight", ["shop=3", "lab=0.5"], _weight) == {"shop": 3.0, "lab": 0.5}
    assert pairs("--app-weight", [], _weight) == {}


@pytest.mark.parametrize(
    ("option", "value", "read", "words"),
    [
        ("--priority-class", "urgent", _rank, "takes NAME=VALUE"),
        ("--priority-class", "=3", _rank, "takes NAME=VALUE"),
        ("--priority-class", "a/b=3", _rank, "takes NAME=VALUE"),
        ("--priority-class", "urgent=high", _rank, "the rank is a whole number"),
        ("--app-weight", "shop=0", _weight, "the weight is a positive number"),
        ("--app-weight", "shop=-2", _weight, "the weight is a positive number"),
        ("--app-weight", "shop=nan", _weight, "the weight is a positive number"),
        ("--app-weight", "shop=inf", _weight, "the weight is a positive number"),
        ("--app-weight", "shop=lots", _weight, "the weight is a positive number"),
    ],
)
def test_bad_pairs_say_what_to_write(option: str, value: str, read: object, words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        pairs(option, [value], read)  # type: ignore[arg-type]


def test_the_servers_sharing_options_reach_its_planes_settings(tmp_path: object) -> None:
    server = Server(
        None,
        settings=Settings.load({}),
        data_dir=str(tmp_path),
        priority_classes={"high": 2, "normal": 1, "low": 0, "urgent": 9},
        app_weights={"shop": 3.0},
        preempt_grace_s=12.0,
    )
    chosen = plane_settings(Settings.load({}), server.plane_role(), base_url="", worker_env={}, parent_pid=None)
    assert chosen.priority_classes["urgent"] == 9 and chosen.app_weights == {"shop": 3.0}
    assert chosen.preempt_grace_s == 12.0
    defaults = plane_settings(Settings.load({}), PlaneRole(), base_url="", worker_env={}, parent_pid=None)
    assert defaults.priority_classes == {"high": 2, "normal": 1, "low": 0} and defaults.preempt_grace_s == 30.0
    from_env = Settings.load({"FLASHPOINT_PREEMPT_GRACE_S": "2.5"})
    assert plane_settings(from_env, PlaneRole(), base_url="", worker_env={}, parent_pid=None).preempt_grace_s == 2.5
    with pytest.raises(ConfigError, match="--preempt-grace-s must be 0 or more"):
        Server(None, settings=Settings.load({}), preempt_grace_s=-1)
