"""Device ownership across the processes of one machine: one owner per device (docs/architecture.md, "One owner per
device"). Leases as ``flock``-ed files (``leases``), the plane's side of taking and giving them back (``leasing``),
want marks that ask a holder's idle workers to give a device up (``wants``), what the kernel says about holders
(``kernel``), which lease directories and lock files may be trusted (``leasetrust``) and the records a holder writes
about itself (``leaserecords``).
"""
