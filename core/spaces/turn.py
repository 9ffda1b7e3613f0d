"""What a turn in a shared space carries into the core beside the person's words."""

from __future__ import annotations

from typing import Literal

import msgspec

from core.spaces.ids import area_key

__all__ = ["Role", "SpaceTurn"]

Role = Literal["admin", "member"]


class SpaceTurn(msgspec.Struct, frozen=True, kw_only=True):
    """A turn's space: which one, the conversation inside it, and who speaks.

    ``preferences`` is the space's preferences block (for the instructions of every run);
    ``ambient`` the space's messages that were not addressed to the assistant since its last
    run, rendered, placed before the person's words.
    """

    space_id: str
    conversation: str
    is_dm: bool
    caller_id: str
    author_name: str | None = None
    role: Role | None = None
    preferences: str = ""
    ambient: str = ""

    @property
    def area(self) -> str:
        """The key the space's memory, files and wiki are kept under."""
        return area_key(self.space_id)
