"""An endpoint's census (``records.Census``), kept as its workers join, change and leave, always says what counting
the workers afresh says: random walks of the changes the plane makes (hypothesis), and a table of single changes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from flashpoint.scheduler.records import Census, Worker, WorkerSet, WorkerState

STATES = list(WorkerState)


def fresh(workers: WorkerSet) -> dict[str, object]:
    """The census as counting every worker now gives it."""
    live = [w for w in workers.values() if w.live]
    return {
        "live": sorted(w.id for w in live),
        "holders": sorted((w.id, w.endpoint) for w in live),
        "idle": sorted(w.id for w in live if w.state is WorkerState.IDLE),
        "stopping_for": sorted(
            w.id for w in workers.values() if w.state is WorkerState.STOPPING and w.stopping_for is not None
        ),
        "jobs": sum(len(w.jobs) for w in live),
        "busy": sum(1 for w in live if w.jobs or w.in_flight),
        "starting": sum(1 for w in live if w.state is WorkerState.STARTING),
        "engaged": sum(1 for w in live if w.jobs or w.in_flight or w.state is WorkerState.STARTING),
    }


def kept(census: Census) -> dict[str, object]:
    return {
        "live": sorted(census.live),
        "holders": sorted((h.worker_id, h.endpoint) for h in census.holders.values()),
        "idle": sorted(census.idle),
        "stopping_for": sorted(census.stopping_for),
        "jobs": census.jobs,
        "busy": census.busy,
        "starting": census.starting,
        "engaged": census.engaged,
    }


def worker(n: int) -> Worker:
    return Worker(f"w{n}", "e", (), started_at=0.0, idle_since=0.0, last_exchange=0.0)


CHANGES = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 5)),
    st.tuples(st.just("pop"), st.integers(0, 5)),
    st.tuples(st.just("state"), st.integers(0, 5), st.sampled_from(STATES)),
    st.tuples(st.just("jobs"), st.integers(0, 5), st.frozensets(st.sampled_from(["a", "b", "c"]))),
    st.tuples(st.just("in_flight"), st.integers(0, 5), st.integers(0, 2)),
    st.tuples(st.just("retiring"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("standby"), st.integers(0, 5), st.booleans()),
    st.tuples(st.just("stopping_for"), st.integers(0, 5), st.sampled_from([None, "other"])),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(CHANGES, max_size=40))
def test_the_census_is_what_counting_afresh_says(changes: list[tuple[object, ...]]) -> None:
    workers = WorkerSet()
    made = {n: worker(n) for n in range(6)}
    for change in changes:
        what, n = change[0], change[1]
        assert isinstance(n, int)
        w = made[n]
        if what == "add":
            workers[w.id] = w
        elif what == "pop":
            workers.pop(w.id, None)
        else:
            setattr(w, str(what), change[2])  # a worker outside the set changes too: it is not counted
        assert kept(workers.census) == fresh(workers)


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        (("state", WorkerState.IDLE), {"starting": 0, "engaged": 0, "idle": ["w0"]}),
        (("jobs", frozenset({"j"})), {"jobs": 1, "busy": 1, "engaged": 1}),
        (("in_flight", 2), {"busy": 1, "engaged": 1}),
        (("retiring", True), {"live": [], "starting": 0, "engaged": 0}),
        (("standby", True), {"live": [], "starting": 0, "engaged": 0}),
        (("state", WorkerState.STOPPING), {"live": [], "starting": 0, "engaged": 0}),
    ],
)
def test_one_change_moves_the_counts(change: tuple[str, object], expect: dict[str, object]) -> None:
    workers = WorkerSet()
    workers["w0"] = w = worker(0)  # a starting worker: live, starting and engaged
    assert kept(workers.census) == {
        "live": ["w0"],
        "holders": [("w0", "e")],
        "idle": [],
        "stopping_for": [],
        "jobs": 0,
        "busy": 0,
        "starting": 1,
        "engaged": 1,
    }
    setattr(w, *change)
    assert {key: kept(workers.census)[key] for key in expect} == expect


def test_a_popped_worker_is_no_longer_counted_as_it_changes() -> None:
    workers = WorkerSet()
    workers["w0"] = w = worker(0)
    workers.pop("w0")
    w.jobs = frozenset({"j"})
    assert w.census is None and kept(workers.census)["jobs"] == 0 and not workers.census.live


def test_bulk_changes_are_refused() -> None:
    workers = WorkerSet()
    with pytest.raises(TypeError, match="one at a time"):
        workers.update({"w0": worker(0)})
    with pytest.raises(TypeError, match="one at a time"):
        workers.clear()
