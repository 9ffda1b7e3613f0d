"""The chat platforms' bridges: Slack, Telegram, Discord and WhatsApp, and their pipeline."""

from bridges.port import (
    Attachment,
    BridgeError,
    EgressFile,
    GatewayBridge,
    IngressMessage,
    PlatformBridge,
    PlatformUnavailable,
    Received,
    ThreadInfo,
    Verdict,
    WebhookBridge,
    WebhookOutcome,
)

__all__ = [
    "Attachment",
    "BridgeError",
    "EgressFile",
    "GatewayBridge",
    "IngressMessage",
    "PlatformBridge",
    "PlatformUnavailable",
    "Received",
    "ThreadInfo",
    "Verdict",
    "WebhookBridge",
    "WebhookOutcome",
]
