"""The trace readers on small CSV snippets: each format recognised by its header, qos as classes, fractional GPUs
counted whole or left out, tasks of no GPU left out, and malformed input refused with its line."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from flashpoint.errors import ConfigError
from flashpoint.simulation.traces import Task, parse_trace, read_trace

OPENB = """name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time
p0,12000,16384,1,1000,,LS,Running,0,500,10
p1,6000,12288,1,460,V100M16|V100M32|V100M32,BE,Running,5,100,
p2,8000,8192,0,0,,Burstable,Succeeded,6,9,6
p3,8000,8192,8,1000,T4,Guaranteed,Failed,7,907,7
p4,8000,8192,2,1000,,Burstable,Pending,8,8,
p5,8000,8192,4,1000,,,Running,9,19,9
"""
MULTIGPU = """name,cpu_milli,memory_mib,num_gpu,gpu_milli
m0,1000,1024,8,1000
m1,1000,1024,1,250
m2,1000,1024,0,0
"""
OWN = """arrival_s,duration_s,gpus,candidates,class,app
0,3600,8,NVIDIA H200|NVIDIA B200,high,training
12.5,,1,,,
20,60,2,T4,BE,infer
"""


def parse(text: str, **options: bool):
    return parse_trace(io.StringIO(text), **options)


def test_an_openb_pod_list_is_recognised_by_its_header() -> None:
    trace = parse(OPENB)
    assert trace.format == "openb"
    assert [t.name for t in trace.tasks] == ["p0", "p1", "p3", "p4", "p5"]  # p2 asks no GPU
    assert trace.cpu_only == 1 and trace.fractional_as_whole == 1 and trace.fractional_skipped == 0
    assert trace.tasks[0] == Task("p0", 1, (), "high", 0.0, 490.0)
    # the order written, repeats dropped; a fractional GPU is a whole one; never scheduled: no duration
    assert trace.tasks[1] == Task("p1", 1, ("V100M16", "V100M32"), "low", 5.0, None, fractional=True)
    assert [t.priority for t in trace.tasks] == ["high", "low", "high", "normal", "normal"]
    assert [t.gpus for t in trace.tasks] == [1, 1, 8, 2, 4]
    assert trace.tasks[3].duration_s is None and trace.tasks[2].duration_s == 900.0
    assert trace.timed


@pytest.mark.parametrize(
    ("qos", "priority"),
    [("LS", "high"), ("Guaranteed", "high"), ("Burstable", "normal"), ("BE", "low"), ("", "normal")],
)
def test_qos_classes_map_to_priority_classes_and_no_priorities_makes_them_normal(qos: str, priority: str) -> None:
    row = f"p,1,1,1,1000,,{qos},Running,0,1,0\n"
    header = OPENB.splitlines()[0] + "\n"
    assert parse(header + row).tasks[0].priority == priority
    assert parse(header + row, priorities=False).tasks[0].priority == "normal"


def test_skip_fractional_leaves_fractional_tasks_out_and_counts_them() -> None:
    trace = parse(OPENB, skip_fractional=True)
    assert "p1" not in [t.name for t in trace.tasks]
    assert trace.fractional_skipped == 1 and trace.fractional_as_whole == 0


def test_openb_without_times_or_specs_is_read_too() -> None:
    trace = parse(MULTIGPU)
    assert [(t.gpus, t.arrival_s, t.duration_s, t.priority, t.candidates) for t in trace.tasks] == [
        (8, None, None, "normal", ()),
        (1, None, None, "normal", ()),
    ]
    assert trace.cpu_only == 1 and trace.fractional_as_whole == 1 and not trace.timed


def test_flashpoints_own_format_is_recognised_by_its_header() -> None:
    trace = parse(OWN)
    assert trace.format == "flashpoint"
    assert trace.tasks[0] == Task("task-0", 8, ("NVIDIA H200", "NVIDIA B200"), "high", 0.0, 3600.0, app="training")
    assert trace.tasks[1] == Task("task-1", 1, (), "normal", 12.5, None)
    assert trace.tasks[2].priority == "low" and trace.tasks[2].app == "infer"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b,c\n1,2,3\n", "not a trace this replay reads"),
        ("", "(empty)"),
        ("arrival_s,duration_s,gpus\n0,1,0\n", "line 2: gpus must be a whole number >= 1"),
        ("arrival_s,duration_s,gpus\n0,x,1\n", "line 2: duration_s must be a number"),
        ("arrival_s,duration_s,gpus\n-1,1,1\n", "arrival_s must be a number >= 0"),
        ("arrival_s,duration_s,gpus\n0,1,1,extra\n", "4 fields, the header names 3"),
    ],
)
def test_malformed_traces_are_refused_with_where(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(text)


def test_read_trace_reads_a_file_and_names_a_missing_one(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(OWN)
    assert len(read_trace(path).tasks) == 3
    with pytest.raises(ConfigError, match="cannot read the trace"):
        read_trace(tmp_path / "missing.csv")
