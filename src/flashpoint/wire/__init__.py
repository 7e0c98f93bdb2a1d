"""How calls and results travel between processes: the argument and output encoding (``codec``), code shipped by
value (``pickling``), the Runpod worker protocol as data (``protocol``) and the request body limit (``bodylimit``).

Pure data and functions: nothing here starts a process or opens a socket; the scheduler, the worker and the HTTP layer
all speak through it.
"""
