"""Spaces: chats many people share with the assistant, each a memory and settings boundary."""

from core.spaces.access import MuteTarget, MuteTargets, NotPermitted, require
from core.spaces.ambient import AMBIENT_NOTE, Ambient, AmbientMessage, render_ambient
from core.spaces.bot_turns import BotTurns
from core.spaces.config import SpaceConfig, SpaceTrigger
from core.spaces.ids import (
    AREA_PREFIX,
    PLATFORMS,
    InvalidSpaceId,
    Platform,
    SpaceRef,
    area_key,
    parse_space_id,
)
from core.spaces.members import PERMISSIONS, Permission, Space, Spaces, allows
from core.spaces.mutes import MAX_MUTE, MIN_MUTE, Mute, MuteError, MuteFault, Mutes, parse_duration
from core.spaces.names import Names
from core.spaces.preferences import (
    MAX_PREFERENCES,
    MAX_VALUE_CHARS,
    PREFERENCE_KEY,
    Preference,
    PreferenceError,
    PreferenceFault,
    SpacePreferences,
    render_preferences,
)
from core.spaces.settings import SETTING_KEYS, SettingError, SettingKey, SpaceSettings
from core.spaces.turn import Role, SpaceTurn

__all__ = [
    "AMBIENT_NOTE",
    "AREA_PREFIX",
    "MAX_MUTE",
    "MAX_PREFERENCES",
    "MAX_VALUE_CHARS",
    "MIN_MUTE",
    "PERMISSIONS",
    "PLATFORMS",
    "PREFERENCE_KEY",
    "SETTING_KEYS",
    "Ambient",
    "AmbientMessage",
    "BotTurns",
    "InvalidSpaceId",
    "Mute",
    "MuteError",
    "MuteFault",
    "MuteTarget",
    "MuteTargets",
    "Mutes",
    "Names",
    "NotPermitted",
    "Permission",
    "Platform",
    "Preference",
    "PreferenceError",
    "PreferenceFault",
    "Role",
    "SettingError",
    "SettingKey",
    "Space",
    "SpaceConfig",
    "SpacePreferences",
    "SpaceRef",
    "SpaceSettings",
    "SpaceTrigger",
    "SpaceTurn",
    "Spaces",
    "allows",
    "area_key",
    "parse_duration",
    "parse_space_id",
    "render_ambient",
    "render_preferences",
    "require",
]
