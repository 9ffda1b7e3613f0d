"""The trigger engine: which messages of a space are for the assistant."""

from __future__ import annotations

import pytest

from core.spaces.triggers import Trigger, command_of, without_trigger

MENTION = Trigger(match="mention", pattern="Mercury", media_in_groups=False)


def group(trigger: Trigger, text: str, *, files: bool = False, reply: bool = False) -> bool:
    return trigger.matches(text, is_dm=False, is_reply_to_bot=reply, has_attachments=files)


@pytest.mark.parametrize(
    "text",
    ["@Mercury what time is it?", "hey mercury, help", "MERCURY", "ask @mercury.", "(Mercury)"],
)
def test_the_trigger_word_standing_alone_anywhere_triggers(text: str) -> None:
    assert group(MENTION, text)


@pytest.mark.parametrize(
    "text", ["mercurial moods", "email me at x@mercury", "hello all", "Mercury2 is out", ""]
)
def test_a_message_without_the_word_standing_alone_does_not(text: str) -> None:
    assert not group(MENTION, text)


def test_a_direct_message_and_a_reply_to_the_assistant_always_trigger() -> None:
    assert MENTION.matches("hello", is_dm=True, is_reply_to_bot=False, has_attachments=False)
    assert group(MENTION, "thanks!", reply=True)


def test_prefix_mode_needs_the_word_first() -> None:
    prefix = Trigger(match="prefix", pattern="Mercury", media_in_groups=False)
    assert group(prefix, "  @Mercury summarize this")
    assert group(prefix, "mercury: go")
    assert not group(prefix, "tell Mercury to go")


def test_always_mode_takes_every_message() -> None:
    always = Trigger(match="always", pattern="Mercury", media_in_groups=False)
    assert group(always, "anything at all")
    assert group(always, "", files=True)


def test_a_file_alone_in_a_group_triggers_only_when_the_space_allows_media() -> None:
    assert not group(MENTION, "", files=True)
    assert group(MENTION, "", files=True, reply=True)
    media = Trigger(match="mention", pattern="Mercury", media_in_groups=True)
    assert group(media, "  ", files=True)
    assert not group(media, "  ", files=False)


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("@Mercury stop", "stop"),
        ("stop", "stop"),
        ("Mercury, COMPACT!", "compact"),
        ("/stop", "stop"),
        ("@Mercury stop the music", None),
        ("@Mercury what does compact mean?", None),
    ],
)
def test_stop_and_compact_are_commands_only_as_the_whole_message(
    text: str, command: str | None
) -> None:
    assert command_of(text, MENTION) == command


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("@Mercury Ab3d-9xYz-Q7mN", "Ab3d-9xYz-Q7mN"),
        ("Ab3d-9xYz-Q7mN, mercury!", "Ab3d-9xYz-Q7mN"),
        ("  Ab3d-9xYz-Q7mN.\n", "Ab3d-9xYz-Q7mN"),
        ("mercurial news", "mercurial news"),
    ],
)
def test_without_the_trigger_word_a_message_says_the_rest_trimmed(text: str, said: str) -> None:
    assert without_trigger(text, MENTION) == said
