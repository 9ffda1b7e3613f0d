"""Questions a 2025-11-25 server asks while a call is open, put to the person a bounded time.

On the 2025-11-25 revision a server asks (``elicitation/create``) in the middle of a
``tools/call`` and waits for the answer on the same connection. :class:`OpenQuestions` parks
such a call: the tool call of the turn ends with the question staged as a ``pending`` (the
turn can't stay open for a person), the MCP request stays open in a task of its own, and the
person's choice (``/confirm``, a button) is handed to the waiting server, after which the
call's result is awaited as usual. Past ``wait_s`` the server is answered ``cancel``.

A parked call lives in this instance's memory, as its open request does: a choice made on
another instance finds nothing and the model is told the question expired. A question is
put to the person only when exactly one call is in flight on the connection (the revision
doesn't say which call a question belongs to); otherwise it is cancelled at once, never
shown to the wrong person.

Exceptions::

    ToolError (core.tools.registry)
    └── QuestionExpired      the parked call is gone (answered, timed out, other instance)
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import mcp_types as types

from core.tools.registry import ToolError

__all__ = ["OpenQuestions", "Parked", "QuestionExpired"]

log = logging.getLogger("mercury.mcp")

R = TypeVar("R")


class QuestionExpired(ToolError):
    """The call that asked is no longer waiting for the answer."""


@dataclass(eq=False)
class _Flight:
    """One call in flight on a connection, and the question it may be asked."""

    id: str
    #: The person the call is made for: only they may answer its question.
    owner: str
    question: asyncio.Future[types.ElicitRequestParams] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    answer: asyncio.Future[types.ElicitResult] | None = None


@dataclass(frozen=True)
class Parked:
    """A call waiting for the person's answer to ``params``; resumed by ``id``."""

    id: str
    params: types.ElicitRequestParams


class OpenQuestions:
    """The calls of this instance parked on a question, by id."""

    def __init__(self) -> None:
        self._active: dict[object, set[_Flight]] = {}
        self._parked: dict[str, tuple[_Flight, asyncio.Task[Any], object]] = {}

    def busy(self, connection: object) -> bool:
        """Whether a call is in flight on ``connection`` (a parked one included)."""
        return bool(self._active.get(connection))

    def callback(self, connection: object, wait_s: float) -> Any:
        """The SDK's ``elicitation_callback`` for ``connection``."""

        async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
            flights = self._active.get(connection, set())
            if len(flights) != 1:
                log.info("an MCP question with %d calls in flight: cancelled", len(flights))
                return types.ElicitResult(action="cancel")
            (flight,) = flights
            if flight.question.done():
                return types.ElicitResult(action="cancel")
            answer: asyncio.Future[types.ElicitResult] = asyncio.get_running_loop().create_future()
            flight.answer = answer
            flight.question.set_result(params)
            try:
                async with asyncio.timeout(wait_s):
                    return await answer
            except TimeoutError:
                self._parked.pop(flight.id, None)
                log.info("an MCP question waited %.0f s for an answer: cancelled", wait_s)
                return types.ElicitResult(action="cancel")

        return elicit

    async def run(
        self, connection: object, owner: str, start: Callable[[], Coroutine[Any, Any, R]]
    ) -> R | Parked:
        """The call's result, or :class:`Parked` when the server asked ``owner`` first."""
        flight = _Flight(id=secrets.token_urlsafe(12), owner=owner)
        self._active.setdefault(connection, set()).add(flight)
        task: asyncio.Task[R] = asyncio.create_task(start())
        result: R | Parked = await self._race(flight, task, connection)
        return result

    async def resume(self, flight_id: str, owner: str, answer: types.ElicitResult) -> Any:
        """Hand ``owner``'s ``answer`` to the parked call; its result, or :class:`Parked` again."""
        parked = self._parked.get(flight_id)
        if parked is not None and parked[0].owner == owner:
            del self._parked[flight_id]
        else:
            parked = None
        if parked is None or parked[0].answer is None or parked[0].answer.done():
            raise QuestionExpired(
                "The server stopped waiting for this answer (it waits a limited time, on the "
                "instance that asked); call the tool again if the person still wants it."
            )
        flight, task, connection = parked
        assert flight.answer is not None  # noqa: S101 - checked just above
        flight.answer.set_result(answer)
        return await self._race(flight, task, connection)

    async def _race(self, flight: _Flight, task: asyncio.Task[Any], connection: object) -> Any:
        try:
            await asyncio.wait({task, flight.question}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            self._done(flight, connection)
            raise
        if task.done():
            self._done(flight, connection)
            return task.result()
        params = flight.question.result()
        flight.question = asyncio.get_running_loop().create_future()
        self._parked[flight.id] = (flight, task, connection)
        task.add_done_callback(lambda done: self._ended(flight, done, connection))
        return Parked(flight.id, params)

    def _ended(self, flight: _Flight, task: asyncio.Task[Any], connection: object) -> None:
        """A parked call ended without the person (the server gave up, or was told cancel)."""
        if self._parked.get(flight.id, (None,))[0] is flight:
            del self._parked[flight.id]
        if not task.cancelled() and task.exception() is not None:
            log.info("a parked MCP call ended: %s", task.exception())
        self._done(flight, connection)

    def _done(self, flight: _Flight, connection: object) -> None:
        flights = self._active.get(connection)
        if flights is not None:
            flights.discard(flight)
            if not flights:
                self._active.pop(connection, None)
