"""MCP servers as tools: each configured server's tools, its per-person sign-in."""

from __future__ import annotations

from core.tools.mcp.discovery import SignInUnavailable
from core.tools.mcp.hosts import admits
from core.tools.mcp.oauth import AccessRefused, McpSignIn, OAuthTarget

__all__ = ["AccessRefused", "McpSignIn", "OAuthTarget", "SignInUnavailable", "admits"]
