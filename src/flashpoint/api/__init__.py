"""The HTTP layer: worker-protocol routes and native routes over a ControlPlane (may import starlette)."""
