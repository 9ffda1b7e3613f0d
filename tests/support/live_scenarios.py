"""The scenario the live-answer end-to-end tests share (#37): a desk plugin whose booking
needs a confirmation with two choices (or four, for a floor) and whose calendar needs a
sign-in, counting the bookings it runs; and the wait for what the platform shows."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import anyio

from core.tools.registry import LoginRequired, Plugin, Tool, ToolCallContext

LOGIN_URL = "https://calendar.example/login?state=s1"
SUMMARY = "Book a room for Friday"


def rooms(context: ToolCallContext, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The booking's two choices."""
    return [("Small room", "small"), ("Big room", "big")]


def floors(context: ToolCallContext, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
    """A floor's four choices (more than some platforms show as buttons)."""
    return [(f"Floor {n}", f"floor{n}") for n in range(1, 5)]


class Desk:
    """The desk plugin: ``book`` (confirm-required, two choices), ``calendar`` (raises a
    sign-in to ``login_url``) and, with ``floors``, ``book_floor`` (four choices); every
    booking run is appended to ``booked``."""

    def __init__(
        self, *, login_url: str = LOGIN_URL, summary: str = SUMMARY, floors: bool = False
    ) -> None:
        self.booked: list[str] = []
        self.login_url = login_url
        self.summary = summary
        self.floors = floors

    async def book(self, context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        size = str(arguments.get("size", "small"))
        self.booked.append(size)
        return f"booked the {size} room"

    async def calendar(self, context: ToolCallContext, arguments: Mapping[str, Any]) -> str:
        raise LoginRequired("Calendar", self.login_url)

    def plugin(self) -> Plugin:
        schema = {"type": "object", "properties": {"size": {"type": "string"}}}
        book = Tool(
            name="book",
            description="Book a room.",
            parameters=schema,
            run=self.book,
            confirm=True,
            summary=lambda context, arguments: self.summary,
            choices=rooms,
            choice_argument="size",
        )
        book_floor = Tool(
            name="book_floor",
            description="Book a floor.",
            parameters=schema,
            run=self.book,
            confirm=True,
            summary=lambda context, arguments: "Book a floor for Friday",
            choices=floors,
            choice_argument="size",
        )
        calendar = Tool(
            name="calendar",
            description="Read the calendar.",
            parameters={"type": "object", "properties": {}},
            run=self.calendar,
        )
        tools = (book, book_floor, calendar) if self.floors else (book, calendar)
        return Plugin(name="desk", api_version=4, tools=tools)


async def until(what: str, check: Callable[[], Any], timeout: float = 40.0) -> Any:
    """``check()``'s first truthy value, polled every 50 ms, or a failure naming ``what``
    after ``timeout`` seconds."""
    deadline = anyio.current_time() + timeout
    while not (value := check()):
        if anyio.current_time() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g} s")
        await anyio.sleep(0.05)
    return value
