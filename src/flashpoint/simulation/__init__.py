"""Trace replays: a job trace through the real control plane, on a simulated fleet, as fast as the CPU allows.

``flashpoint simulate`` and ``bench/bench_sharing.py`` use it. ``traces`` reads openb's pod lists and flashpoint's own
trace format; ``fleets`` reads openb's node list or a flashpoint fleet description; ``replay`` drives a
``ControlPlane`` on the stub backend and a fake clock and checks every placement; ``metrics`` holds the figures'
definitions. Edge unit: it builds a plane, as a composition root does, and nothing below it imports it
(docs/architecture.md; decision 0114).
"""

from __future__ import annotations

from flashpoint.simulation.fleets import SimFleet, load_sim_fleet
from flashpoint.simulation.replay import PlacementViolation, ReplayOptions, replay, run_replay
from flashpoint.simulation.traces import Task, Trace, read_trace

__all__ = [
    "PlacementViolation",
    "ReplayOptions",
    "SimFleet",
    "Task",
    "Trace",
    "load_sim_fleet",
    "read_trace",
    "replay",
    "run_replay",
]
