"""MCP servers as tools: each configured server's tools, its per-person sign-in.

``connection`` keeps one live SDK client per server (per person for ``auth: oauth``) with a
circuit breaker; ``servers`` turns each server's tools into a plugin for the registry
(confirmations, retries, metrics); ``elicitation`` stages a server's questions; ``results``
is what the model reads of an answer; ``oauth`` signs each person in.
"""

from __future__ import annotations

from core.tools.mcp.connection import McpConnection, McpOutcomeUnknown, McpUnavailable
from core.tools.mcp.discovery import SignInUnavailable
from core.tools.mcp.hosts import admits
from core.tools.mcp.oauth import AccessRefused, McpSignIn, OAuthTarget
from core.tools.mcp.servers import McpServers, ServerHealth
from core.tools.mcp.step_up import ScopeRefused

__all__ = [
    "AccessRefused",
    "McpConnection",
    "McpOutcomeUnknown",
    "McpServers",
    "McpSignIn",
    "McpUnavailable",
    "OAuthTarget",
    "ScopeRefused",
    "ServerHealth",
    "SignInUnavailable",
    "admits",
]
