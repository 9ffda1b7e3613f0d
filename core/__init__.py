"""Mercury's core: sessions and turns, the model, tools and confirmations, memory, people.

The core never imports a channel and never mentions HTTP; channels call the
:class:`SessionManager` and read the :mod:`~core.engine.events` it produces.
"""

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.channels import Channel, admits
    from core.clock import Clock, ManualClock, system_clock
    from core.config.settings import ConfigurationError, Settings, load_settings
    from core.engine.events import (
        Choice,
        Error,
        Event,
        Final,
        Login,
        Pending,
        Reasoning,
        ReasoningEnd,
        Text,
        Tool,
        ToolFinish,
        TurnStarted,
    )
    from core.engine.sessions import ConfirmResult, SessionManager, Turn, TurnInput
    from core.engine.turn_events import TurnEvents
    from core.memory import MemoryStore
    from core.model import ChatChunk, ChatMessage, ModelClient, ModelError
    from core.people.i18n import Catalogs, Translator
    from core.people.principal import Person, Principal
    from core.tools.registry import (
        LoginRequired,
        Plugin,
        Skill,
        ToolCallContext,
        ToolError,
        ToolRegistry,
        ToolReply,
    )
    from core.turn_logs import TurnLog, TurnLogs
    from core.version import CHANNEL_API_VERSION, PLUGIN_API_VERSION, core_version

# Each name is imported the first time it is asked for: a process that needs one corner of
# the core (``mercury-http spaces``, which only reads the settings) does not load the engine,
# the model client and the memory store to start.
_WHERE = {
    "CHANNEL_API_VERSION": "core.version",
    "Catalogs": "core.people.i18n",
    "Channel": "core.channels",
    "ChatChunk": "core.model",
    "ChatMessage": "core.model",
    "Choice": "core.engine.events",
    "Clock": "core.clock",
    "ConfigurationError": "core.config.settings",
    "ConfirmResult": "core.engine.sessions",
    "Error": "core.engine.events",
    "Event": "core.engine.events",
    "Final": "core.engine.events",
    "Login": "core.engine.events",
    "LoginRequired": "core.tools.registry",
    "ManualClock": "core.clock",
    "MemoryStore": "core.memory",
    "ModelClient": "core.model",
    "ModelError": "core.model",
    "PLUGIN_API_VERSION": "core.version",
    "Pending": "core.engine.events",
    "Person": "core.people.principal",
    "Plugin": "core.tools.registry",
    "Principal": "core.people.principal",
    "Reasoning": "core.engine.events",
    "ReasoningEnd": "core.engine.events",
    "SessionManager": "core.engine.sessions",
    "Settings": "core.config.settings",
    "Skill": "core.tools.registry",
    "Text": "core.engine.events",
    "Tool": "core.engine.events",
    "ToolCallContext": "core.tools.registry",
    "ToolError": "core.tools.registry",
    "ToolFinish": "core.engine.events",
    "ToolRegistry": "core.tools.registry",
    "ToolReply": "core.tools.registry",
    "Translator": "core.people.i18n",
    "Turn": "core.engine.sessions",
    "TurnEvents": "core.engine.turn_events",
    "TurnInput": "core.engine.sessions",
    "TurnLog": "core.turn_logs",
    "TurnLogs": "core.turn_logs",
    "TurnStarted": "core.engine.events",
    "admits": "core.channels",
    "core_version": "core.version",
    "load_settings": "core.config.settings",
    "system_clock": "core.clock",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'core' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "CHANNEL_API_VERSION",
    "PLUGIN_API_VERSION",
    "Catalogs",
    "Channel",
    "ChatChunk",
    "ChatMessage",
    "Choice",
    "Clock",
    "ConfigurationError",
    "ConfirmResult",
    "Error",
    "Event",
    "Final",
    "Login",
    "LoginRequired",
    "ManualClock",
    "MemoryStore",
    "ModelClient",
    "ModelError",
    "Pending",
    "Person",
    "Plugin",
    "Principal",
    "Reasoning",
    "ReasoningEnd",
    "SessionManager",
    "Settings",
    "Skill",
    "Text",
    "Tool",
    "ToolCallContext",
    "ToolError",
    "ToolFinish",
    "ToolRegistry",
    "ToolReply",
    "Translator",
    "Turn",
    "TurnEvents",
    "TurnInput",
    "TurnLog",
    "TurnLogs",
    "TurnStarted",
    "admits",
    "core_version",
    "load_settings",
    "system_clock",
]
