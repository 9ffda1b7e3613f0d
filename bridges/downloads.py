"""The cap on a file a bridge downloads, and the one sentence that refuses one past it.

Every bridge checks the size it is told first (the platform's event, its file API, the
``Content-Length``), then counts what it reads and stops at the first byte past the cap:
:func:`refuse_past` and :func:`read_capped` are those two steps, :func:`too_large` their
sentence, the same for every platform.
"""

from __future__ import annotations

from collections.abc import AsyncIterable

from bridges.port import BridgeError


def too_large(name: str, max_bytes: int, size: int | None = None) -> BridgeError:
    """The refusal of the file ``name``: ``size`` when it was told, else what was read."""
    if size is None:
        return BridgeError(
            f"The file {name!r} is over the {max_bytes}-byte limit; its download was stopped there."
        )
    return BridgeError(
        f"The file {name!r} is {size} bytes, over the {max_bytes}-byte limit; it was not "
        "downloaded."
    )


def refuse_past(name: str, max_bytes: int, size: int | None) -> None:
    """Raise :func:`too_large` when the size told (if any) is over ``max_bytes``."""
    if size is not None and size > max_bytes:
        raise too_large(name, max_bytes, size)


async def read_capped(chunks: AsyncIterable[bytes], name: str, max_bytes: int) -> bytes:
    """The bytes of ``chunks``, read no further than the first chunk past ``max_bytes``."""
    data = bytearray()
    async for chunk in chunks:
        data += chunk
        if len(data) > max_bytes:
            raise too_large(name, max_bytes)
    return bytes(data)
