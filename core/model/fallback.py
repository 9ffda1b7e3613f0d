"""Model fallback: an ordered chain of chat models, each behind a circuit breaker.

:class:`FallbackModel` is a :class:`~core.model.ModelClient` over other clients (Ollama or
OpenAI-protocol, in any mix). A turn's model call goes to the first model whose breaker is
closed; when that model *fails to start an answer*, the next one is asked, in order:

- nothing answered at its address (:class:`~core.model.ModelUnreachable`);
- no first chunk within ``first_chunk_timeout_s``;
- an HTTP 429 or 5xx (:class:`~core.model.ModelHTTPError`);
- a stream that broke before its first chunk (:class:`~core.model.ModelBrokeOff`).

Never on another 4xx (the request itself is wrong: the next model would refuse it too), and
never once a chunk has been handed on: what reached the person stays, and a failure after
it is the turn's error, as it is without a chain.

A model that failed is skipped for a cool-down (``cooldown_s``, doubled at each failure in
a row up to ``max_cooldown_s``); once it has cooled, the next call probes it (half-open):
one call at a time, the others still go on down the chain, and a probe that succeeds closes
the breaker. When every breaker is open, the chain is tried from the model whose cool-down
ends first, so a turn is never refused without asking anyone.

Each chunk batch is handed on as the adapter made it: the chain adds one async-generator
hop per *read* from the server, nothing per token. Which model answered is on the ``done``
chunk (``ChatChunk.model``), and on a whole answer (``Completion.model``), which every
adapter fills in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Final, Literal

from core.model.port import (
    ChatChunk,
    ChatMessage,
    Completion,
    ModelBrokeOff,
    ModelClient,
    ModelError,
    ModelHTTPError,
    ModelUnreachable,
    ToolSpec,
)

__all__ = ["Breaker", "FailureKind", "FallbackModel"]

log = logging.getLogger(__name__)

#: Why a model failed to start an answer; the label of ``mercury_model_failures_total``.
FailureKind = Literal["unreachable", "timeout", "rate_limited", "server_error", "broke_off"]

_STARTED: Final = object()


class _NoFirstChunk(ModelBrokeOff):
    """No first chunk came within the chain's time limit."""


class Breaker:
    """The circuit breaker of one model: closed, open for a cool-down, or half-open."""

    def __init__(
        self,
        *,
        cooldown_s: float,
        max_cooldown_s: float,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cooldown_s = cooldown_s
        self._max_cooldown_s = max(cooldown_s, max_cooldown_s)
        self._now = now
        self.failures = 0
        """Failures in a row; 0 while closed."""
        self.open_until = 0.0
        self._probing = False

    @property
    def state(self) -> Literal["closed", "open", "half_open"]:
        if self.failures == 0:
            return "closed"
        return "open" if self._now() < self.open_until or self._probing else "half_open"

    def admits(self) -> bool:
        """Whether a call may go to this model now; a half-open breaker admits one probe."""
        if self.failures == 0:
            return True
        if self._probing or self._now() < self.open_until:
            return False
        self._probing = True
        return True

    def force(self) -> None:
        """Let a call through whatever the state (every breaker of the chain is open)."""
        self._probing = True

    def succeeded(self) -> None:
        self.failures = 0
        self.open_until = 0.0
        self._probing = False

    def failed(self) -> None:
        self.failures += 1
        cooldown = min(self._cooldown_s * 2 ** (self.failures - 1), self._max_cooldown_s)
        self.open_until = self._now() + cooldown
        self._probing = False

    def released(self) -> None:
        """A probe that ended without a verdict (a 4xx, a cancelled turn): the next may probe."""
        self._probing = False


class FallbackModel:
    """A :class:`~core.model.ModelClient` that asks the next model when one can't answer."""

    def __init__(
        self,
        models: Sequence[ModelClient],
        *,
        first_chunk_timeout_s: float = 60.0,
        cooldown_s: float = 30.0,
        max_cooldown_s: float = 600.0,
        on_failure: Callable[[str, FailureKind], None] | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        if not models:
            raise ValueError("a fallback chain needs at least one model")
        self.models: tuple[ModelClient, ...] = tuple(models)
        self.breakers: tuple[Breaker, ...] = tuple(
            Breaker(cooldown_s=cooldown_s, max_cooldown_s=max_cooldown_s, now=now)
            for _ in self.models
        )
        self._first_chunk_timeout_s = first_chunk_timeout_s
        self._on_failure = on_failure

    @property
    def model(self) -> str:
        """The first model's name: the one answering while all is well."""
        return self.models[0].model

    @property
    def host(self) -> str:
        return self.models[0].host

    def _order(self) -> list[int]:
        """The models to ask for this call, in order, each one admitted by its breaker."""
        chosen = [index for index, breaker in enumerate(self.breakers) if breaker.admits()]
        if chosen:
            return chosen
        # Every breaker is open: ask the model whose cool-down ends first, and only it.
        first = min(range(len(self.breakers)), key=lambda index: self.breakers[index].open_until)
        self.breakers[first].force()
        return [first]

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: Sequence[ToolSpec] = (),
        think: bool = False,
    ) -> AsyncIterator[Sequence[ChatChunk]]:
        order = self._order()
        attempted = 0
        try:
            for position, index in enumerate(order):
                attempted = position + 1
                model = self.models[index]
                breaker = self.breakers[index]
                is_last = attempted == len(order)
                stream = model.chat(messages, tools=tools, think=think)
                try:
                    first = await self._first_batch(stream, model, last=is_last)
                except ModelError as error:
                    await _close(stream)
                    kind = _failure_kind(error)
                    if kind is None:
                        breaker.released()  # the request itself is refused: ask no other
                        raise
                    self._failed(index, kind, error)
                    if is_last:
                        raise
                    continue
                except BaseException:
                    breaker.released()
                    await _close(stream)
                    raise
                breaker.succeeded()
                if position > 0:
                    log.info("model %s answered in place of %s", model.model, self.model)
                if first is _STARTED:  # the stream ended without a batch: nothing to hand on
                    await _close(stream)
                    return
                try:
                    yield first  # type: ignore[misc]
                    async for batch in stream:
                        yield batch
                finally:
                    await _close(stream)
                return
        finally:
            # Half-open models further down the chain were admitted for a probe they never
            # got: the next call may probe them.
            for index in order[attempted:]:
                self.breakers[index].released()

    async def _first_batch(
        self, stream: AsyncIterator[Sequence[ChatChunk]], model: ModelClient, *, last: bool
    ) -> Sequence[ChatChunk] | object:
        """The stream's first batch, or ``_STARTED`` for a stream with none."""
        try:
            if last:
                return await anext(stream)
            async with asyncio.timeout(self._first_chunk_timeout_s):
                return await anext(stream)
        except StopAsyncIteration:
            return _STARTED
        except TimeoutError:
            raise _NoFirstChunk(
                f"no answer began within {self._first_chunk_timeout_s:g} s",
                model=model.model,
                host=model.host,
            ) from None

    def _failed(self, index: int, kind: FailureKind, error: ModelError) -> None:
        model = self.models[index]
        self.breakers[index].failed()
        log.warning(
            "model %s failed to start an answer (%s: %s); %s",
            model.model,
            kind,
            error,
            "asking the next model" if index < len(self.models) - 1 else "no model left to ask",
        )
        if self._on_failure is not None:
            self._on_failure(model.model, kind)

    async def complete(self, messages: Sequence[ChatMessage]) -> Completion:
        """The first answer the chain gives; its :class:`~core.model.Completion` names the
        model that gave it, with that model's counts."""
        order = self._order()
        attempted = 0
        try:
            for position, index in enumerate(order):
                attempted = position + 1
                breaker = self.breakers[index]
                try:
                    answer = await self.models[index].complete(messages)
                except ModelError as error:
                    kind = _failure_kind(error)
                    if kind is None:
                        breaker.released()
                        raise
                    self._failed(index, kind, error)
                    if attempted == len(order):
                        raise
                    continue
                except BaseException:
                    breaker.released()
                    raise
                breaker.succeeded()
                return answer
        finally:
            for index in order[attempted:]:
                self.breakers[index].released()
        raise AssertionError("unreachable: the loop returns or raises")  # pragma: no cover

    async def reachable(self) -> bool:
        """Ready while one model of the chain answers."""
        answers = await asyncio.gather(*(model.reachable() for model in self.models))
        return any(answers)

    async def accepts_images(self) -> bool:
        return await self.models[0].accepts_images()

    async def close(self) -> None:
        for model in self.models:
            await model.close()


def _failure_kind(error: ModelError) -> FailureKind | None:
    """Why a model failed to start an answer, or ``None`` when the next must not be asked."""
    if isinstance(error, ModelUnreachable):
        return "unreachable"
    if isinstance(error, ModelHTTPError):
        if error.status == 429:
            return "rate_limited"
        if error.status >= 500:
            return "server_error"
        return None
    if isinstance(error, ModelBrokeOff):
        return "timeout" if isinstance(error, _NoFirstChunk) else "broke_off"
    return None


async def _close(stream: AsyncIterator[Sequence[ChatChunk]]) -> None:
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        with contextlib.suppress(Exception):
            await aclose()
