"""Spaces: chats many people share with the assistant, each a memory and settings boundary."""

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
from core.spaces.turn import Role, SpaceTurn

__all__ = [
    "AREA_PREFIX",
    "PLATFORMS",
    "InvalidSpaceId",
    "Platform",
    "Role",
    "SpaceConfig",
    "SpaceRef",
    "SpaceTrigger",
    "SpaceTurn",
    "area_key",
    "parse_space_id",
]
