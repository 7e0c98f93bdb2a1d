"""The fleet: what GPUs and nodes there are. Devices and nodes as data (``inventory``), this node's GPUs read through
NVML (``discovery``), simulated fleets (``simulated``) and the directories network volumes are on each node
(``volumes``).

Below the scheduler and the backends, which place on and start workers over what this package describes.
"""
