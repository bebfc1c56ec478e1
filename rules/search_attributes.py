"""The search attributes a conversation keeps, for listing and filtering them: its status and
who started it."""

from __future__ import annotations

from temporalio.common import (
    SearchAttributeKey,
    SearchAttributePair,
    TypedSearchAttributes,
)

AGENT_STATUS = SearchAttributeKey.for_keyword("AgentStatus")
AGENT_OWNER = SearchAttributeKey.for_keyword("AgentOwner")
# Temporal's own: the Worker Deployment Version a run is pinned to (`NAME:ID`), on versioned workers
WORKER_VERSION = SearchAttributeKey.for_keyword("TemporalWorkerDeploymentVersion")


def owned_by(owner: str | None) -> TypedSearchAttributes | None:
    """The search attributes a conversation starts with: its owner, when it has one."""
    if owner is None:
        return None
    return TypedSearchAttributes([SearchAttributePair(AGENT_OWNER, owner)])
