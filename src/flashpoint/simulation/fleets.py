"""The fleet a replay places on: an openb node list, or a flashpoint fleet description; and the models a trace names.

- An **openb node list** (header ``sn,cpu_milli,memory_mib,gpu,model``): a row is a node named ``sn`` with ``gpu``
  devices of ``model``, ``cpu_milli / 1000`` vCPUs and ``memory_mib`` of memory.
- Anything else is a flashpoint fleet description as ``--fleet`` takes it elsewhere (``fleet.simulated.read_fleet``:
  a TOML fleet file, ``@path``, or the one-line ``NODE=MODEL:COUNT;...`` syntax).

openb's models (G1-G3, T4, P100, V100M16, V100M32, A10) are not in flashpoint's catalog, which holds the seed's
models only. Each becomes a **trace model**: a ``GPUModel`` of that name outside the catalog (no ``GpuType`` member,
no pool), so that a task's candidate list can name it and placement matches it exactly, as it matches a catalog model;
``ANY`` matches every device. A name that is a catalog model's (``NVIDIA H200``, ``H200``) is that model.

Every device is ``simulated`` and has no uuid: a replay takes no machine-wide device lease
(``scheduler/ownership/leases.identity`` is None), so it never touches the lease directory and never collides with a
real plane on this machine. Pure but for reading the file.
"""

from __future__ import annotations

import csv
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from flashpoint.errors import ConfigError, UnknownGPUError
from flashpoint.fleet.inventory import Device, Node
from flashpoint.fleet.simulated import read_fleet
from flashpoint.gpus import Candidate, GPUModel, GpuType, candidates, parse_gpu

__all__ = ["OPENB_NODE_HEADER", "SimFleet", "load_sim_fleet", "parse_openb_nodes", "resolve_models", "trace_model"]

#: the header of openb's node list
OPENB_NODE_HEADER = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
#: the architecture a trace model shows (the trace does not say)
TRACE_ARCHITECTURE = "unknown (trace model)"


def trace_model(name: str) -> GPUModel:
    """The stand-in model of a name the catalog does not know (equal for equal names: placement compares models)."""
    return GPUModel(name=name, vram_gb=0, architecture=TRACE_ARCHITECTURE, member=None, pool=None)


@dataclass(frozen=True, slots=True)
class SimFleet:
    """A replay's fleet: its devices in fleet order and its nodes."""

    devices: tuple[Device, ...]
    nodes: tuple[Node, ...]
    #: "openb" or "flashpoint"
    format: str = "flashpoint"

    @property
    def gpus(self) -> int:
        return len(self.devices)

    @property
    def models(self) -> dict[str, GPUModel]:
        """The models its devices have, by name (a device's model name, as a trace names it)."""
        return {d.model_name: d.model for d in self.devices if d.model is not None}


def load_sim_fleet(value: str) -> SimFleet:
    """The fleet ``value`` names: a file with openb's node header, else a flashpoint fleet description (a TOML file,
    ``@path``, or the one-line syntax).

    Raises:
        ConfigError: unreadable, malformed, or no GPU in it.
    """
    path = Path(value.strip().removeprefix("@")).expanduser()
    if path.is_file() and not path.name.casefold().endswith(".toml"):
        try:
            with path.open(newline="", encoding="utf-8") as stream:
                fleet = parse_openb_nodes(stream, where=str(path))
        except OSError as exc:
            raise ConfigError(f"cannot read the fleet {path}: {exc.strerror or exc}") from None
    else:
        described = read_fleet(value, where="--fleet")
        devices = tuple(dataclasses.replace(d, uuid="") for d in described.devices)
        fleet = SimFleet(devices, described.fleet.nodes)
    if not fleet.devices:
        raise ConfigError(f"the fleet {value} has no GPU: a replay places GPU tasks")
    return fleet


def parse_openb_nodes(lines: Iterable[str], *, where: str = "the fleet") -> SimFleet:
    """An openb node list (header first) as a fleet of simulated devices of trace models."""
    rows = csv.reader(lines)
    header = tuple(cell.strip() for cell in next(rows, []))
    if header[: len(OPENB_NODE_HEADER)] != OPENB_NODE_HEADER:
        raise ConfigError(
            f"{where}: not a fleet this replay reads: its header is {','.join(header) or '(empty)'}; expected openb's "
            f"node list ({','.join(OPENB_NODE_HEADER)}) or a flashpoint fleet file (.toml)"
        )
    models: dict[str, GPUModel] = {}
    devices: list[Device] = []
    nodes: list[Node] = []
    for line, row in enumerate(rows, start=2):
        if not row:
            continue
        try:
            name, cpu_milli, memory_mib, gpu, model_name = (cell.strip() for cell in row[:5])
            count, cpus, memory = int(gpu), int(cpu_milli) // 1000, int(memory_mib)
        except ValueError:
            raise ConfigError(f"{where}, line {line}: expected {','.join(OPENB_NODE_HEADER)}, got {row!r}") from None
        if count < 0 or cpus < 0 or memory < 0:
            raise ConfigError(f"{where}, line {line}: counts cannot be negative")
        model = models.setdefault(model_name, _model(model_name))
        nodes.append(Node(name, cpus=cpus, memory_mb=memory, simulated=True))
        devices.extend(
            Device(name, index, model_name, model, model.vram_gb * 1024, simulated=True) for index in range(count)
        )
    return SimFleet(tuple(devices), tuple(nodes), "openb")


def _model(name: str) -> GPUModel:
    """A catalog model when ``name`` is exactly one's NVML name or member name, else a trace model."""
    for member in GpuType.all():
        if name in (member.value, member.name):
            found = candidates(member)
            assert isinstance(found[0], GPUModel)
            return found[0]
    return trace_model(name)


def resolve_models(names: Sequence[str], fleet_models: Mapping[str, GPUModel]) -> tuple[GPUModel, ...]:
    """A task's candidate names as models, in order: a model of the fleet by its name, else the catalog models the
    name picks out (``H200``, a pool's name), else a trace model (in no fleet: the task waits ``not_in_fleet``).
    Empty (any model) when a name is ``any``."""
    found: list[GPUModel] = []
    for name in names:
        model = fleet_models.get(name)
        if model is not None:
            parsed: tuple[Candidate, ...] = (model,)
        else:
            try:
                parsed = candidates(parse_gpu(name))
            except UnknownGPUError:
                parsed = (trace_model(name),)
        for candidate in parsed:
            if not isinstance(candidate, GPUModel):  # ANY: every model
                return ()
            if candidate not in found:
                found.append(candidate)
    return tuple(found)
