"""Simulated fleets: the devices that ``FLASHPOINT_SIMULATED_GPUS``, a fleet file or ``--fleet`` describe.

Three forms, all giving devices with ``simulated=True`` (the only fake in flashpoint):

- ``MODEL:COUNT[,MODEL:COUNT...]``: one node (``FLASHPOINT_NODE`` or the host name), as before, e.g.
  ``NVIDIA_H200:1,NVIDIA_A100_80GB_PCIe:2``.
- ``NODE=MODEL:COUNT[,...][;NODE=...]``: several named nodes, e.g. ``a=NVIDIA_H200:8;b*10=NVIDIA_A100_80GB_PCIe:4``;
  ``NAME*N`` is N nodes of the same GPUs (named as ``count`` names them below).
- a TOML file, named as ``@path`` or by a path ending ``.toml``::

      [[node]]
      name = "rack1-a"                       # required
      gpus = { NVIDIA_H200 = 8 }             # MODEL = COUNT, or the string "MODEL:COUNT,..."; omit for a CPU-only node
      labels = { datacenter = "EU-RO-1" }    # optional, strings; ``datacenter`` is matched by ``datacenter=``
      count = 10                             # optional: 10 such nodes, rack1-a-0 .. rack1-a-9
      cpus = 32                              # optional: logical CPUs CPU workers may reserve (default: this machine's)
      memory_gb = 256                        # optional: memory CPU workers may reserve (default: this machine's)
      cuda = "12.4"                          # optional: the driver's CUDA version (default: FLASHPOINT_SIMULATED_CUDA)

MODEL is anything ``gpus.parse_gpu`` resolves to one model: a GpuType member name, an NVML name, a short name.
A node's devices are numbered from 0 in the order written. ``count = N`` (or ``NAME*N``) with N > 1 names the
nodes ``NAME-0`` .. ``NAME-<N-1>``, the number zero-padded to the width of N-1 so that names sort in order
(``count = 12`` gives ``r-00`` .. ``r-11``); N = 1 keeps the name as written.

Every node also has node facts (``scheduler.inventory.Node``): what a node does not declare it takes from ``host``,
this machine's facts as the caller passes them (``fleet.host_node``: its CPUs and memory, or FLASHPOINT_CPUS and
FLASHPOINT_MEMORY_GB; FLASHPOINT_DATACENTER as a ``datacenter`` label under the node's own labels; the simulated
CUDA version). The one-line forms declare none, so their nodes are all like this machine. Every node of a described
fleet is ``simulated``.

Service module: imports only the domain layer and ``scheduler.inventory``.
"""

from __future__ import annotations

import difflib
import math
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flashpoint.config import DEFAULT_SIMULATED_CUDA
from flashpoint.errors import ConfigError, UnknownGPUError
from flashpoint.flashtypes import cuda_tuple
from flashpoint.fleet.inventory import Device, Fleet, Node
from flashpoint.gpus import MODELS, GpuGroup, GPUModel, GpuType, model_of, parse_gpu, pool_models

__all__ = [
    "NO_HOST",
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
    '[[node]] tables with name = "rack1-a", gpus = { NVIDIA_H200 = 8 } (or gpus = "MODEL:COUNT,..."; none for a '
    'CPU-only node), and optionally count = N, labels = { datacenter = "EU-RO-1" }, cpus = N, memory_gb = M and '
    'cuda = "12.8"'
)
_NODE_KEYS = ("name", "gpus", "count", "labels", "cpus", "memory_gb", "cuda")

#: the node facts of a fleet described without a host: no CPU capacity, the default simulated CUDA version
NO_HOST = Node("", cuda=DEFAULT_SIMULATED_CUDA)
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class _Bad(Exception):
    """A mistake in a description, worded without its source; the public functions add where and the format."""


def _at(prefix: str, exc: _Bad) -> _Bad:
    """``exc`` said of ``prefix``: "entry 'X' has no count", "node 2 ('a'): count must be at least 1, got 0"."""
    text = str(exc)
    return _Bad(f"{prefix} {text}" if text.startswith("has ") else f"{prefix}: {text}")


@dataclass(frozen=True, slots=True)
class SimulatedFleet:
    """A described fleet: its devices in the order written, the labels of the nodes that have any, and every node's
    facts (CPUs, memory, CUDA version, labels), CPU-only nodes included."""

    devices: tuple[Device, ...]
    #: node name -> the labels it declares; nodes without labels are absent (shown by the what-if)
    labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    #: every node, in the order written, with its facts (what it does not declare comes from the host)
    node_facts: tuple[Node, ...] = ()

    @property
    def nodes(self) -> tuple[str, ...]:
        """The node names, in the order written."""
        return tuple(dict.fromkeys([*(n.name for n in self.node_facts), *(d.node for d in self.devices)]))

    @property
    def fleet(self) -> Fleet:
        """Its devices and nodes, as a backend serves them."""
        return Fleet.of(self.devices, self.node_facts)


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


@dataclass(frozen=True, slots=True)
class _Facts:
    """What a node of a fleet file declares of itself (None: the host's)."""

    cpus: int | None = None
    memory_gb: float | None = None
    cuda: str | None = None


class _Builder:
    """Collects nodes, refusing a name given twice."""

    def __init__(self, host: Node) -> None:
        self.host = host
        self.devices: list[Device] = []
        self.labels: dict[str, dict[str, str]] = {}
        self.nodes: list[Node] = []
        self._where: dict[str, str] = {}

    def add(
        self,
        name: str,
        count: int,
        pairs: Sequence[tuple[GPUModel, int]],
        labels: dict[str, str],
        at: str,
        facts: _Facts = _Facts(),
    ) -> None:
        host = self.host
        cpus = host.cpus if facts.cpus is None else facts.cpus
        for node in _node_names(name, count):
            if node in self._where:
                raise _Bad(f"{at}: node name {node!r} is taken already ({self._where[node]}); give each node its own")
            self._where[node] = at
            self.devices.extend(_node_devices(node, pairs))
            if labels:
                self.labels[node] = dict(labels)
            self.nodes.append(
                Node(
                    node,
                    cpus=cpus,
                    memory_mb=host.memory_mb if facts.memory_gb is None else round(facts.memory_gb * 1024),
                    cuda=host.cuda if facts.cuda is None else facts.cuda,
                    labels={**host.labels, **labels},
                    # the host's own core ids only when the node has as many CPUs (it is this machine, as declared)
                    cores=host.cores if cpus == host.cpus else (),
                    simulated=True,
                )
            )

    def fleet(self) -> SimulatedFleet:
        return SimulatedFleet(tuple(self.devices), self.labels, tuple(self.nodes))


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


def parse_fleet(text: str, *, node: str = "local", where: str = VARIABLE, host: Node = NO_HOST) -> SimulatedFleet:
    """A fleet in the one-line syntax: ``MODEL:COUNT,...`` (one node, named ``node``) or ``NODE=MODEL:COUNT,...;...``.

    In the several-node form each ``;``-separated part is ``NAME=MODEL:COUNT,...`` or ``NAME*N=MODEL:COUNT,...``
    (N nodes, ``NAME-0`` .. ``NAME-<N-1>``). Labels need a fleet file.

    Args:
        text: the description; blank means no devices.
        node: the node name of the single-node form.
        where: where the text came from, for error messages (``FLASHPOINT_SIMULATED_GPUS``, ``--fleet``).
        host: the facts every node takes (this machine's CPUs, memory, datacenter label, simulated CUDA version).

    Raises:
        ConfigError: a bad entry (as ``parse_simulated``), a part without ``NAME=``, a bad or repeated node name, a
            node without GPUs, a repeat count below 1.
    """
    builder = _Builder(host)
    if "=" not in text and ";" not in text:
        try:
            builder.add(node, 1, _entries(text), {}, where)
        except _Bad as exc:
            raise ConfigError(f"{where}: {exc}. Expected {_ONE_LINE}") from None
        return builder.fleet()
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


def _file_cpus(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Bad(f"cpus must be a whole number of logical CPUs, e.g. cpus = 32; got {value!r}")
    return value


def _file_memory(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise _Bad(f"memory_gb must be a number of GB, e.g. memory_gb = 256; got {value!r}")
    return float(value)


def _file_cuda(value: object) -> str:
    if not isinstance(value, str):
        raise _Bad(f'cuda must be a quoted version, e.g. cuda = "12.8"; got {value!r}')
    try:
        cuda_tuple(value)
    except ValueError:
        raise _Bad(f'cuda must be a CUDA version, e.g. cuda = "12.8"; got {value!r}') from None
    return value.strip()


def _file_labels(value: object) -> dict[str, str]:
    if not isinstance(value, dict):
        raise _Bad(f'labels must be a table of strings, e.g. labels = {{ zone = "eu-1" }}; got {value!r}')
    for key, text in value.items():
        if not isinstance(text, str):
            raise _Bad(f'label {key!r} must be a string, e.g. {key} = "{text}"; got {text!r}')
    return dict(value)


def load_fleet(path: str | Path, *, host: Node = NO_HOST) -> SimulatedFleet:
    """The fleet a TOML file describes (the format is in this module's docstring); ``host`` gives what a node does
    not declare.

    Raises:
        ConfigError: a missing or unreadable file, bad TOML (with its line and column), a key other than ``node``
            at the top or other than name/gpus/count/labels/cpus/memory_gb/cuda in a node (with a suggestion), a bad
            or repeated node name, a bad model (with close matches) or count, labels that are not strings, CPUs or
            memory that are not non-negative numbers, a CUDA version that is not a quoted version, no node at all.
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
        builder = _Builder(host)
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
                name = _check_name(table["name"])
                count = _file_count(table.get("count", 1), "count")
                pairs = _file_gpus(table["gpus"]) if "gpus" in table else []
                labels = _file_labels(table.get("labels", {}))
                facts = _Facts(
                    cpus=_file_cpus(table["cpus"]) if "cpus" in table else None,
                    memory_gb=_file_memory(table["memory_gb"]) if "memory_gb" in table else None,
                    cuda=_file_cuda(table["cuda"]) if "cuda" in table else None,
                )
                if not pairs and facts.cpus is None and not host.cpus:
                    raise _Bad(
                        "has no gpus and no cpus; add gpus = { NVIDIA_H200 = 8 }, or cpus = N for a CPU-only node"
                    )
            except _Bad as exc:
                raise _at(at, exc) from None
            builder.add(name, count, pairs, labels, at, facts)
    except _Bad as exc:
        raise ConfigError(f"{file}: {exc}. Expected {_FILE}") from None
    return builder.fleet()


def is_file_reference(value: str) -> bool:
    """True when ``value`` names a fleet file: ``@path``, or a path ending ``.toml``."""
    text = value.strip()
    return text.startswith("@") or text.casefold().endswith(".toml")


def read_fleet(value: str, *, node: str = "local", where: str = VARIABLE, host: Node = NO_HOST) -> SimulatedFleet:
    """The fleet ``value`` describes: a file (``@path`` or ``*.toml``) or the one-line syntax (``parse_fleet``).

    Args:
        value: as ``FLASHPOINT_SIMULATED_GPUS`` or ``--fleet`` hold it.
        node: the node name of the single-node form ``MODEL:COUNT,...``.
        where: where the value came from, for error messages.
        host: what a node does not declare of itself (``fleet.host_node``: this machine's facts).
    """
    text = value.strip()
    if is_file_reference(text):
        return load_fleet(text[1:].strip() if text.startswith("@") else text, host=host)
    return parse_fleet(text, node=node, where=where, host=host)


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
