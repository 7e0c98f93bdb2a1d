"""Runpod SDK 2.x's App API on flashpoint: every public name of ``runpod/apps/__init__.py`` of ``runpod==2.0.0rc2``,
plus ``GpuGroup``, ``GpuType`` and ``CpuInstanceType`` (which ``runpod/__init__.py`` re-exports from
``runpod.apps.gpu``), with rc2's signatures, enum values, option checks and errors (decision 0108).

An unmodified rc2 App file runs on flashpoint: ``import runpod`` resolves to these names where flashpoint loads user
code (``flashpoint.flash.alias``), and a handle's call resolves to a target of flashpoint's (``bridge.py``), which
runs the resource as a flashpoint endpoint. The modules follow rc2's split, one concept each: ``app``, ``spec``,
``handles``, ``job``, ``invoker``, ``targets``, ``context``, ``markers``, ``entrypoint``, ``schedule``, ``secret``,
``model``, ``volume``, ``stubs``, ``gpu``, ``datacenter``, ``errors``, ``discovery_state``. rc2's cloud modules (dev
sessions, live targets, pods, monitor, build, deploy, manage, GraphQL api, CLI) have no counterpart here.

Importing this package loads the standard library only.
"""

from __future__ import annotations

from flashpoint.runpodapps.app import App, get_registered_apps
from flashpoint.runpodapps.context import Context, current_context, is_local
from flashpoint.runpodapps.datacenter import DataCenter
from flashpoint.runpodapps.entrypoint import local_entrypoint
from flashpoint.runpodapps.errors import AppError, EndpointNotFound, RemoteExecutionError, ScheduleNotSupported
from flashpoint.runpodapps.gpu import CpuInstanceType, GpuGroup, GpuType
from flashpoint.runpodapps.handles import ApiHandle, FunctionHandle
from flashpoint.runpodapps.job import Job
from flashpoint.runpodapps.markers import delete, get, init, patch, post, put
from flashpoint.runpodapps.model import Model
from flashpoint.runpodapps.schedule import schedule
from flashpoint.runpodapps.secret import Secret
from flashpoint.runpodapps.spec import ResourceKind, ResourceSpec, RouteSpec
from flashpoint.runpodapps.stubs import Api, Queue
from flashpoint.runpodapps.volume import GlobalVolume, NetworkVolume, Volume

__all__ = [
    "Api",
    "ApiHandle",
    "App",
    "AppError",
    "Context",
    "CpuInstanceType",
    "DataCenter",
    "EndpointNotFound",
    "FunctionHandle",
    "GlobalVolume",
    "GpuGroup",
    "GpuType",
    "Job",
    "Model",
    "NetworkVolume",
    "Queue",
    "RemoteExecutionError",
    "ResourceKind",
    "ResourceSpec",
    "RouteSpec",
    "ScheduleNotSupported",
    "Secret",
    "Volume",
    "current_context",
    "delete",
    "get",
    "get_registered_apps",
    "init",
    "is_local",
    "local_entrypoint",
    "patch",
    "post",
    "put",
    "schedule",
]
