"""Simulated fleets: the devices that ``FLASHPOINT_SIMULATED_GPUS``, a fleet file or ``--fleet`` describe.

Three forms, all giving devices with ``simulated=True`` (the only fake in flashpoint):

- ``MODEL:COUNT[,MODEL:COUNT...]``: one node (``FLASHPOINT_NODE`` or the host name), as before, e.g.
  ``NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2``.
- ``NODE=MODEL:COUNT[,...][;NODE=...]``: several named nodes, e.g. ``a=NVIDIA_H200:8;b*10=NVIDIA_A100_80GB_PCIe:4``;
  ``NAME*N`` is N nodes of the same GPUs (named as ``count`` names them below).
- a TOML file, named as ``@path`` or by a path ending ``.toml``::

      [[node]]
      name = "rack1-a"                       # required
      gpus = { NVIDIA_H200 = 8 }             # required: MODEL = COUNT, or the string "MODEL:COUNT,..."
      labels = { zone = "eu-1" }             # optional, strings; shown, not matched on (yet)
      count = 10                             # optional: 10 such nodes, rack1-a-0 .. rack1-a-9

MODEL is anything ``gpus.parse_gpu`` resolves to one model: a GpuType member name, an NVML name, a short name.
A node's devices are numbered from 0 in the order written. ``count = N`` (or ``NAME*N``) with N > 1 names the
nodes ``NAME-0`` .. ``NAME-<N-1>``, the number zero-padded to the width of N-1 so that names sort in order
(``count = 12`` gives ``r-00`` .. ``r-11``); N = 1 keeps the name as written.

Service module: imports only the domain layer and ``scheduler.inventory``.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashpoint.errors import ConfigError, UnknownGPUError
from flashpoint.gpus import MODELS, GpuGroup, GPUModel, GpuType, model_of, parse_gpu, pool_models
from flashpoint.scheduler.inventory import Device

__all__ = [
    "SimulatedFleet",
    "bench_fleet",
    "is_file_reference",
    "load_fleet",
    "parse_fleet",
    "parse_simulated",
    "read_fleet",
]

VARIABLE = "FLASHPOINT_SIMULATED_GPUS"
_DEVICES = "MODEL:COUNT[,MODEL:COUNT...], e.g. 'NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2,NVIDIA L40S:1'"
_NODES = "NODE=MODEL:COUNT[,...][;NODE=...], e.g. 'a=NVIDIA_H200:8;b*2=NVIDIA_A100_80GB_PCIe:4'"
_ONE_LINE = f"{_DEVICES}; or, for several nodes, {_NODES}; or @fleet.toml"
_FILE = (
    '[[node]] tables with name = "rack1-a", gpus = { NVIDIA_H200 = 8 } (or gpus = "MODEL:COUNT,..."), '
    'and optionally count = N and labels = { zone = "eu-1" }'
)
_NODE_KEYS = ("name", "gpus", "count", "labels")
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class _Bad(Exception):
    """A mistake in a description, worded without its source; the public functions add where and the format."""


def _at(prefix: str, exc: _Bad) -> _Bad:
    """``exc`` said of ``prefix``: "entry 'X' has no count", "node 2 ('a'): count must be at least 1, got 0"."""
    text = str(exc)
    return _Bad(f"{prefix} {text}" if text.startswith("has ") else f"{prefix}: {text}")


@dataclass(frozen=True, slots=True)
class SimulatedFleet:
    """A described fleet: its devices in the order written, and the labels of the nodes that have any."""

    devices: tuple[Device, ...]
    #: node name -> its labels; nodes without labels are absent. Shown in the what-if; nothing matches on them yet
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def nodes(self) -> tuple[str, ...]:
        """The node names, in the order written."""
        return tuple(dict.fromkeys(d.node for d in self.devices))


# ----------------------------------------------------------------------------------------------------------------
# models and MODEL:COUNT lists


def _model(text: str) -> GPUModel:
    try:
        parsed = parse_gpu(text)
    except UnknownGPUError as exc:
        # Both a miss ("H20") and an ambiguous name ("A100") land here; either way the suggestions say what to write.
        hint = f"; did you mean {' or '.join(repr(s) for s in exc.suggestions)}?" if exc.suggestions else ""
        raise _Bad(f"{text!r} is not one GPU model{hint} (`flashpoint gpus --catalog` lists them)") from exc
    if isinstance(parsed, GPUModel):
        return parsed
    if parsed is GpuType.ANY or parsed is GpuGroup.ANY:
        raise _Bad("'any' is not a device; name a GPU model, e.g. 'NVIDIA_H200:1'")
    if isinstance(parsed, GpuGroup):
        first = pool_models(parsed)[0]
        example = first.member.name if first.member is not None else first.name
        raise _Bad(f"{parsed.name} is a pool, and a simulated device is one model; name a model, e.g. '{example}:1'")
    return model_of(parsed)


def _count(value: object, what: str) -> int:
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text)
        except ValueError:
            raise _Bad(f"{what} {text!r} is not an integer") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"{what} {value!r} is not an integer")
    if value < 1:
        raise _Bad(f"{what} must be at least 1, got {value}")
    return value


def _entries(spec: str) -> list[tuple[GPUModel, int]]:
    """``MODEL:COUNT,...`` as (model, count) pairs; empty entries are skipped."""
    pairs: list[tuple[GPUModel, int]] = []
    for raw in spec.split(","):
        entry = raw.strip()
        if not entry:
            continue  # tolerate "A:1,,B:1" and a trailing comma
        model_text, colon, count_text = entry.rpartition(":")
        try:
            if not colon:
                raise _Bad("has no count")
            if not model_text.strip():
                raise _Bad("has no model")
            count = _count(count_text, "count")
            pairs.append((_model(model_text.strip()), count))
        except _Bad as exc:
            raise _at(f"entry {entry!r}", exc) from None
    return pairs


def _node_devices(node: str, pairs: Sequence[tuple[GPUModel, int]]) -> list[Device]:
    devices: list[Device] = []
    for model, count in pairs:
        for _ in range(count):
            index = len(devices)
            devices.append(
                Device(
                    node=node,
                    index=index,
                    name=model.name,
                    model=model,
                    memory_mb=model.vram_gb * 1024,
                    simulated=True,
                    uuid=f"SIM-{node}-{index}",
                )
            )
    return devices


def _node_names(name: str, count: int) -> list[str]:
    if count == 1:
        return [name]
    width = len(str(count - 1))
    return [f"{name}-{i:0{width}d}" for i in range(count)]


def _check_name(name: object) -> str:
    if not isinstance(name, str) or not _NODE_NAME.fullmatch(name):
        raise _Bad(
            f"node name {name!r} must be letters, digits, '.', '_' or '-' (at most 128, starting with a letter "
            "or digit), e.g. 'rack1-a'"
        )
    return name


class _Builder:
    """Collects nodes, refusing a name given twice."""

    def __init__(self) -> None:
        self.devices: list[Device] = []
        self.labels: dict[str, dict[str, str]] = {}
        self._where: dict[str, str] = {}

    def add(
        self, name: str, count: int, pairs: Sequence[tuple[GPUModel, int]], labels: dict[str, str], at: str
    ) -> None:
        for node in _node_names(name, count):
            if node in self._where:
                raise _Bad(f"{at}: node name {node!r} is taken already ({self._where[node]}); give each node its own")
            self._where[node] = at
            self.devices.extend(_node_devices(node, pairs))
            if labels:
                self.labels[node] = dict(labels)

    def fleet(self) -> SimulatedFleet:
        return SimulatedFleet(tuple(self.devices), self.labels)


# ----------------------------------------------------------------------------------------------------------------
# the one-line forms


def parse_simulated(spec: str, *, node: str = "local") -> list[Device]:
    """The simulated devices of one node that ``MODEL:COUNT,...`` declares (the single-node form).

    ``spec`` is comma-separated ``MODEL:COUNT``; MODEL is anything ``parse_gpu`` resolves to one model (a
    GpuType member name, an NVML name, a short name), COUNT a positive integer. Devices are numbered from 0
    in the order written and are labelled ``simulated=True``.

    Example:
        ``parse_simulated("NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2")`` gives an H200 at index 0 and two
        A100 80GB PCIe at indices 1 and 2.

    Raises:
        ConfigError: an entry without a count, a count that is not a positive integer, a pool or ``any``
            instead of a model, or an unknown model (with close matches).
    """
    try:
        return _node_devices(node, _entries(spec))
    except _Bad as exc:
        raise ConfigError(f"{VARIABLE}: {exc}. Expected {_DEVICES}") from None


def parse_fleet(text: str, *, node: str = "local", where: str = VARIABLE) -> SimulatedFleet:
    """A fleet in the one-line syntax: ``MODEL:COUNT,...`` (one node, named ``node``) or ``NODE=MODEL:COUNT,...;...``.

    In the several-node form each ``;``-separated part is ``NAME=MODEL:COUNT,...`` or ``NAME*N=MODEL:COUNT,...``
    (N nodes, ``NAME-0`` .. ``NAME-<N-1>``). Labels need a fleet file.

    Args:
        text: the description; blank means no devices.
        node: the node name of the single-node form.
        where: where the text came from, for error messages (``FLASHPOINT_SIMULATED_GPUS``, ``--fleet``).

    Raises:
        ConfigError: a bad entry (as ``parse_simulated``), a part without ``NAME=``, a bad or repeated node name, a
            node without GPUs, a repeat count below 1.
    """
    if "=" not in text and ";" not in text:
        try:
            return SimulatedFleet(tuple(_node_devices(node, _entries(text))))
        except _Bad as exc:
            raise ConfigError(f"{where}: {exc}. Expected {_ONE_LINE}") from None
    builder = _Builder()
    try:
        for raw in text.split(";"):
            part = raw.strip()
            if not part:
                continue
            head, equals, spec = part.partition("=")
            if not equals:
                raise _Bad(f"part {part!r} names no node; write NODE=MODEL:COUNT, e.g. 'node-b={part}'")
            name_text, star, count_text = head.strip().partition("*")
            name = _check_name(name_text.strip())
            try:
                count = _count(count_text, "the repeat count after '*'") if star else 1
                pairs = _entries(spec)
                if not pairs:
                    raise _Bad(f"has no GPUs; write {name}=MODEL:COUNT, e.g. '{name}=NVIDIA_H200:1'")
            except _Bad as exc:
                raise _at(f"node {head.strip()!r}", exc) from None
            builder.add(name, count, pairs, {}, f"part {part!r}")
    except _Bad as exc:
        raise ConfigError(f"{where}: {exc}. Expected {_ONE_LINE}") from None
    return builder.fleet()


# ----------------------------------------------------------------------------------------------------------------
# fleet files


def _toml(path: Path) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib
        except ImportError:
            raise ConfigError(
                f"{path}: reading a fleet file needs Python 3.11 or the tomli package (pip install tomli); "
                f"or describe the fleet in one line: {_NODES}"
            ) from None
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"no such fleet file: {str(path)!r} (relative paths start at {Path.cwd()})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read the fleet file {str(path)!r}: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        # the message carries the line and column: "Expected '=' after a key ... (at line 3, column 7)"
        raise ConfigError(f"{path}: not valid TOML: {exc}. Expected {_FILE}") from None


def _file_count(value: object, what: str) -> int:
    """A count in a fleet file: a TOML integer (``8``, not ``"8"``), at least 1."""
    if isinstance(value, str):
        raise _Bad(f"{what} {value!r} is not an integer; write it without quotes")
    return _count(value, what)


def _file_gpus(value: object) -> list[tuple[GPUModel, int]]:
    if isinstance(value, str):
        pairs = _entries(value)
    elif isinstance(value, dict):
        pairs = []
        for model_text, count in value.items():
            try:
                pairs.append((_model(model_text), _file_count(count, "count")))
            except _Bad as exc:
                raise _Bad(f"gpus: {model_text!r} = {count!r}: {exc}") from None
    else:
        raise _Bad(f"gpus must be a table like {{ NVIDIA_H200 = 8 }} or a string like 'NVIDIA_H200:8'; got {value!r}")
    if not pairs:
        raise _Bad("gpus is empty; a simulated node has at least one GPU, e.g. gpus = { NVIDIA_H200 = 1 }")
    return pairs


def _file_labels(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _Bad(f'labels must be a table of strings, e.g. labels = {{ zone = "eu-1" }}; got {value!r}')
    for key, text in value.items():
        if not isinstance(text, str):
            raise _Bad(f'label {key!r} must be a string, e.g. {key} = "{text}"; got {text!r}')
    return dict(value)


def load_fleet(path: str | Path) -> SimulatedFleet:
    """The fleet a TOML file describes (the format is in this module's docstring).

    Raises:
        ConfigError: a missing or unreadable file, bad TOML (with its line and column), a key other than ``node``
            at the top or other than name/gpus/count/labels in a node (with a suggestion), a bad or repeated node
            name, a bad model (with close matches) or count, labels that are not strings, no node at all.
    """
    file = Path(path).expanduser()
    body = _toml(file)
    try:
        extra = [key for key in body if key != "node"]
        if extra:
            raise _Bad(f"unknown top-level key {extra[0]!r}; nodes are [[node]] tables")
        nodes = body.get("node")
        if not isinstance(nodes, list) or not nodes or not all(isinstance(n, dict) for n in nodes):
            raise _Bad("declares no node; add [[node]] tables")
        builder = _Builder()
        for number, table in enumerate(nodes, start=1):
            at = f"node {number}" + (f" ({table['name']!r})" if isinstance(table.get("name"), str) else "")
            try:
                for key in table:
                    if key not in _NODE_KEYS:
                        near = difflib.get_close_matches(key.casefold(), _NODE_KEYS, n=1)
                        hint = f"; did you mean {near[0]!r}?" if near else ""
                        raise _Bad(f"unknown key {key!r}{hint} (a node has {', '.join(_NODE_KEYS)})")
                if "name" not in table:
                    raise _Bad('has no name; add name = "rack1-a"')
                if "gpus" not in table:
                    raise _Bad("has no gpus; add gpus = { NVIDIA_H200 = 8 }")
                name = _check_name(table["name"])
                count = _file_count(table.get("count", 1), "count")
                pairs = _file_gpus(table["gpus"])
                labels = _file_labels(table.get("labels", {}))
            except _Bad as exc:
                raise _at(at, exc) from None
            builder.add(name, count, pairs, labels, at)
    except _Bad as exc:
        raise ConfigError(f"{file}: {exc}. Expected {_FILE}") from None
    return builder.fleet()


def is_file_reference(value: str) -> bool:
    """True when ``value`` names a fleet file: ``@path``, or a path ending ``.toml``."""
    text = value.strip()
    return text.startswith("@") or text.casefold().endswith(".toml")


def read_fleet(value: str, *, node: str = "local", where: str = VARIABLE) -> SimulatedFleet:
    """The fleet ``value`` describes: a file (``@path`` or ``*.toml``) or the one-line syntax (``parse_fleet``).

    Args:
        value: as ``FLASHPOINT_SIMULATED_GPUS`` or ``--fleet`` hold it.
        node: the node name of the single-node form ``MODEL:COUNT,...``.
        where: where the value came from, for error messages.
    """
    text = value.strip()
    if is_file_reference(text):
        return load_fleet(text[1:].strip() if text.startswith("@") else text)
    return parse_fleet(text, node=node, where=where)


# ----------------------------------------------------------------------------------------------------------------
# the benchmark's fleet


def bench_fleet(gpus: int = 10_000, per_node: int = 8, *, prefix: str = "bench") -> list[Device]:
    """The issue's benchmark fleet: ``gpus`` simulated GPUs, ``per_node`` of one model per node, every catalog model.

    Node ``i`` holds ``per_node`` devices of ``MODELS[i % len(MODELS)]`` (the seed's GpuType table order, then L40S
    and L40), so the models go round-robin over the nodes; when ``gpus`` is not a multiple of ``per_node`` the last
    node holds the rest. Nodes are named ``bench-0000`` .. (zero-padded to the width of the last number). The
    default is 1,250 nodes of 8.

    Raises:
        ConfigError: ``gpus`` or ``per_node`` below 1.
    """
    if gpus < 1 or per_node < 1:
        raise ConfigError(f"bench_fleet needs at least one GPU and one per node; got gpus={gpus}, per_node={per_node}")
    nodes = -(-gpus // per_node)
    width = len(str(nodes - 1))
    devices: list[Device] = []
    for i in range(nodes):
        model = MODELS[i % len(MODELS)]
        devices.extend(_node_devices(f"{prefix}-{i:0{width}d}", [(model, min(per_node, gpus - len(devices)))]))
    return devices
