"""Hosting a control plane: the composition roots and what only they share. ``flashpoint serve``'s server
(``server``), the SDK's in-process server (``embedded``), what every host needs (``plane``: the plane's builder,
backend and fleet, listening socket, URL), the announcements this machine's CLI finds planes by (``announce``),
loading the endpoints an app declares (``discovery``) and serve's console (``console``).

The edge: nothing in the core or the SDK imports it, except the SDK's one lazy seam (``sdk.default_connection``
starting the embedded server).
"""
