"""Cascade nodes: set-up (create-root/branch/leaf), members, local state and status.

The worker uses :func:`load_node` / :func:`require_node` to learn its node type and
provider location, and the functions of :mod:`pgferry.node.state` to record its position,
errors and heartbeat.
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
from pgferry.node.state import clear_error, heartbeat, record_error, record_tick

__all__ = [
    "LocalState",
    "Member",
    "NodeInfo",
    "clear_error",
    "heartbeat",
    "load_node",
    "local_state",
    "members",
    "record_error",
    "record_tick",
    "require_node",
]
