"""What user code calls: the ``Endpoint`` decorator and its handles (``endpoint``), ``Endpoint(id=...)``'s client
verbs (``endpointclient``) and jobs (``endpointjob``), job handles (``jobhandle``), ``fn.map`` (``mapping``), the
terminal's progress (``progress``), fan-out references (``references``), HTTP routes (``routes``), a call's arguments
(``callargs``), the running job's context (``context``), a project's ``.env`` (``envfile``), and the one seam to a
control plane: the ``Connection`` protocol (``connection``), the process's default connection (``default_connection``)
and the HTTP connection to a server (``client``).

Stands on the core and never imports the edge, except through ``default_connection``'s lazy seam, which starts the
embedded plane or connects to ``FLASHPOINT_URL`` on first use. ``from flashpoint import ...`` is its public face.
"""
