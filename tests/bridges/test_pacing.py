"""The pacer (bridges/pacing.py): splits on boundaries, exact under any input, paced, and a
429 delays without losing a character."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridges.pacing import Pacer, split, split_point
from bridges.port import (
    EgressFile,
    LiveLimits,
    LiveReply,
    PlatformUnavailable,
    Received,
    ReplyButton,
    ThreadInfo,
)

TO = Received(
    platform="test",
    thread_id="test:C1",
    delivery_id="1",
    message_id="1",
    author_id="U1",
    author_name="Ann",
    text="hi",
    is_dm=False,
)

texts = st.text(alphabet=st.sampled_from([*list("ab .!?\n\t"), "é", "😀", "…", "。"]), max_size=600)


@given(texts, st.integers(min_value=1, max_value=80))
@settings(max_examples=300, deadline=None)
def test_split_loses_and_repeats_nothing_and_keeps_to_the_limit(text: str, limit: int) -> None:
    parts = split(text, limit)
    assert "".join(parts) == text
    assert all(len(p) <= limit for p in parts)
    assert all(parts) or parts == [""]


def test_a_cut_prefers_a_paragraph_then_a_line_then_a_sentence_then_a_word() -> None:
    assert split_point("one two\n\nthree four\nfive", 20) == len("one two\n\n")
    assert split_point("one two three\nfour five six", 20) == len("one two three\n")
    assert split_point("One two. Three four five six", 20) == len("One two. ")
    assert split_point("one two three four five six", 20) == len("one two three four ")
    assert split_point("x" * 30, 20) == 20
    assert split_point("short", 20) == 5
    with pytest.raises(ValueError, match="holds nothing"):
        split_point("text", 0)


def test_a_boundary_too_early_is_passed_over_for_a_fuller_message() -> None:
    text = "a\n\n" + "word " * 10
    assert split_point(text, 30) == 28  # after a word, not after "a\n\n" (3 characters)


def test_a_cut_never_splits_a_grapheme() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"  # one emoji of five code points
    flag, thumb, accent = "\U0001f1eb\U0001f1f7", "\U0001f44d\U0001f3fd", "e\u0301"
    for cluster in (family, flag, thumb, accent, "\u2764\ufe0f"):
        text = cluster * 12
        for limit in range(len(cluster), len(text)):
            parts = split(text, limit)
            assert "".join(parts) == text
            assert all(part and len(part) % len(cluster) == 0 for part in parts), (cluster, limit)


def test_no_message_is_left_with_a_fragment_of_a_few_characters() -> None:
    text = "word " * 20 + "\U0001f389"  # 101 characters: a cut at 100 leaves the emoji alone
    parts = split(text, 100)
    assert "".join(parts) == text
    assert min(len(part) for part in parts) >= 8, parts
    assert parts[0].endswith(" ")  # still at a word


def test_a_platform_counting_utf16_units_gets_parts_within_them() -> None:
    text = "ok \U0001f600 " * 700  # 4,900 characters, 6,300 UTF-16 units
    parts = split(text, 4096, units="utf16")
    assert "".join(parts) == text
    assert all(len(p.encode("utf-16-le")) // 2 <= 4096 for p in parts)
    assert min(len(part) for part in parts) >= 8
    assert all(p.endswith(" ") for p in parts[:-1])


@dataclass
class FakeClock:
    """Time the test moves; once ``free``, a sleep moves it itself."""

    now: float = 0.0
    free: bool = False

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        until = self.now + seconds
        while self.now < until and not self.free:
            await asyncio.sleep(0)
        self.now = max(self.now, until)
        await asyncio.sleep(0)


@dataclass
class Platform:
    """A LiveBridge in memory: every call recorded with the fake clock's time."""

    clock: FakeClock
    limits: LiveLimits
    refuse: list[float | None] = field(default_factory=list)
    calls: list[tuple[float, str, int, str]] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    finished: list[bool] = field(default_factory=list)
    buttons: list[Sequence[ReplyButton]] = field(default_factory=list)

    @property
    def platform(self) -> str:
        return "test"

    @property
    def live_limits(self) -> LiveLimits:
        return self.limits

    def parse_thread(self, thread_id: str) -> ThreadInfo:
        return ThreadInfo(space_id="test:C1", conversation_external_id=thread_id, is_dm=False)

    def record(self, kind: str, number: int, text: str) -> None:
        if self.refuse:
            raise PlatformUnavailable("429", retry_after_s=self.refuse.pop(0))
        self.calls.append((self.clock.now, kind, number, text))

    async def open_reply(
        self, to: Received, *, status: str | None, buttons: Sequence[ReplyButton] = ()
    ) -> LiveReply:
        self.calls.append((self.clock.now, "open", len(self.messages), status or ""))
        self.messages.append("")
        self.finished.append(False)
        self.buttons.append(buttons)
        return _Message(self, len(self.messages) - 1)


@dataclass
class _Message:
    platform: Platform
    number: int

    async def show(self, text: str, status: str | None) -> None:
        assert len(text) <= self.platform.limits.max_chars
        assert not self.platform.finished[self.number]
        self.platform.record("show", self.number, text)
        self.platform.messages[self.number] = text

    async def finish(
        self, text: str, buttons: Sequence[ReplyButton] = (), files: Sequence[EgressFile] = ()
    ) -> None:
        assert len(text) <= self.platform.limits.max_chars
        self.platform.record("finish", self.number, text)
        self.platform.messages[self.number] = text
        self.platform.finished[self.number] = True
        self.platform.buttons[self.number] = buttons

    async def fail(self, text: str) -> None:
        self.platform.record("fail", self.number, text)
        self.platform.messages[self.number] = text
        self.platform.finished[self.number] = True


async def write(
    platform: Platform, clock: FakeClock, deltas: Sequence[str], step_s: float
) -> Pacer:
    pacer = Pacer(
        platform,  # type: ignore[arg-type]
        TO,
        limits=platform.limits,
        status="Thinking…",
        buttons=(ReplyButton(label="Stop", action="s:1"),),
        clock=clock,
        sleep=clock.sleep,
    )
    await pacer.open()
    text = ""
    for delta in deltas:
        text += delta
        pacer.offer(text, None)
        clock.now += step_s
        for _ in range(3):
            await asyncio.sleep(0)
    clock.free = True
    await pacer.end(text, (ReplyButton(label="Yes", action="c:x"),))
    return pacer


@given(
    st.lists(texts.filter(bool), min_size=1, max_size=30),
    st.integers(min_value=5, max_value=120),
    st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_the_messages_end_exactly_at_the_answer_whatever_the_deltas(
    deltas: list[str], max_chars: int, partial: bool
) -> None:
    clock = FakeClock()
    platform = Platform(
        clock, LiveLimits(max_chars=max_chars, edit_interval_s=1.0, partial=partial)
    )
    asyncio.run(write(platform, clock, deltas, step_s=0.3))
    assert "".join(platform.messages) == "".join(deltas)
    assert all(platform.finished)
    assert [bool(b) and b[0].action == "c:x" for b in platform.buttons][-1]
    assert all(b == () or b[0].action == "s:1" for b in platform.buttons[:-1])
    times = [at for at, *_ in platform.calls[1:]]  # the first edit may follow the opening
    assert all(later - earlier >= 1.0 - 1e-9 for earlier, later in itertools.pairwise(times)), (
        platform.calls
    )


def test_deltas_coalesce_into_one_update_an_interval() -> None:
    clock = FakeClock()
    platform = Platform(clock, LiveLimits(max_chars=4000, edit_interval_s=1.0))
    pacer = asyncio.run(write(platform, clock, ["tok "] * 100, step_s=0.05))
    # 100 deltas over 5 seconds: about one update a second, not 100.
    assert 4 <= pacer.calls <= 8, platform.calls
    assert platform.messages == ["tok " * 100]


def test_a_429_waits_as_long_as_the_platform_asks_and_loses_nothing() -> None:
    clock = FakeClock()
    platform = Platform(clock, LiveLimits(max_chars=50, edit_interval_s=1.0), refuse=[5.0, None])
    asyncio.run(write(platform, clock, [f"word{n} " for n in range(30)], step_s=0.2))
    assert "".join(platform.messages) == "".join(f"word{n} " for n in range(30))
    times = [at for at, *_ in platform.calls]
    assert max(b - a for a, b in itertools.pairwise(times)) >= 5.0


def test_a_platform_that_cant_be_reached_is_logged_as_such_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    platform = Platform(clock, LiveLimits(max_chars=100, edit_interval_s=1.0))
    down = {"left": 3}
    record = platform.record

    def unreachable(kind: str, number: int, text: str) -> None:
        if down["left"]:
            down["left"] -= 1
            raise PlatformUnavailable("Telegram's sendMessage failed (connect error); try later.")
        record(kind, number, text)

    platform.record = unreachable  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="mercury.bridges"):
        asyncio.run(write(platform, clock, ["one ", "two"], step_s=1.5))
    assert platform.messages == ["one two"]
    said = [r.getMessage() for r in caplog.records if "test " in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("test can't be reached now (Telegram's sendMessage failed")
    assert "asked to wait" not in said[0] and said[0].count("sendMessage") == 1


def test_a_platform_that_breaks_mid_answer_still_gets_the_last_word() -> None:
    clock = FakeClock()
    platform = Platform(clock, LiveLimits(max_chars=100, edit_interval_s=1.0))
    broken = {"left": 2}
    record = platform.record

    def flaky(kind: str, number: int, text: str) -> None:
        if kind == "show" and broken["left"]:
            broken["left"] -= 1
            raise ValueError("a bug in the platform file")
        record(kind, number, text)

    platform.record = flaky  # type: ignore[method-assign]
    asyncio.run(write(platform, clock, ["one ", "two ", "three"], step_s=1.5))
    assert platform.messages == ["one two three"] and platform.finished == [True]
