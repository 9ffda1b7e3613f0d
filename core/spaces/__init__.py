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

__all__ = [
    "AREA_PREFIX",
    "PLATFORMS",
    "InvalidSpaceId",
    "Platform",
    "SpaceConfig",
    "SpaceRef",
    "SpaceTrigger",
    "area_key",
    "parse_space_id",
]
