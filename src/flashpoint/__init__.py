"""flashpoint: Runpod Flash-style GPU endpoints on your own GPUs.

from flashpoint import Endpoint, GpuGroup

@Endpoint(name="inference", gpu=GpuGroup.AMPERE_80)
async def infer(data: dict) -> dict: ...
"""

from __future__ import annotations

from flashpoint._version import __version__
from flashpoint.errors import (
    BackendError,
    BadInputError,
    ConfigError,
    Error,
    InvalidEndpointError,
    InvalidTransitionError,
    JobCancelledError,
    JobFailedError,
    JobTimeoutError,
    NotFoundError,
    QueueFullError,
    StoreError,
    UnknownGPUError,
    UnsatisfiableError,
)
from flashpoint.explain import Explanation
from flashpoint.flash.names import (
    CPU_DATACENTERS,
    DEFAULT_WORKERS_MAX,
    DEFAULT_WORKERS_MIN,
    CpuInstanceType,
    CpuLiveLoadBalancer,
    CpuLiveServerless,
    CpuLoadBalancerSlsResource,
    CpuServerlessEndpoint,
    CudaVersion,
    DataCenter,
    FlashApp,
    LiveLoadBalancer,
    LiveServerless,
    LoadBalancerSlsResource,
    NetworkVolume,
    PodTemplate,
    ResourceManager,
    ServerlessEndpoint,
    ServerlessType,
    remote,
)
from flashpoint.gpus import GpuGroup, GPUModel, GpuType
from flashpoint.jobs import JobStatus, JobView, Placement, Reason
from flashpoint.sdk import envfile
from flashpoint.sdk.context import current_job
from flashpoint.sdk.deploy import DeployError, DeployResult, DeployTimeoutError, deploy
from flashpoint.sdk.endpoint import Endpoint, EndpointClient, EndpointSpec, JobHandle, ServerlessScalerType
from flashpoint.sdk.endpointjob import EndpointJob
from flashpoint.spec import Secret

# as Runpod Flash does at import: the project's .env, never overriding what is set (FLASHPOINT_DOTENV=0: off)
envfile.load()

__all__ = [
    # SDK
    "Endpoint",
    "EndpointClient",
    "EndpointJob",
    "EndpointSpec",
    "Secret",
    "ServerlessScalerType",
    "__version__",
    "current_job",
    # Deploying to a server
    "DeployError",
    "DeployResult",
    "DeployTimeoutError",
    "deploy",
    # Jobs
    "Explanation",
    "JobHandle",
    "JobStatus",
    "JobView",
    "Placement",
    "Reason",
    # GPUs
    "GPUModel",
    "GpuGroup",
    "GpuType",
    # Runpod Flash's value types and constants
    "CPU_DATACENTERS",
    "DEFAULT_WORKERS_MAX",
    "DEFAULT_WORKERS_MIN",
    "CpuInstanceType",
    "CudaVersion",
    "DataCenter",
    "NetworkVolume",
    "PodTemplate",
    "ServerlessType",
    # Runpod Flash's cloud management (import only)
    "FlashApp",
    "ResourceManager",
    # Runpod Flash's legacy names (deprecated; warn once when used)
    "CpuLiveLoadBalancer",
    "CpuLiveServerless",
    "CpuLoadBalancerSlsResource",
    "CpuServerlessEndpoint",
    "LiveLoadBalancer",
    "LiveServerless",
    "LoadBalancerSlsResource",
    "ServerlessEndpoint",
    "remote",
    # Errors
    "BackendError",
    "BadInputError",
    "ConfigError",
    "Error",
    "InvalidEndpointError",
    "InvalidTransitionError",
    "JobCancelledError",
    "JobFailedError",
    "JobTimeoutError",
    "NotFoundError",
    "QueueFullError",
    "UnsatisfiableError",
    "StoreError",
    "UnknownGPUError",
]
