"""MCP servers as tools: each configured server's tools, its per-person sign-in."""

from __future__ import annotations

from core.tools.mcp.oauth import McpSignIn, OAuthTarget

__all__ = ["McpSignIn", "OAuthTarget"]
