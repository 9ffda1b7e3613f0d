"""A turn's events rendered live (bridges/live.py): status lines, hidden reasoning, buttons
or the typed tokens, and the action strings the buttons carry."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from bridges.live import (
    ConfirmPress,
    LiveAnswer,
    StopPress,
    confirm_action,
    new_stop_id,
    owner_mark,
    parse_action,
    stop_action,
)
from bridges.port import ACTION_MAX_BYTES, EgressFile, LiveLimits
from core.engine import events
from core.engine.sessions import Turn
from core.people.i18n import Catalogs
from tests.support.recording_bridge import LiveRecordingBridge

EN = Catalogs.load().translator("en")
IT = Catalogs.load().translator("it")


def test_actions_fit_every_platform_and_read_back_as_written() -> None:
    person = "people:" + "x" * 200
    stop_id = new_stop_id()
    confirm = confirm_action("k9m2-x7q4", person)
    stop = stop_action(stop_id)
    assert len(confirm.encode()) <= ACTION_MAX_BYTES and len(stop.encode()) <= ACTION_MAX_BYTES
    assert parse_action(confirm) == ConfirmPress(token="k9m2-x7q4", owner=owner_mark(person))
    assert parse_action(stop) == StopPress(turn=stop_id)
    assert len({new_stop_id() for _ in range(1000)}) == 1000  # drawn, never derived
    for foreign in ("", "c:", "c:tok:short", "s:123", "x:whatever", "s:" + "a" * 100):
        assert parse_action(foreign) is None


async def rendered(
    bridge: LiveRecordingBridge,
    script: Sequence[events.Event],
    *,
    language: str = "en",
    files: Sequence[EgressFile] = (),
) -> None:
    turn = Turn()
    for event in script:
        turn.events.push(event)
    turn.events.push(None)
    turn.outcome = "final"
    to = bridge.message("C1", "U1", "@Mercury hi")

    async def files_of() -> Sequence[EgressFile]:
        return files

    answer = LiveAnswer(
        bridge, to, IT if language == "it" else EN, owner_key="people:ann", stop_id=new_stop_id()
    )
    await answer.render(turn, timeout_s=10, files_of=files_of)


def test_tools_show_as_their_label_and_reasoning_never_shows() -> None:
    bridge = LiveRecordingBridge(limits=LiveLimits(max_chars=400, edit_interval_s=0.0))

    async def scene() -> None:
        turn = Turn()
        to = bridge.message("C1", "U1", "@Mercury hi")

        async def no_files() -> Sequence[EgressFile]:
            return ()

        answer = LiveAnswer(bridge, to, EN, owner_key="people:ann", stop_id=new_stop_id())
        rendering = asyncio.create_task(answer.render(turn, timeout_s=10, files_of=no_files))
        steps: list[list[events.Event]] = [
            [events.Reasoning(chunk="secret plan", id="r1")],
            [events.Tool(label="Searching the web…", detail="", tool_call_id="t1")],
            [events.ToolFinish(tool_call_id="t1", outcome="success")],
            [events.Text(chunk="Found it.")],
            [events.Final(text="Found it.")],
        ]
        for step in steps:
            for event in step:
                turn.events.push(event)
            await asyncio.sleep(0.05)
        turn.outcome = "final"
        turn.events.push(None)
        await rendering

    asyncio.run(scene())
    shown = [(c.text, c.status) for c in bridge.calls if c.kind == "show"]
    assert ("", "Searching the web…") in shown
    assert shown[-1] == ("Found it.", None)
    assert all("secret" not in text for text, _ in shown)
    assert bridge.live[0].text == "Found it." and bridge.live[0].state == "finished"


def test_more_choices_than_buttons_fall_back_to_the_tokens_to_type() -> None:
    bridge = LiveRecordingBridge(limits=LiveLimits(max_chars=400, edit_interval_s=0.0))
    choices = tuple(events.Choice(f"aaaa-bbb{n}", f"Room {n}") for n in range(6))
    pending = events.Pending(command="Book", token=choices[0].token, choices=choices)
    asyncio.run(rendered(bridge, [pending, events.Final(text="Which room?")]))
    [message] = bridge.live
    assert message.buttons == ()
    assert message.text.startswith("Which room?\n\nTo confirm, answer with the token (Room 0: ")


def test_a_plain_confirmation_is_one_button_in_the_persons_language() -> None:
    bridge = LiveRecordingBridge(limits=LiveLimits(max_chars=400, edit_interval_s=0.0))
    pending = events.Pending(
        command="Delete", token="aaaa-bbbb", choices=(events.Choice("aaaa-bbbb", ""),)
    )
    asyncio.run(rendered(bridge, [pending, events.Final(text="Sicuro?")], language="it"))
    [message] = bridge.live
    assert message.text == "Sicuro?"
    [button] = message.buttons
    assert button.label == "Conferma"
    assert button.action == confirm_action("aaaa-bbbb", "people:ann")
    assert bridge.calls[0].status == "Sto pensando…"
    assert [b.label for b in bridge.calls[0].buttons] == ["Ferma"]


def test_reasoning_shows_as_its_latest_line_only_when_the_setting_asks() -> None:
    for show in (False, True):
        bridge = LiveRecordingBridge(limits=LiveLimits(max_chars=400, edit_interval_s=0.0))

        async def scene(show: bool = show, bridge: LiveRecordingBridge = bridge) -> None:
            turn = Turn()
            to = bridge.message("C1", "U1", "@Mercury hi")

            async def no_files() -> Sequence[EgressFile]:
                return ()

            answer = LiveAnswer(
                bridge, to, EN, owner_key="people:ann", stop_id=new_stop_id(), show_reasoning=show
            )
            rendering = asyncio.create_task(answer.render(turn, timeout_s=10, files_of=no_files))
            for chunk in ("First I read", " the question.\n", "Then I an", "swer."):
                turn.events.push(events.Reasoning(chunk=chunk, id="r1"))
                await asyncio.sleep(0.03)
            turn.events.push(events.Text(chunk="Hi."))
            turn.events.push(events.Final(text="Hi."))
            turn.outcome = "final"
            turn.events.push(None)
            await rendering

        asyncio.run(scene())
        statuses = [c.status for c in bridge.calls if c.kind == "show"]
        if show:
            assert "Then I answer." in statuses and "First I read the question." in statuses
        else:
            assert not any(s and "read" in s for s in statuses)
        assert bridge.live[0].text == "Hi."
