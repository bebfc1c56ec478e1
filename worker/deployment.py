"""A versioned worker: `agent-worker --deployment NAME --build-id ID` (or `AGENT_DEPLOYMENT`,
`AGENT_BUILD_ID`) runs every worker of the process as that Temporal Worker Deployment Version.
Conversations are pinned to the version they start on, and move to a new current version at a
turn boundary (`workflows.conversation`); operators promote versions with the temporal CLI.

Temporal refuses some names silently: a worker polling with them is never registered and never
gets a task. So the names are checked here before anything starts (the rules the server was seen
to apply), and after the workers start `registered` waits until the server lists the version,
failing with the server's reason (its own validation) or, with none, after a while.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from temporalio.api.deployment.v1 import WorkerDeploymentVersion as VersionProto
from temporalio.api.workflowservice.v1 import DescribeWorkerDeploymentVersionRequest
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from ..contract.names import version_label

MAX_BUILD_ID_CHARS = 255  # the server's default `limit.workerBuildIdSize`
REGISTER_PATIENCE_S = 20.0


class DeploymentRefused(ValueError):
    """The deployment name or build id cannot be used: the worker exits 2 with this."""


def version_from(deployment: str | None, build_id: str | None,
                 env: Mapping[str, str]) -> WorkerDeploymentVersion | None:
    """The version the flags (or else `AGENT_DEPLOYMENT` and `AGENT_BUILD_ID`) name; None for an
    unversioned worker (neither given). `DeploymentRefused` if only one is given, or a name
    breaks a rule Temporal holds."""
    name = deployment if deployment is not None else env.get("AGENT_DEPLOYMENT", "")
    build = build_id if build_id is not None else env.get("AGENT_BUILD_ID", "")
    name, build = name.strip(), build.strip()
    if not name and not build:
        return None
    if not name or not build:
        missing = "--deployment (AGENT_DEPLOYMENT)" if not name else "--build-id (AGENT_BUILD_ID)"
        raise DeploymentRefused(f"a versioned worker needs both a deployment and a build id: "
                                f"{missing} is missing")
    problem = _problem(name, build)
    if problem is not None:
        raise DeploymentRefused(problem)
    return WorkerDeploymentVersion(deployment_name=name, build_id=build)


def _problem(name: str, build: str) -> str | None:
    for what, value in (("deployment name", name), ("build id", build)):
        if value.startswith("__"):
            return f"the {what} {value!r} may not start with '__' (Temporal reserves it)"
    for mark in (".", ":"):
        if mark in name:
            return (f"the deployment name {name!r} may not hold {mark!r} (Temporal joins the "
                    f"name and the build id with it, and never registers such a worker)")
    if len(build) > MAX_BUILD_ID_CHARS:
        return (f"the build id is {len(build)} characters; Temporal takes at most "
                f"{MAX_BUILD_ID_CHARS}")
    return None


def deployment_config(version: WorkerDeploymentVersion | None) -> WorkerDeploymentConfig | None:
    """What every worker of a versioned process runs with; conversations are pinned."""
    if version is None:
        return None
    return WorkerDeploymentConfig(version=version, use_worker_versioning=True,
                                  default_versioning_behavior=VersioningBehavior.PINNED)


async def _described(client: Client, namespace: str, version: WorkerDeploymentVersion) -> bool:
    """Whether the server knows the version (its workers have polled); `DeploymentRefused` if it
    refuses the names."""
    request = DescribeWorkerDeploymentVersionRequest(
        namespace=namespace, deployment_version=VersionProto(
            deployment_name=version.deployment_name, build_id=version.build_id))
    try:
        await client.workflow_service.describe_worker_deployment_version(request)
        return True
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        if err.status == RPCStatusCode.INVALID_ARGUMENT:
            raise DeploymentRefused(f"Temporal refuses {version_label(version)}: {err.message}"
                                    ) from None
        if err.status == RPCStatusCode.UNIMPLEMENTED:
            raise DeploymentRefused("this Temporal server does not support Worker Deployments "
                                    "(run the worker without --deployment)") from None
        raise


async def registered(client: Client, namespace: str, version: WorkerDeploymentVersion,
                     patience_s: float = REGISTER_PATIENCE_S) -> None:
    """After the workers start: wait until the server lists the version, which it does once a
    poll with it was accepted; `DeploymentRefused` if that does not happen in `patience_s`."""
    deadline = asyncio.get_running_loop().time() + patience_s
    while not await _described(client, namespace, version):
        if asyncio.get_running_loop().time() > deadline:
            raise DeploymentRefused(
                f"Temporal did not register {version_label(version)} within {patience_s:.0f} s "
                f"of the worker polling with it: the server refuses the deployment name or the "
                f"build id, or does not support Worker Deployments")
        await asyncio.sleep(0.5)
