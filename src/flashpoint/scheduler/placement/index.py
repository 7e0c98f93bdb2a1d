"""The fleet index: every device, who holds it, and free counts kept per model and node, so placement finds a fit
without scanning the fleet.

Pure (no I/O, no clock, no asyncio). The engine keeps one index for its fleet: ``hold`` when it hands devices to a
worker, ``release`` when the worker is gone, ``replace`` when the fleet changes. ``placement.place`` reads it.

Layout. A *key* is what one candidate matches: one key per catalog model present (its devices with ``model`` equal
to that model) and one key for ``ANY_GPU`` (every device, recognised or not). Within a key, the devices are split
into *groups* ``(node, model_name)``, the unit a worker may use (one model on one node). Groups are numbered in
fleet order (the order of their first device), and each keeps its devices' fleet positions in fleet order and its
free count. A device belongs to two groups: its model's and ANY's.

Invariants, kept by ``hold``/``release`` in O(log groups) comparisons per device, checked against a plain scan by
tests/scheduler/placement/test_index.py:

- ``group.free`` is the number of devices of the group that nobody holds;
- ``key.buckets[c]`` is the sorted list of the numbers of the key's groups with exactly ``c`` free devices, so the
  first group in fleet order with at least ``n`` free is the least head of ``buckets[n:]``;
- ``key.endpoints[e]`` is the number of the key's devices held by workers of endpoint ``e``, and ``key.holders[h]``
  the number held by holder ``h`` (never 0: who holds nothing there is dropped), so "held by ..." texts read the
  first instead of the devices, and the reclaim path asks about the holders of the second (or walks the groups,
  when that reads less: ``fit_reclaim``);
- ``index._by_holder[h]`` lists the fleet positions ``h`` holds, so a holder that may yield leads to its groups.

Devices another flashpoint process of this machine holds (their lease, ``scheduler/leases.py``) are held here too, by
``Holder("", process.label)``: ``hold_foreign`` records the process, ``foreign`` lists them and ``process`` says which
process a holder stands for, so placement's busy reason names it. They never yield.

The index also owns the fleet's nodes (``nodes``, a ``NodeLedger``): CPU reservations, node facts and which nodes
an endpoint's filters leave it. The questions placement asks take ``allowed`` (node names) for an endpoint with
node filters: without it they answer from the counts above; with it they walk the key's groups in fleet order and
skip the nodes left out (the slower path, for filtered endpoints only).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Collection, Container, Iterable, Iterator, Sequence

from flashpoint.explain import OtherProcess
from flashpoint.fleet.inventory import Device, Fleet, Holder, Node
from flashpoint.gpus import AnyGPU, Candidate, GPUModel
from flashpoint.scheduler.placement.nodes import NodeLedger

__all__ = ["FleetIndex"]


class _Group:
    """The devices of one model on one node, as one key sees them."""

    __slots__ = ("free", "key", "node", "number", "slots")

    def __init__(self, key: _Key, number: int, node: str) -> None:
        self.key = key
        #: the group's place among its key's groups, in fleet order
        self.number = number
        self.node = node
        #: fleet positions of its devices, in fleet order
        self.slots: list[int] = []
        self.free = 0


class _Key:
    """What one candidate matches: its groups in fleet order, bucketed by free count, and who holds its devices."""

    __slots__ = ("buckets", "endpoints", "groups", "holders", "largest")

    def __init__(self) -> None:
        self.groups: list[_Group] = []
        self.buckets: list[list[int]] = []
        self.endpoints: dict[str, int] = {}
        self.holders: dict[Holder, int] = {}
        #: the size of its largest group: the most devices a worker could ever get from it
        self.largest = 0


class FleetIndex:
    """The fleet in fleet order, who holds which device, and per model and node how many are free."""

    __slots__ = (
        "_any",
        "_by_holder",
        "_coarse",
        "_devices",
        "_foreign",
        "_held",
        "_holders",
        "_models",
        "_position",
        "_processes",
        "_where",
        "nodes",
    )

    def __init__(self, devices: Sequence[Device] = (), nodes: Sequence[Node] = ()) -> None:
        """The fleet's ``devices`` in fleet order, and its ``nodes`` (``Fleet.of`` adds a bare node for each node a
        device names that ``nodes`` does not describe)."""
        self._build(devices)
        self._holders: dict[tuple[str, int], Holder] = {}
        #: the fleet positions each holder holds, for the reclaim path
        self._by_holder: dict[Holder, list[int]] = {}
        #: devices other flashpoint processes hold (by device key), and the process each foreign holder stands for
        self._foreign: dict[tuple[str, int], OtherProcess] = {}
        self._processes: dict[str, OtherProcess] = {}
        #: the nodes and the CPU reservations on them
        self.nodes = NodeLedger(Fleet.of(self._devices, nodes).nodes)

    def _build(self, devices: Sequence[Device]) -> None:
        self._devices = tuple(devices)
        self._position: dict[tuple[str, int], int] = {}
        for position, device in enumerate(self._devices):
            if device.key in self._position:
                raise ValueError(f"the fleet lists device {device.index} of {device.node} twice")
            self._position[device.key] = position
        #: the holder of the device at each fleet position
        self._held: list[Holder | None] = [None] * len(self._devices)
        #: model name -> (model, key): looked up by name (a str hash), then compared, since models are dataclasses
        self._models: dict[str, list[tuple[GPUModel, _Key]]] = {}
        self._any = _Key()
        #: the groups each device belongs to, by fleet position
        self._where: list[tuple[_Group, ...]] = []
        #: coarse unrecognised devices, for the hint that one may be the model asked for
        self._coarse = tuple(d for d in self._devices if d.coarse and d.model is None)
        any_groups: dict[tuple[str, str], _Group] = {}
        model_groups: dict[tuple[GPUModel, str], _Group] = {}
        for position, device in enumerate(self._devices):
            group = any_groups.get((device.node, device.model_name))
            if group is None:
                group = any_groups[(device.node, device.model_name)] = _Group(
                    self._any, len(self._any.groups), device.node
                )
                self._any.groups.append(group)
            group.slots.append(position)
            model = device.model
            if model is None:
                self._where.append((group,))
                continue
            own = model_groups.get((model, device.node))
            if own is None:
                key = self._key(model, create=True)
                assert key is not None
                own = model_groups[(model, device.node)] = _Group(key, len(key.groups), device.node)
                key.groups.append(own)
            own.slots.append(position)
            self._where.append((own, group))
        for key in self._keys():
            key.largest = max(len(g.slots) for g in key.groups)
            key.buckets = [[] for _ in range(key.largest + 1)]
            for group in key.groups:
                group.free = len(group.slots)
                key.buckets[group.free].append(group.number)

    def _keys(self) -> Iterator[_Key]:
        if self._any.groups:
            yield self._any
        for entries in self._models.values():
            for _, key in entries:
                yield key

    def _key(self, candidate: Candidate, *, create: bool = False) -> _Key | None:
        if isinstance(candidate, AnyGPU):
            return self._any if self._any.groups else None
        entries = self._models.get(candidate.name)
        if entries is not None:
            for model, key in entries:
                if model is candidate or model == candidate:
                    return key
        if not create:
            return None
        key = _Key()
        self._models.setdefault(candidate.name, []).append((candidate, key))
        return key

    # ----------------------------------------------------------------------------------------------------------------
    # the fleet and its holders

    @property
    def devices(self) -> tuple[Device, ...]:
        """Every device, in fleet order."""
        return self._devices

    def __contains__(self, device: object) -> bool:
        """Whether the fleet has a device with this one's key (node, index)."""
        return isinstance(device, Device) and device.key in self._position

    def replace(self, devices: Sequence[Device], nodes: Sequence[Node] = ()) -> None:
        """A new fleet (a node joined or left): holders of devices still in it (by node and index) are kept, the
        others dropped; so are CPU reservations on nodes still in it (``NodeLedger.replace``)."""
        self.nodes.replace(Fleet.of(devices, nodes).nodes)
        holders, foreign = self._holders, self._foreign
        self._build(devices)
        self._holders = {}
        self._by_holder = {}
        self._foreign = {key: process for key, process in foreign.items() if key in self._position}
        self._processes = {process.label: process for process in self._foreign.values()}
        for key, holder in holders.items():
            position = self._position.get(key)
            if position is not None:
                self._take(position, holder)

    def hold(self, devices: Sequence[Device], holder: Holder) -> None:
        """``holder`` takes ``devices``. A GPU is never handed out twice.

        Raises:
            ValueError: a device is already held (also twice in ``devices``) or not in the fleet; nothing is taken.
        """
        positions: list[int] = []
        for device in devices:
            position = self._position.get(device.key)
            if position is None:
                raise ValueError(f"device {device.index} of {device.node} is not in the fleet")
            held = self._held[position]
            if held is not None or position in positions:
                raise ValueError(
                    f"device {device.index} of {device.node} is already held"
                    f"{f' by worker {held.worker_id} of {held.endpoint}' if held is not None else ''}"
                )
            positions.append(position)
        for position in positions:
            self._take(position, holder)

    def release(self, devices: Sequence[Device]) -> None:
        """``devices`` are given back. Devices not held, or no longer in the fleet, are ignored."""
        for device in devices:
            position = self._position.get(device.key)
            if position is not None and self._held[position] is not None:
                self._give(position)

    def hold_foreign(self, device: Device, process: OtherProcess) -> None:
        """Another flashpoint process of this machine holds ``device`` (its lease): held here by
        ``Holder("", process.label)`` until ``release``.

        Raises:
            ValueError: the device is already held or not in the fleet (as ``hold``).
        """
        self.hold((device,), Holder("", process.label))
        self._foreign[device.key] = process
        self._processes[process.label] = process

    def foreign(self) -> list[tuple[Device, OtherProcess]]:
        """The devices other flashpoint processes hold, in fleet order, with the process holding each."""
        return sorted(
            ((self._devices[self._position[key]], process) for key, process in self._foreign.items()),
            key=lambda found: self._position[found[0].key],
        )

    def process(self, label: str) -> OtherProcess | None:
        """The other flashpoint process a holder's ``endpoint`` stands for; None for this plane's own holders."""
        return self._processes.get(label) if self._processes else None

    def holder(self, device: Device) -> Holder | None:
        """Who holds ``device``: None when it is free or not in the fleet."""
        return self._holders.get(device.key)

    def is_free(self, device: Device) -> bool:
        """True when ``device`` is in the fleet and nobody holds it."""
        position = self._position.get(device.key)
        return position is not None and self._held[position] is None

    def holders(self) -> dict[tuple[str, int], Holder]:
        """Device key -> holder, for every held device (a copy)."""
        return dict(self._holders)

    def _take(self, position: int, holder: Holder) -> None:
        self._held[position] = holder
        self._holders[self._devices[position].key] = holder
        positions = self._by_holder.get(holder)
        if positions is None:
            self._by_holder[holder] = [position]
        else:
            positions.append(position)
        endpoint = holder.endpoint
        for group in self._where[position]:
            key = group.key
            _move(key.buckets, group.number, group.free, group.free - 1)
            group.free -= 1
            key.endpoints[endpoint] = key.endpoints.get(endpoint, 0) + 1
            key.holders[holder] = key.holders.get(holder, 0) + 1

    def _give(self, position: int) -> None:
        holder = self._held[position]
        assert holder is not None
        self._held[position] = None
        device_key = self._devices[position].key
        del self._holders[device_key]
        if self._foreign and (process := self._foreign.pop(device_key, None)) is not None:
            if all(other.label != process.label for other in self._foreign.values()):
                del self._processes[process.label]
        positions = self._by_holder[holder]
        if len(positions) == 1:
            del self._by_holder[holder]
        else:
            positions.remove(position)
        endpoint = holder.endpoint
        for group in self._where[position]:
            key = group.key
            _move(key.buckets, group.number, group.free, group.free + 1)
            group.free += 1
            left = key.endpoints[endpoint] - 1
            if left:
                key.endpoints[endpoint] = left
            else:
                del key.endpoints[endpoint]
            left = key.holders[holder] - 1
            if left:
                key.holders[holder] = left
            else:
                del key.holders[holder]

    def verify(self) -> None:
        """Recount everything the index keeps from who holds each device, and compare (O(fleet)); the same for the
        node ledger's reservations: for tests.

        Raises:
            AssertionError: a kept count differs from the recount; the message names it.
        """
        held = self._held
        holders = {self._devices[p].key: h for p, h in enumerate(held) if h is not None}
        _same("holders", self._holders, holders)
        by_holder: dict[Holder, list[int]] = {}
        for position, holder in enumerate(held):
            if holder is not None:
                by_holder.setdefault(holder, []).append(position)
        _same("positions by holder", {h: sorted(p) for h, p in self._by_holder.items()}, by_holder)
        _same(
            "holders of devices other processes hold",
            {k: holders.get(k) for k in self._foreign},
            {k: Holder("", p.label) for k, p in self._foreign.items()},
        )
        _same("other processes", self._processes, {p.label: p for p in self._foreign.values()})
        for key in self._keys():
            buckets: list[list[int]] = [[] for _ in range(key.largest + 1)]
            endpoints: dict[str, int] = {}
            counts: dict[Holder, int] = {}
            for group in key.groups:
                free = sum(1 for p in group.slots if held[p] is None)
                _same(f"free devices of group {group.number} on {group.node}", group.free, free)
                buckets[free].append(group.number)
                for position in group.slots:
                    holder = held[position]
                    if holder is not None:
                        endpoints[holder.endpoint] = endpoints.get(holder.endpoint, 0) + 1
                        counts[holder] = counts.get(holder, 0) + 1
            _same("buckets", key.buckets, buckets)
            _same("devices held per endpoint", key.endpoints, endpoints)
            _same("devices held per holder", key.holders, counts)
        self.nodes.verify()

    # ----------------------------------------------------------------------------------------------------------------
    # what placement asks

    def largest(self, candidate: Candidate, allowed: Collection[str] | None = None) -> int:
        """The most devices matching ``candidate`` of one model on one node (in ``allowed``); 0 when there are none."""
        key = self._key(candidate)
        if key is None:
            return 0
        if allowed is not None:
            return max((len(g.slots) for g in key.groups if g.node in allowed), default=0)
        return key.largest

    def most_free(self, candidate: Candidate, allowed: Collection[str] | None = None) -> int:
        """The most free devices matching ``candidate`` of one model on one node (in ``allowed``)."""
        key = self._key(candidate)
        if key is None:
            return 0
        if allowed is not None:
            return max((g.free for g in key.groups if g.node in allowed), default=0)
        buckets = key.buckets
        for count in range(len(buckets) - 1, 0, -1):
            if buckets[count]:
                return count
        return 0

    def holding_endpoints(self, candidate: Candidate, allowed: Collection[str] | None = None) -> list[str]:
        """The endpoints holding devices that match ``candidate`` (on nodes in ``allowed``), sorted."""
        key = self._key(candidate)
        if key is None:
            return []
        if allowed is None:
            return sorted(key.endpoints)
        held = self._held
        return sorted(
            {h.endpoint for g in key.groups if g.node in allowed for p in g.slots if (h := held[p]) is not None}
        )

    def held_by_endpoint(self, candidate: Candidate) -> dict[str, int]:
        """Endpoint -> how many devices matching ``candidate`` its workers hold (``ANY_GPU``: every device), for
        quotas; endpoints holding none are left out. A copy."""
        key = self._key(candidate)
        return {} if key is None else dict(key.endpoints)

    def coarse_devices(self) -> tuple[Device, ...]:
        """The unrecognised devices whose model came from a coarse name, in fleet order."""
        return self._coarse

    def fit_free(
        self, candidate: Candidate, gpu_count: int, allowed: Collection[str] | None = None, policy: str = "first"
    ) -> tuple[str, tuple[Device, ...]] | None:
        """A group (on a node in ``allowed``) with ``gpu_count`` free devices matching ``candidate``: its node and its
        first ``gpu_count`` free devices in fleet order.

        Which group, by ``policy``: ``first``, the first in fleet order; ``pack`` (best fit), the one with the fewest
        free devices, so whole nodes stay free for large requests; ``spread``, the one with the most. Ties go to the
        first in fleet order. Without ``allowed`` each is a look at the bucket heads (O(largest group)).
        """
        key = self._key(candidate)
        if key is None:
            return None
        if allowed is not None:
            fits = [g for g in key.groups if g.free >= gpu_count and g.node in allowed]
            if not fits:
                return None
            if gpu_count < 1:
                return fits[0].node, ()
            if policy == "pack":
                group = min(fits, key=lambda g: (g.free, g.number))
            elif policy == "spread":
                group = min(fits, key=lambda g: (-g.free, g.number))
            else:
                group = fits[0]
        else:
            if gpu_count < 1:
                return key.groups[0].node, ()
            buckets = key.buckets
            first = -1
            if policy == "pack":
                first = next((bucket[0] for bucket in buckets[gpu_count:] if bucket), -1)
            elif policy == "spread":
                first = next((bucket[0] for bucket in reversed(buckets[gpu_count:]) if bucket), -1)
            else:
                for count in range(gpu_count, len(buckets)):
                    bucket = buckets[count]
                    if bucket and (first < 0 or bucket[0] < first):
                        first = bucket[0]
            if first < 0:
                return None
            group = key.groups[first]
        held = self._held
        devices = self._devices
        chosen: list[Device] = []
        for position in group.slots:
            if held[position] is None:
                chosen.append(devices[position])
                if len(chosen) == gpu_count:
                    break
        return group.node, tuple(chosen)

    def fit_reclaim(
        self,
        candidate: Candidate,
        gpu_count: int,
        yieldable: Callable[[Holder], bool] | None,
        among: Collection[Holder] | None = None,
        allowed: Collection[str] | None = None,
    ) -> tuple[str, tuple[Device, ...], tuple[Holder, ...]] | None:
        """The first group in fleet order where free devices and devices of holders that may yield make
        ``gpu_count``: its node, the devices (free ones first, each part in fleet order) and the holders to stop.

        The rare path (no group has ``gpu_count`` free). A holder may yield when it is in ``among`` (when given)
        and ``yieldable`` (when given) accepts it; ``yieldable`` is asked at most once about each holder. Only the
        groups where an accepted holder holds devices can fit (on nodes in ``allowed``, when given). Two walks find
        the same group, and the one with less to read is taken: from the holders that might yield (every one asked,
        leading to its groups: cheap when few might) or along the groups (each read until more of its devices are
        held by holders that may not yield than it can spare: cheap on a busy fleet, where a request for whole nodes
        reads about one device a node, however many lower-priority workers there are).
        """
        key = self._key(candidate)
        if key is None or gpu_count < 1:
            return None
        holders = key.holders
        # two walks give the same answer; take the one with less to read: the groups (each read until it has more
        # devices that cannot yield than it can spare) or the holders that might yield (each leading to its groups)
        asked = len(holders) if among is None else min(len(among), len(holders))
        if len(key.groups) * (key.largest - gpu_count + 1) < asked:
            return self._reclaim_by_groups(key, gpu_count, yieldable, among, allowed)
        return self._reclaim_by_holders(key, gpu_count, yieldable, among, allowed)

    def _reclaim_by_holders(
        self,
        key: _Key,
        gpu_count: int,
        yieldable: Callable[[Holder], bool] | None,
        among: Collection[Holder] | None,
        allowed: Collection[str] | None,
    ) -> tuple[str, tuple[Device, ...], tuple[Holder, ...]] | None:
        """``fit_reclaim`` by walking the holders that might yield to the groups where they hold devices."""
        holders = key.holders
        pool: Iterable[Holder] = holders
        if among is not None:
            pool = (
                [h for h in among if h in holders] if len(among) < len(holders) else [h for h in holders if h in among]
            )
        accepted: set[Holder] = set()
        numbers: set[int] = set()
        where = self._where
        for named in pool:
            if yieldable is None or yieldable(named):
                accepted.add(named)
                for position in self._by_holder[named]:
                    for group in where[position]:
                        if group.key is key:
                            numbers.add(group.number)
        if not numbers:
            return None
        held = self._held
        for number in sorted(numbers):
            group = key.groups[number]
            if len(group.slots) < gpu_count or (allowed is not None and group.node not in allowed):
                continue
            if sum(1 for p in group.slots if (h := held[p]) is None or h in accepted) >= gpu_count:
                return self._reclaimed(group, gpu_count, accepted)
        return None

    def _reclaim_by_groups(
        self,
        key: _Key,
        gpu_count: int,
        yieldable: Callable[[Holder], bool] | None,
        among: Collection[Holder] | None,
        allowed: Collection[str] | None,
    ) -> tuple[str, tuple[Device, ...], tuple[Holder, ...]] | None:
        """``fit_reclaim`` by walking the key's groups in fleet order: the first where free devices and those of
        holders that may yield make ``gpu_count``, one of them at least held by such a holder. A group is read only
        until more of its devices are held by holders that may not yield than it can spare, so on a busy fleet a
        request for whole nodes reads about one device a node; each holder is asked about once."""
        if among is not None and not isinstance(among, set | frozenset):
            among = frozenset(among)
        verdicts: dict[Holder, bool] = {}
        held = self._held
        for group in key.groups:
            slots = group.slots
            spare = len(slots) - gpu_count  # devices of the group that may stay with who holds them
            if spare < 0 or (allowed is not None and group.node not in allowed):
                continue
            taken = 0
            for position in slots:
                holder = held[position]
                if holder is None:
                    continue
                verdict = verdicts.get(holder)
                if verdict is None:
                    verdict = verdicts[holder] = (among is None or holder in among) and (
                        yieldable is None or yieldable(holder)
                    )
                if verdict:
                    taken += 1
                else:
                    spare -= 1
                    if spare < 0:
                        break
            else:
                if taken:
                    return self._reclaimed(group, gpu_count, {h for h, yes in verdicts.items() if yes})
        return None

    def _reclaimed(
        self, group: _Group, gpu_count: int, accepted: Container[Holder]
    ) -> tuple[str, tuple[Device, ...], tuple[Holder, ...]]:
        """The reclaim a walk found in ``group``: its node, ``gpu_count`` devices (free ones first, then those of
        ``accepted`` holders, each part in fleet order) and the holders of those to stop."""
        held, devices = self._held, self._devices
        free = [devices[p] for p in group.slots if held[p] is None]
        taken = [devices[p] for p in group.slots if (h := held[p]) is not None and h in accepted]
        chosen = tuple((free + taken)[:gpu_count])
        reclaim = {h.worker_id: h for d in chosen if (h := held[self._position[d.key]]) is not None}
        return group.node, chosen, tuple(reclaim.values())


def _same(what: str, kept: object, counted: object) -> None:
    if kept != counted:
        raise AssertionError(f"the index keeps {what} {kept!r}, a recount gives {counted!r}")


def _move(buckets: list[list[int]], number: int, old: int, new: int) -> None:
    """Move group ``number`` from the bucket of ``old`` free devices to that of ``new``."""
    bucket = buckets[old]
    del bucket[bisect_left(bucket, number)]
    insort(buckets[new], number)
