"""Turns' event logs, for rejoining a stream: the port and its memory and shared adapters."""

from core.turn_logs.memory import DELTA_BUDGET, PENDING_RETENTION_S, MemoryTurnLogs, TurnLog
from core.turn_logs.port import Frame, LogElsewhere, TurnLogs
from core.turn_logs.shared import SharedTurnLogs, StoredLog

__all__ = [
    "DELTA_BUDGET",
    "PENDING_RETENTION_S",
    "Frame",
    "LogElsewhere",
    "MemoryTurnLogs",
    "SharedTurnLogs",
    "StoredLog",
    "TurnLog",
    "TurnLogs",
]
