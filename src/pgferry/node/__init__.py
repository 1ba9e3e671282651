"""Cascade nodes: set-up (create-root/branch/leaf), members, local state and status.

:func:`load_node` / :func:`require_node` tell the node type, worker name and provider
location of a config's database; the worker records its position, errors and heartbeat
through :mod:`pgferry.node.model`.
"""

from pgferry.node.model import (
    LocalState,
    Member,
    NodeInfo,
    load_node,
    local_state,
    members,
    require_node,
)

__all__ = [
    "LocalState",
    "Member",
    "NodeInfo",
    "load_node",
    "local_state",
    "members",
    "require_node",
]
