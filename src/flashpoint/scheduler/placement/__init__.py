"""Pure placement: where a worker fits, or the reasons it cannot. The fleet index (``index``: every device, who holds
it, free counts per model and node), the node ledger (``nodes``: CPU reservations), node filters (``filters``:
``datacenter=``, ``min_cuda_version``) and the fit itself (``fit``: ordered candidates over the index).

Pure functions and in-memory indexes: no clock, no I/O, no processes; tested by tables (``tests/scheduler/``).
"""
