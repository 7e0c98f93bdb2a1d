"""GPU telemetry's aggregation (``scheduler/gpustats.py``) on recorded samples: a worker's figures in one sample, each
job's peak memory and mean utilisation over the samples taken while it ran, and each device's telemetry row.

The samples are values as ``NvmlReader`` returns them, written out by hand (recordings), not a stand-in NVML."""

from __future__ import annotations

import pytest

from flashpoint.fleet.inventory import Device
from flashpoint.fleet.telemetry import SIMULATED, DeviceReading, ProcessReading, Sample
from flashpoint.scheduler.gpustats import NOT_SAMPLED, GpuStats, JobFigures, WorkerAt, fold, worker_figures

A, B = "GPU-aaaa", "GPU-bbbb"


def reading(uuid: str, util: float | None, used: int | None, total: int | None = 81559) -> DeviceReading:
    return DeviceReading(uuid, util, used, total, 40.0, 70.5)


def worker(jobs: tuple[str, ...] = ("j1",), pid: int | None = 100, uuids: tuple[str, ...] = (A,)) -> WorkerAt:
    return WorkerAt("w1", pid, uuids, frozenset(jobs))


# ---------------------------------------------------------------------------------------------------------------------
# one worker in one sample


@pytest.mark.parametrize(
    ("sample", "at", "figures"),
    [
        # its own process's memory, not the device's (another process uses the rest)
        (
            Sample((reading(A, 50.0, 3000),), (ProcessReading(A, 100, 1200, 100), ProcessReading(A, 7, 1800, 7))),
            worker(),
            JobFigures(1200, 50.0),
        ),
        # a child of the worker (same session) counts as the worker's
        (
            Sample((reading(A, 20.0, 3000),), (ProcessReading(A, 101, 900, 100), ProcessReading(A, 100, 300, 100))),
            worker(),
            JobFigures(1200, 20.0),
        ),
        # NVML lists none of its processes (a container's pid namespace): its devices' memory used
        (Sample((reading(A, 10.0, 2500),), (ProcessReading(A, 4242, 2400, None),)), worker(), JobFigures(2500, 10.0)),
        # the backend does not know its pid: its devices' memory used
        (
            Sample((reading(A, 10.0, 2500),), (ProcessReading(A, 100, 2400, 100),)),
            worker(pid=None),
            JobFigures(2500, 10.0),
        ),
        # a process of its whose memory NVML cannot say: its devices' memory used rather than a partial sum
        (Sample((reading(A, 10.0, 2500),), (ProcessReading(A, 100, None, 100),)), worker(), JobFigures(2500, 10.0)),
        # two devices: utilisation averaged, memory summed over its processes on both
        (
            Sample(
                (reading(A, 30.0, 1000), reading(B, 90.0, 5000)),
                (ProcessReading(A, 100, 800, 100), ProcessReading(B, 100, 4000, 100)),
            ),
            worker(uuids=(A, B)),
            JobFigures(4800, 60.0),
        ),
        # a device without utilisation (not supported): the other's alone
        (Sample((reading(A, None, 1000), reading(B, 80.0, 1000)), ()), worker(uuids=(A, B)), JobFigures(2000, 80.0)),
        # neither utilisation nor memory known: no figures, not zeros
        (Sample((reading(A, None, None),), ()), worker(), JobFigures(None, None)),
        # the sample did not read its device
        (Sample((reading(B, 99.0, 9999),), ()), worker(), None),
        # NVML failed
        (Sample(failure="NVML could not start"), worker(), None),
    ],
)
def test_worker_figures(sample: Sample, at: WorkerAt, figures: JobFigures | None) -> None:
    assert worker_figures(sample, at) == figures


# ---------------------------------------------------------------------------------------------------------------------
# jobs over a recording


def test_a_job_gets_the_peak_memory_and_the_mean_utilisation_of_the_samples_while_it_ran() -> None:
    running = worker(jobs=("j1",))
    samples = [
        (Sample((reading(A, 10.0, 500),), (ProcessReading(A, 100, 400, 100),)), [running]),
        (Sample((reading(A, 70.0, 4000),), (ProcessReading(A, 100, 3900, 100),)), [running]),
        (Sample((reading(A, 40.0, 2000),), (ProcessReading(A, 100, 1900, 100),)), [running]),
        # after it ended (its worker runs nothing): not its figures
        (Sample((reading(A, 0.0, 9000),), (ProcessReading(A, 100, 8900, 100),)), [worker(jobs=())]),
    ]

    assert fold(samples, ["j1"]) == {"j1": JobFigures(3900, 40.0)}


def test_concurrent_jobs_of_one_worker_each_get_the_workers_figures_of_the_samples_they_ran_in() -> None:
    both, second = worker(jobs=("j1", "j2")), worker(jobs=("j2",))
    samples = [
        (Sample((reading(A, 20.0, 1000),), (ProcessReading(A, 100, 1000, 100),)), [both]),
        (Sample((reading(A, 60.0, 3000),), (ProcessReading(A, 100, 3000, 100),)), [second]),
    ]

    assert fold(samples, ["j1", "j2"]) == {"j1": JobFigures(1000, 20.0), "j2": JobFigures(3000, 40.0)}


@pytest.mark.parametrize(
    "samples",
    [
        [],  # never sampled (it ran between two samples)
        [(Sample(failure="NVML could not start"), [worker()])],  # NVML failed throughout
        [(Sample((reading(B, 50.0, 100),), ()), [worker()])],  # its device was not read
        [(Sample((reading(A, 50.0, 100),), ()), [worker(jobs=("other",))])],  # it was not running
    ],
)
def test_a_job_no_sample_saw_gets_no_figures_not_zeros(samples: list[tuple[Sample, list[WorkerAt]]]) -> None:
    assert fold(samples, ["j1"]) == {"j1": None}


def test_settle_forgets_the_job_and_running_does_not() -> None:
    stats = GpuStats()
    stats.record(Sample((reading(A, 33.0, 700),), (ProcessReading(A, 100, 700, 100),)), [worker()], 1.0)
    stats.record(Sample((reading(A, 67.0, 200),), (ProcessReading(A, 100, 200, 100),)), [worker()], 2.0)

    assert stats.running("j1") == JobFigures(700, 50.0)
    assert stats.settle("j1") == JobFigures(700, 50.0)
    assert stats.settle("j1") is None
    assert stats.running("j1") is None


# ---------------------------------------------------------------------------------------------------------------------
# devices


def device(uuid: str, *, simulated: bool = False, index: int = 0) -> Device:
    return Device("node-a", index, "NVIDIA H100 80GB HBM3", None, 81559, simulated, uuid)


def test_a_simulated_device_says_it_has_no_telemetry_even_when_a_sample_names_its_uuid() -> None:
    stats = GpuStats()
    stats.record(Sample((reading("SIM-node-a-0", 99.0, 1),), ()), [], 1.0)

    assert stats.telemetry(device("SIM-node-a-0", simulated=True)) == {"status": "simulated", "detail": SIMULATED}
    assert stats.readings([device("SIM-node-a-0", simulated=True)]) == []


def test_a_real_device_shows_its_latest_sample_and_whose_processes_are_on_it() -> None:
    stats = GpuStats()
    stats.record(Sample((reading(A, 10.0, 100),), ()), [], 1.0)
    latest = Sample((reading(A, 75.0, 5000),), (ProcessReading(A, 100, 4000, 100), ProcessReading(A, 9, 900, 9)))
    stats.record(latest, [worker()], 2.0)

    row = stats.telemetry(device(A))
    assert row == {
        "status": "sampled",
        "detail": "",
        "sampledAt": 2.0,
        "utilizationPct": 75.0,
        "memoryUsedMb": 5000,
        "memoryTotalMb": 81559,
        "temperatureC": 40.0,
        "powerW": 70.5,
        "processes": [
            {"pid": 100, "memoryUsedMb": 4000, "worker": "w1"},
            {"pid": 9, "memoryUsedMb": 900, "worker": None},
        ],
    }
    assert stats.readings([device(A), device(B, index=1)]) == [(device(A), latest.devices[0])]


def test_a_real_device_is_unknown_before_its_first_sample_and_after_nvml_fails() -> None:
    stats = GpuStats()
    assert stats.telemetry(device(A)) == {"status": "unknown", "detail": NOT_SAMPLED}

    stats.record(Sample((reading(A, 75.0, 5000),), ()), [], 1.0)
    stats.record(Sample(failure="NVML could not start (Driver Not Loaded)"), [], 2.0)

    # no stale numbers once NVML stops answering
    assert stats.telemetry(device(A)) == {
        "status": "unknown",
        "detail": "unknown: NVML could not start (Driver Not Loaded)",
    }
    assert stats.readings([device(A)]) == []
