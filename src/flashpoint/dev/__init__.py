"""``flashpoint dev``: a project's endpoints behind Runpod Flash's ``flash dev`` URLs, reloaded as files change. The
project's files and URL layout (``layout``), the server and its reloads (``server``), its ASGI app (``app``) and the
``/docs`` page (``docs``).

The edge, beside ``hosting``: it builds its plane with hosting's builder and is imported only by the CLI and tests.
"""
