"""Why is it waiting: structured reasons per candidate (`WaitReason`, with its `Code`), and the explanation of a job or
an endpoint. Why a job *ended* is `jobs.Reason`, a different thing."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Code(str, Enum):
    """Why a candidate (or the endpoint) cannot take a worker now."""

    #: no node has the model, or no node has gpu_count of it: waiting will not help until the fleet changes
    NOT_IN_FLEET = "not_in_fleet"
    #: only a node that left the fleet (a Ray node that stopped answering, or one Ray declared dead) could hold it:
    #: waiting for that node to return, not "can never run"
    NODE_AWAY = "node_away"
    #: the devices exist but are held by workers (of the endpoints named, or of other flashpoint processes of this
    #: machine: the reason's ``processes``)
    BUSY = "busy"
    #: the endpoint already runs its maximum number of workers
    MAX_WORKERS = "max_workers"
    #: a worker has been placed and is starting; the job waits for it to pull
    WORKER_STARTING = "worker_starting"
    #: workers of this endpoint failed to start; the next attempt waits for a back-off
    START_BACKOFF = "start_backoff"
    #: the scaler has not asked for another worker yet (QUEUE_DELAY threshold not reached)
    SCALER = "scaler"
    #: a CPU instance's vCPUs and memory exist on some node, but are reserved by CPU workers (of the endpoints named)
    CPU_BUSY = "cpu_busy"
    #: no node could ever hold the CPU instance (too few vCPUs or too little memory on every node)
    CPU_TOO_LARGE = "cpu_too_large"
    #: nodes are left out because their datacenter label is not one of the endpoint's ``datacenter=``
    DATACENTER = "datacenter"
    #: nodes are left out because their driver's CUDA version is below the endpoint's ``min_cuda_version`` (or unknown)
    CUDA_VERSION = "cuda_version"
    #: the endpoint's environment (its ``dependencies``) is being built; no worker starts before it is ready
    BUILDING_ENVIRONMENT = "building_environment"
    #: the endpoint's environment failed to build; its jobs fail until the requirements change or the failure is
    #: forgotten (``flashpoint venv prune --failed``)
    ENVIRONMENT_FAILED = "environment_failed"
    #: the endpoint's app, environment or key holds as many devices as a quota allows (the reason names the quota,
    #: its use and when it frees)
    QUOTA = "quota"
    #: a higher priority class waits for the devices (the reason names it); running workers of a preemptible
    #: endpoint are being stopped for it
    PREEMPTED = "preempted"

    def __str__(self) -> str:
        return self.value


#: the codes that waiting does not cure: only a change of the fleet does (when every reason has one, ``never``)
NEVER_CODES = frozenset({Code.NOT_IN_FLEET, Code.CPU_TOO_LARGE, Code.DATACENTER, Code.CUDA_VERSION})


#: ``OtherProcess.kind`` of a holder the kernel names (its pid and user) whose lease record does not name it
KERNEL_FACTS = "process"
#: ``OtherProcess.kind`` of a lock file that is not one flashpoint made (a link, another mode): held by its owner
LOCK_FILE = "lock file"
#: ``OtherProcess.kind`` of a lease directory that cannot be trusted or used: this process leases nothing there
LEASE_DIRECTORY = "lease directory"


@dataclass(frozen=True, slots=True)
class OtherProcess:
    """Who holds a device another flashpoint process of this machine could hold (``scheduler/leases.py``;
    docs/architecture.md, "One owner per device"): a process the kernel names, described by its lease record when
    the record is its own; or, with pid 0, a lock file or lease directory this process cannot trust (``kind``)."""

    #: the holder's pid, from the kernel (0 when no process is known: see ``kind``)
    pid: int
    #: ``flashpoint serve``, ``flashpoint dev``, ``script`` (from its record); ``process`` (``KERNEL_FACTS``: its
    #: record does not name it); ``lock file`` (``LOCK_FILE``); ``lease directory`` (``LEASE_DIRECTORY``); or
    #: ``unknown`` (where there is no /proc, a record that cannot be read)
    kind: str
    #: its command line, shortened (``flashpoint serve app.py``, ``python job.py``); for a lock file or lease
    #: directory, what is wrong with it and what to do
    command: str = ""
    #: where its plane serves (a server's URL, a script's embedded server)
    url: str = ""
    endpoint: str = ""
    worker: str = ""
    #: the holder's user name, when it is not the reader's own user (always, for ``KERNEL_FACTS``)
    user: str = ""
    #: True when the holder is another control plane of the reader's own process
    same_process: bool = False
    #: the holder's uid, from the kernel (a lock file's owner); None where it is not known
    uid: int | None = None

    @property
    def label(self) -> str:
        """The holder in words, as a busy reason names it."""
        if self.kind == LEASE_DIRECTORY:
            return f"an untrusted lease directory ({self.command})"
        if self.kind == LOCK_FILE:
            who = f"another user (uid {self.uid}, {self.user})" if self.user else f"this user (uid {self.uid})"
            return f"{who}: {self.command}"
        if self.kind == KERNEL_FACTS:
            if not self.pid:
                return f"another process ({self.command})"
            who = "this process" if self.same_process else "another process"
            return f"{who}: pid {self.pid} of user {self.user} ({self.command or 'its lease record does not name it'})"
        if not self.pid:
            return f"another flashpoint process ({self.command or 'its lease record could not be read'})"
        who = "another control plane of this process" if self.same_process else "another flashpoint process"
        what = ", ".join(part for part in (self.command or self.kind, f"at {self.url}" if self.url else "") if part)
        user = f" of user {self.user}" if self.user else ""
        endpoint = f", endpoint {self.endpoint}" if self.endpoint else ""
        worker = f" (worker {self.worker})" if self.worker else ""
        return f"{who}: pid {self.pid}{user} ({what}){endpoint}{worker}"

    def to_json(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "kind": self.kind,
            "command": self.command,
            "url": self.url,
            "endpoint": self.endpoint,
            "worker": self.worker,
            "user": self.user,
            "sameProcess": self.same_process,
            "uid": self.uid,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OtherProcess:
        uid = data.get("uid")
        return cls(
            pid=int(data.get("pid", 0)),
            kind=str(data.get("kind", "unknown")),
            command=str(data.get("command", "")),
            url=str(data.get("url", "")),
            endpoint=str(data.get("endpoint", "")),
            worker=str(data.get("worker", "")),
            user=str(data.get("user", "")),
            same_process=bool(data.get("sameProcess", False)),
            uid=uid if isinstance(uid, int) and not isinstance(uid, bool) else None,
        )


@dataclass(frozen=True, slots=True)
class WaitReason:
    """One candidate's (or the endpoint's) reason, with the endpoints that hold the devices when busy, and the other
    flashpoint processes of this machine that hold some of them (``processes``)."""

    candidate: str
    code: Code
    detail: str
    holders: tuple[str, ...] = ()
    processes: tuple[OtherProcess, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "candidate": self.candidate,
            "code": self.code.value,
            "detail": self.detail,
            "holders": list(self.holders),
            "processes": [p.to_json() for p in self.processes],
        }

    def __str__(self) -> str:
        return f"{self.candidate}: {self.code.value} ({self.detail})"


@dataclass(frozen=True, slots=True)
class Explanation:
    """What a job or an endpoint is waiting for, in words and in codes."""

    endpoint: str
    summary: str
    reasons: tuple[WaitReason, ...] = ()
    #: True when no candidate could fit on this fleet even if every device were free
    never: bool = False
    job_id: str | None = None
    status: str | None = None
    #: 1-based position of the job in its endpoint's queue
    position: int | None = None
    queue_depth: int = 0
    workers: dict[str, int] = field(default_factory=dict)
    fleet: str = ""
    #: what the endpoint's options do not do on this fleet, in words (e.g. a datacenter no node label can match)
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "jobId": self.job_id,
            "status": self.status,
            "summary": self.summary,
            "never": self.never,
            "position": self.position,
            "queueDepth": self.queue_depth,
            "workers": dict(self.workers),
            "fleet": self.fleet,
            "reasons": [r.to_json() for r in self.reasons],
            "notes": list(self.notes),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Explanation:
        return cls(
            endpoint=data["endpoint"],
            summary=data["summary"],
            reasons=tuple(
                WaitReason(
                    r["candidate"],
                    Code(r["code"]),
                    r["detail"],
                    tuple(r.get("holders", ())),
                    tuple(OtherProcess.from_json(p) for p in r.get("processes", ())),
                )
                for r in data["reasons"]
            ),
            never=data["never"],
            job_id=data.get("jobId"),
            status=data.get("status"),
            position=data.get("position"),
            queue_depth=data.get("queueDepth", 0),
            workers=dict(data.get("workers", {})),
            fleet=data.get("fleet", ""),
            notes=tuple(data.get("notes", ())),
        )

    def __str__(self) -> str:
        head = f"job {self.job_id} ({self.status})" if self.job_id else f"endpoint {self.endpoint}"
        lines = [f"{head}: {self.summary}"]
        if self.position is not None:
            lines.append(f"  position {self.position} of {self.queue_depth} in the queue of {self.endpoint}")
        lines.extend(f"  - {reason}" for reason in self.reasons)
        lines.extend(f"  note: {note}" for note in self.notes)
        if self.fleet:
            lines.append(f"  fleet: {self.fleet}")
        return "\n".join(lines)
