"""The model fallback chain against real protocol stand-ins on 127.0.0.1.

The first model fails in each way a server fails to start an answer; the chain asks the
next one, never on a plain 4xx and never once the answer began; a model that failed is
skipped for its cool-down, then probed once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import anyio
import pytest

from core.model import (
    ChatChunk,
    ChatMessage,
    FallbackModel,
    ModelError,
    ModelHTTPError,
    ModelUnreachable,
    OllamaModel,
    OpenAIModel,
)
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.openai_standin import OpenAIStandIn
from tests.support.ports import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60)]

HELLO = [ChatMessage(role="user", content="hello")]


@pytest.fixture(scope="module")
def primary_session() -> Iterator[OllamaStandIn]:
    with OllamaStandIn() as standin:
        yield standin


@pytest.fixture(scope="module")
def backup_session() -> Iterator[OpenAIStandIn]:
    with OpenAIStandIn(models=["backup"]) as standin:
        yield standin


@pytest.fixture
def primary(primary_session: OllamaStandIn) -> Iterator[OllamaStandIn]:
    primary_session.reset()
    yield primary_session
    primary_session.reset()


@pytest.fixture
def backup(backup_session: OpenAIStandIn) -> Iterator[OpenAIStandIn]:
    backup_session.reset()
    yield backup_session
    backup_session.reset()


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def chain(
    primary_url: str,
    backup: OpenAIStandIn,
    *,
    clock: Clock | None = None,
    first_chunk_timeout_s: float = 5.0,
    failures: list[tuple[str, str]] | None = None,
) -> FallbackModel:
    return FallbackModel(
        [
            OllamaModel(primary_url, "llama3.2", read_timeout_s=30, connect_timeout_s=2),
            OpenAIModel(backup.base_url, "backup", read_timeout_s=30, connect_timeout_s=2),
        ],
        first_chunk_timeout_s=first_chunk_timeout_s,
        cooldown_s=30,
        max_cooldown_s=120,
        on_failure=None if failures is None else lambda model, why: failures.append((model, why)),
        now=clock or Clock(),
    )


async def answer(model: FallbackModel) -> tuple[str, str | None]:
    """The whole answer's text, and the model the ``done`` chunk names."""
    text: list[str] = []
    answered: str | None = None
    batch: Sequence[ChatChunk]
    with anyio.fail_after(20):
        async for batch in model.chat(HELLO):
            for chunk in batch:
                if chunk.message is not None:
                    text.append(chunk.message.content)
                if chunk.done:
                    answered = chunk.model
    return "".join(text), answered


@pytest.mark.parametrize(
    ("script", "reason"),
    [
        (ChatScript(status=429, error="slow down"), "rate_limited"),
        (ChatScript(status=503, error="overloaded"), "server_error"),
        (ChatScript(status=500, error="crashed"), "server_error"),
        (ChatScript(content=["late"], first_delay_s=3.0), "timeout"),
        (ChatScript(content=["cut"], close_after=0), "broke_off"),
    ],
    ids=["429", "503", "500", "no first chunk in time", "cut before the first chunk"],
)
async def test_a_model_that_fails_to_start_hands_the_call_to_the_next(
    primary: OllamaStandIn, backup: OpenAIStandIn, script: ChatScript, reason: str
) -> None:
    primary.enqueue(script)
    failures: list[tuple[str, str]] = []
    model = chain(primary.url, backup, first_chunk_timeout_s=1.0, failures=failures)
    try:
        text, answered = await answer(model)
    finally:
        await model.close()
    assert answered == "backup"
    assert text  # the backup's echo of the question
    assert len(primary.requests) == 1
    assert len(backup.requests) == 1
    assert failures == [("llama3.2", reason)]


async def test_a_model_nobody_answers_for_hands_the_call_to_the_next(
    backup: OpenAIStandIn,
) -> None:
    failures: list[tuple[str, str]] = []
    model = chain(f"http://127.0.0.1:{free_port()}", backup, failures=failures)
    try:
        _, answered = await answer(model)
    finally:
        await model.close()
    assert answered == "backup"
    assert failures == [("llama3.2", "unreachable")]


async def test_a_refused_request_is_not_asked_of_another_model(
    primary: OllamaStandIn, backup: OpenAIStandIn
) -> None:
    primary.enqueue(ChatScript(status=400, error="bad request"))
    model = chain(primary.url, backup)
    try:
        with pytest.raises(ModelHTTPError) as raised:
            await answer(model)
    finally:
        await model.close()
    assert raised.value.status == 400
    assert backup.requests == []
    assert model.breakers[0].state == "closed"


async def test_an_answer_that_began_is_never_handed_over(
    primary: OllamaStandIn, backup: OpenAIStandIn
) -> None:
    primary.enqueue(ChatScript(content=["one ", "two ", "three"], error_after=2))
    model = chain(primary.url, backup)
    seen: list[str] = []
    try:
        with pytest.raises(ModelError):
            with anyio.fail_after(20):
                async for batch in model.chat(HELLO):
                    seen.extend(c.message.content for c in batch if c.message is not None)
    finally:
        await model.close()
    assert "".join(seen).startswith("one two")
    assert backup.requests == []


async def test_a_failed_model_is_skipped_while_it_cools_then_probed_once(
    primary: OllamaStandIn, backup: OpenAIStandIn
) -> None:
    clock = Clock()
    model = chain(primary.url, backup, clock=clock)
    primary.enqueue(ChatScript(status=503))
    try:
        assert (await answer(model))[1] == "backup"
        # Cooling: the next calls never reach the first model.
        for _ in range(3):
            assert (await answer(model))[1] == "backup"
        assert len(primary.requests) == 1
        assert model.breakers[0].state == "open"
        # Cooled: one call probes it, and a probe that fails doubles the cool-down.
        clock.now += 31
        assert model.breakers[0].state == "half_open"
        primary.enqueue(ChatScript(status=503))
        assert (await answer(model))[1] == "backup"
        assert len(primary.requests) == 2
        clock.now += 31
        assert model.breakers[0].state == "open"  # 60 s now
        clock.now += 30
        # A probe that succeeds closes the breaker: the first model answers again.
        assert (await answer(model))[1] == "llama3.2"
        assert model.breakers[0].state == "closed"
        assert (await answer(model))[1] == "llama3.2"
    finally:
        await model.close()


async def test_with_every_model_cooling_the_one_cooled_soonest_is_asked(
    primary: OllamaStandIn, backup: OpenAIStandIn
) -> None:
    clock = Clock()
    model = chain(primary.url, backup, clock=clock)
    primary.enqueue(ChatScript(status=503))
    backup.enqueue(ChatScript(status=503))
    try:
        with pytest.raises(ModelHTTPError):
            await answer(model)
        clock.now += 1
        # Both open; the first cools first (it failed first): it alone is asked.
        assert (await answer(model))[1] == "llama3.2"
        assert len(backup.requests) == 1
    finally:
        await model.close()


async def test_summaries_fall_back_too_and_the_chain_is_ready_while_one_model_answers(
    backup: OpenAIStandIn,
) -> None:
    model = chain(f"http://127.0.0.1:{free_port()}", backup)
    try:
        with anyio.fail_after(20):
            assert await model.complete(HELLO)
            assert await model.reachable()
    finally:
        await model.close()
    nobody = FallbackModel(
        [OllamaModel(f"http://127.0.0.1:{free_port()}", "a", connect_timeout_s=1)]
    )
    try:
        with anyio.fail_after(20):
            assert not await nobody.reachable()
            with pytest.raises(ModelUnreachable):
                await answer(nobody)
    finally:
        await nobody.close()
