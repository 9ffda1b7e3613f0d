"""Mercury's core: sessions and turns, the model, tools and confirmations, memory, people.

The core never imports a channel and never mentions HTTP; channels call the
:class:`SessionManager` and read the :mod:`~core.engine.events` it produces.
"""

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
