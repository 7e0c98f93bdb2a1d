"""Fleets for replays: openb's node list as simulated devices of trace models (no uuid: no lease), a flashpoint fleet
description, and candidate names resolved against the fleet and the catalog."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from flashpoint.errors import ConfigError
from flashpoint.gpus import GpuType, candidates
from flashpoint.scheduler.ownership.leases import identity
from flashpoint.simulation.fleets import load_sim_fleet, parse_openb_nodes, resolve_models, trace_model

NODES = """sn,cpu_milli,memory_mib,gpu,model
n0,64000,262144,2,P100
n1,96000,786432,8,G2
n2,32000,1024,0,T4
"""
H200 = candidates(GpuType.NVIDIA_H200)[0]


def test_openb_nodes_become_simulated_devices_of_trace_models_without_leases() -> None:
    fleet = parse_openb_nodes(io.StringIO(NODES))
    assert fleet.format == "openb" and fleet.gpus == 10
    assert [n.name for n in fleet.nodes] == ["n0", "n1", "n2"] and fleet.nodes[0].cpus == 64
    first = fleet.devices[0]
    assert (first.node, first.index, first.name, first.model) == ("n0", 0, "P100", trace_model("P100"))
    assert first.model is not None and first.model.member is None and first.model.pool is None
    assert all(d.simulated and identity(d) is None for d in fleet.devices)
    assert set(fleet.models) == {"P100", "G2"}


def test_a_flashpoint_fleet_description_is_read_and_its_devices_take_no_lease(tmp_path: Path) -> None:
    fleet = load_sim_fleet("a=NVIDIA_H200:2;b=NVIDIA_B200:1")
    assert fleet.gpus == 3 and fleet.devices[0].model == H200
    assert all(identity(d) is None for d in fleet.devices)
    path = tmp_path / "nodes.csv"
    path.write_text(NODES)
    assert load_sim_fleet(str(path)).gpus == 10


def test_a_fleet_file_with_another_header_or_no_gpu_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text("a,b\n1,2\n")
    with pytest.raises(ConfigError, match="not a fleet this replay reads"):
        load_sim_fleet(str(path))
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn0,1,1,0,T4\n")
    with pytest.raises(ConfigError, match="no GPU"):
        load_sim_fleet(str(path))


def test_candidate_names_resolve_to_the_fleets_models_then_the_catalog_then_trace_models() -> None:
    fleet = parse_openb_nodes(io.StringIO(NODES)).models
    assert resolve_models(("G2", "P100", "G2"), fleet) == (trace_model("G2"), trace_model("P100"))
    assert resolve_models(("H200",), fleet) == (H200,)
    assert resolve_models(("V100M32",), fleet) == (trace_model("V100M32"),)  # in no node: never fits
    assert resolve_models(("G2", "any"), fleet) == ()  # any model
    assert len(resolve_models(("AMPERE_80",), fleet)) == 2  # a pool: its models in order
