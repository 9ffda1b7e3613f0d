"""Live answers and buttons end to end (#37): a real server, the Ollama stand-in, and the
tests' own platform writing answers live (tests/support/recording_bridge.py).

Each platform's own end-to-end test shows the same through its SDK and stand-in; these show
the pipeline's rules once: paced updates that end exactly at ``final``, splitting, 429s,
confirmation buttons and who may press them, private sign-in links, the stop button, and
the setting that turns it all off.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from bridges.deliveries import Deliveries
from bridges.port import LiveLimits
from tests.support.contract import check_response
from tests.support.live_scenarios import Desk
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.recording_bridge import LiveMessage, LiveRecordingBridge
from tests.support.server import RunningServer

pytestmark = [pytest.mark.timeout(90)]

CONFIG = """
spaces:
  "slack:C1":
    admins: [slack:UADMIN]
  "slack:C5":
    live_answers: false
"""


@pytest.fixture
def bridge() -> LiveRecordingBridge:
    return LiveRecordingBridge()


@pytest.fixture
def desk() -> Desk:
    return Desk()


@pytest.fixture
def config(tmp_path: Path) -> str:
    path = tmp_path / "mercury.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    return str(path)


@pytest.fixture
def chat(
    make_server: Callable[..., RunningServer],
    bridge: LiveRecordingBridge,
    desk: Desk,
    config: str,
) -> RunningServer:
    return make_server(
        {"bridges": [bridge], "plugins": [desk.plugin()]}, MERCURY_CONFIG_FILE=config
    )


def shows(bridge: LiveRecordingBridge, number: int) -> list[str]:
    return [c.text for c in bridge.calls_to(number) if c.kind == "show"]


def finished_text(messages: list[LiveMessage]) -> str:
    return "".join(m.text for m in messages)


def test_an_answer_arrives_in_several_paced_updates_that_end_exactly_at_final(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    words = [f"word{n} " for n in range(30)]
    ollama.enqueue(ChatScript(content=words, delay_s=0.05))
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury tell me", thread="7.1"))
    [message] = bridge.wait_for_answer(1)
    assert message.state == "finished" and message.text == "".join(words)
    assert message.to.thread_id == "slack:C1:7.1"
    calls = bridge.calls_to(1)
    assert calls[0].kind == "open" and calls[0].status == "Thinking…"
    assert [b.label for b in calls[0].buttons] == ["Stop"]
    texts = shows(bridge, 1)
    assert len([t for t in texts if t]) >= 3, texts  # written as it came, not at once
    assert all("".join(words).startswith(t) for t in texts)  # only ever grows
    assert calls[-1].kind == "finish" and calls[-1].buttons == ()
    # Edits never faster than the platform's interval (a little slack for the clock); the
    # first words may follow the opening at once.
    times = [c.at for c in calls[1:]]
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    assert min(gaps) >= bridge.limits.edit_interval_s * 0.9, gaps
    assert bridge.replies == []  # no second, single message


def test_a_long_answer_splits_at_the_limit_with_nothing_lost_or_repeated(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, desk: Desk
) -> None:
    bridge = LiveRecordingBridge(limits=LiveLimits(max_chars=120, edit_interval_s=0.05))
    chat = make_server({"bridges": [bridge], "plugins": [desk.plugin()]})
    sentence = "The quick brown fox jumps over the lazy dog. "
    text = "".join(
        f"{sentence * 2}\n\n" if n % 3 == 0 else sentence for n in range(9)
    ).strip()  # about three limits long
    assert len(text) > 3 * 120
    ollama.enqueue(ChatScript.words(text, delay_s=0.005))
    bridge.post(chat, bridge.message("D9", "U4", "a long one"))
    bridge.wait_for("the whole answer", lambda: finished_text(bridge.live) == text)
    messages = bridge.wait_for_answer(4)
    assert finished_text(messages) == text
    assert all(0 < len(m.text) <= 120 for m in messages)
    assert all(m.state == "finished" for m in messages)
    # Cut at boundaries: every message but the last ends with a space or a line break.
    assert all(m.text[-1].isspace() for m in messages[:-1])


def test_a_429_mid_answer_delays_but_loses_nothing(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    words = [f"w{n} " for n in range(20)]
    ollama.enqueue(ChatScript(content=words, delay_s=0.03))
    bridge.unavailable = [0.5, None]
    bridge.post(chat, bridge.message("D9", "U4", "go"))
    [message] = bridge.wait_for_answer(1)
    assert bridge.refused == 2
    assert message.text == "".join(words)
    calls = bridge.calls_to(1)
    assert max(b.at - a.at for a, b in itertools.pairwise(calls)) >= 0.45


def booking(ollama: OllamaStandIn, answer: str = "Which room would you like?") -> None:
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "book", "arguments": {}}]),
        ChatScript.words(answer),
    )


def test_a_confirmation_shows_one_button_per_choice_and_only_its_owner_confirms_once(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn, desk: Desk
) -> None:
    booking(ollama)
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury book a room", thread="8.1"))
    [asked] = bridge.wait_for_answer(1)
    assert asked.text == "Which room would you like?"  # exactly final: no typed tokens
    assert [b.label for b in asked.buttons] == ["Small room", "Big room"]
    small, big = asked.buttons
    assert small.action.startswith("c:") and len(small.action.encode()) <= 64

    # Another member's press runs nothing and is told so, to them alone.
    other = bridge.pressed(asked, "U2", big.action)
    assert bridge.press(chat, other).json() == {"ok": True, "taken": 1}
    bridge.wait_for("the refusal", lambda: bridge.answered)
    assert [(p.author_id, text) for p, text in bridge.answered] == [
        ("U2", "This isn't yours to answer.")
    ]
    assert desk.booked == [] and bridge.settled == []

    # The owner's press confirms, once; the platform's retry of it runs nothing.
    mine = bridge.pressed(asked, "U1", small.action)
    assert bridge.press(chat, mine).json()["taken"] == 1
    assert bridge.press(chat, mine).json()["taken"] == 0
    [_, done] = bridge.wait_for_answer(2)
    assert done.text == "Confirmed and done."
    assert done.to.thread_id == asked.to.thread_id
    assert desk.booked == ["small"]
    assert [(p.author_id, text) for p, text in bridge.settled] == [("U1", "Chosen: Small room")]
    assert asked.buttons == ()

    # A second press (a new delivery) changes nothing and is answered privately.
    again = bridge.pressed(asked, "U1", big.action)
    assert bridge.press(chat, again).json()["taken"] == 1
    bridge.wait_for("the second answer", lambda: len(bridge.answered) == 2)
    assert bridge.answered[-1][1] == "Already answered or expired."
    assert desk.booked == ["small"] and len(bridge.live) == 2
    assert len(ollama.requests) == 2  # the confirmation never asked the model


def test_typing_the_token_still_confirms_where_buttons_do_not_fit(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, desk: Desk
) -> None:
    bridge = LiveRecordingBridge(
        limits=LiveLimits(max_chars=400, edit_interval_s=0.05, max_buttons=1)
    )
    chat = make_server({"bridges": [bridge], "plugins": [desk.plugin()]})
    booking(ollama, "Pick one.")
    bridge.post(chat, bridge.message("D7", "U1", "book a room"))
    [asked] = bridge.wait_for_answer(1)
    assert asked.buttons == ()
    assert asked.text.startswith("Pick one.\n\nTo confirm, answer with the token (Small room: ")
    token = asked.text.split("Big room: ")[1].rstrip(").")
    bridge.post(chat, bridge.message("D7", "U1", token))
    [_, done] = bridge.wait_for_answer(2)
    assert done.text == "Confirmed and done." and desk.booked == ["big"]


def test_a_sign_in_link_goes_to_its_person_alone_never_into_the_group(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "calendar", "arguments": {}}]),
        ChatScript.words("Please sign in first, then ask again."),
    )
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury my calendar?"))
    [answer] = bridge.wait_for_answer(1)
    assert answer.text == "Please sign in first, then ask again."
    [(to, text)] = bridge.privates
    assert to.author_id == "U1"
    assert text == "Sign in to Calendar: https://calendar.example/login?state=s1"
    assert all("calendar.example" not in c.text for c in bridge.calls)
    assert bridge.replies == []


def test_a_refused_private_link_is_a_hint_in_the_group_and_the_model_is_told_the_truth(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    bridge.private_refused = True
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "calendar", "arguments": {}}]),
        ChatScript.words("Open a direct chat with me first."),
    )
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury my calendar?"))
    bridge.wait_for_answer(1)
    [hint] = bridge.wait_for_replies(1)
    assert hint.to.thread_id.startswith("slack:C1") and "Calendar" in hint.text
    assert "direct chat" in hint.text
    assert bridge.privates == []
    assert all("calendar.example" not in t for t in [hint.text, *(c.text for c in bridge.calls)])
    [told] = [m["content"] for m in ollama.requests[1]["messages"] if m["role"] == "tool"]
    assert "could not be sent" in told and "shown a link" not in told


def test_a_sign_in_link_in_a_direct_chat_reaches_the_model_as_sent_privately(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "calendar", "arguments": {}}]),
        ChatScript.words("Sign in, then ask again."),
    )
    bridge.post(chat, bridge.message("D3", "U1", "my calendar?"))
    bridge.wait_for_answer(1)
    [(to, text)] = bridge.privates
    assert to.is_dm and "https://calendar.example/login?state=s1" in text
    [told] = [m["content"] for m in ollama.requests[1]["messages"] if m["role"] == "tool"]
    assert "sent to them privately" in told


def test_the_stop_button_cancels_the_turn_and_the_model_request_for_its_author_only(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=["Very ", "long"], delay_s=30.0))
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury write an essay", thread="5.5"))
    ollama.wait_until(lambda: ollama.open_streams >= 1, timeout=20, what="the turn")
    bridge.wait_for("the first words", lambda: "Very " in shows(bridge, 1))
    [message] = bridge.live
    [stop] = bridge.calls_to(1)[0].buttons
    assert stop.label == "Stop"

    bridge.press(chat, bridge.pressed(message, "U2", stop.action))
    bridge.wait_for("the refusal", lambda: bridge.answered)
    assert bridge.answered[-1][1] == (
        "Only the person who asked, or an admin of this space, can stop this turn."
    )
    assert ollama.open_streams == 1 and message.state == "open"

    bridge.press(chat, bridge.pressed(message, "U1", stop.action))
    [stopped] = bridge.wait_for_answer(1)
    assert stopped.state == "failed" and stopped.text == "Stopped."
    assert bridge.answered[-1][1] == "Stopped."
    ollama.wait_for_closed(1, timeout=20)
    assert not any(c.kind == "finish" for c in bridge.calls)  # no answer was left
    assert bridge.replies == []


def test_with_live_answers_off_the_answer_is_one_message_as_before(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, desk: Desk, config: str
) -> None:
    bridge = LiveRecordingBridge()
    chat = make_server(
        {"bridges": [bridge], "plugins": [desk.plugin()]},
        MERCURY_CONFIG_FILE=config,
        BRIDGE_LIVE_ANSWERS="false",
    )
    booking(ollama, "Pick a room.")
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury book"))
    [reply] = bridge.wait_for_replies(1)
    assert reply.text.startswith("Pick a room.\n\nTo confirm, answer with the token (")
    assert bridge.live == [] and bridge.calls == []


def test_a_space_can_turn_live_answers_off_for_itself(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("One message."), ChatScript.words("Live here."))
    bridge.post(chat, bridge.message("C5", "U1", "@Mercury hi"))
    [reply] = bridge.wait_for_replies(1)
    assert reply.text == "One message." and bridge.live == []
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury hi"))
    [live] = bridge.wait_for_answer(1)
    assert live.text == "Live here." and len(bridge.replies) == 1


def test_an_admin_turns_live_answers_off_through_the_assistant_and_a_member_can_t(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    """#40: the space_settings tool, with the routes' check, changes the next answer."""
    off = {"action": "set", "key": "live_answers", "value": False}
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "space_settings", "arguments": off}]),
        ChatScript.words("Not allowed."),
        ChatScript(tool_calls=[{"name": "space_settings", "arguments": off}]),
        ChatScript.words("Done."),
        ChatScript.words("One message now."),
    )
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury stop writing live"))
    bridge.wait_for_answer(1)
    refused = [m["content"] for m in ollama.requests[1]["messages"] if m["role"] == "tool"]
    assert "Only an admin of this space may change its settings" in refused[-1]
    bridge.post(chat, bridge.message("C1", "UADMIN", "@Mercury stop writing live"))
    [_, done] = bridge.wait_for_answer(2)
    assert done.text == "Done."  # written live: the setting was changed during this turn
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury hi"))
    [reply] = bridge.wait_for_replies(1)
    assert reply.text == "One message now."
    assert len(bridge.live) == 2


def test_a_platform_without_partial_text_gets_finished_paragraphs_as_messages(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    bridge = LiveRecordingBridge(
        limits=LiveLimits(max_chars=4096, edit_interval_s=0.05, partial=False)
    )
    chat = make_server({"bridges": [bridge]})
    paragraphs = ["First, the plan.", "Then, the details of it.", "Last, the end."]
    ollama.enqueue(
        ChatScript(content=[f"{p}\n\n" for p in paragraphs[:-1]] + [paragraphs[-1]], delay_s=0.4)
    )
    bridge.post(chat, bridge.message("D3", "U3", "plan it"))
    bridge.wait_for("three messages", lambda: len(bridge.live) >= 3)
    messages = bridge.wait_for_answer(3)
    assert finished_text(messages) == "\n\n".join(paragraphs)
    assert [m.text.strip() for m in messages] == paragraphs
    assert not any(c.kind == "show" for c in bridge.calls)  # never partial text


def test_presses_sent_to_their_own_route_are_checked_and_taken_like_the_others(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Done."))
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury hi"))
    [message] = bridge.wait_for_answer(1)
    spent = bridge.pressed(message, "U1", "c:abcd-efgh:0123456789")
    forged = bridge.press(chat, spent, path="/interactions", sign=False)
    check_response(forged)
    assert forged.status_code == 401 and forged.json()["ok"] is False
    taken = bridge.press(chat, spent, path="/interactions")
    check_response(taken)
    assert taken.json() == {"ok": True, "taken": 1}
    bridge.wait_for("the answer to the press", lambda: bridge.answered)
    assert bridge.answered == [(spent, "This isn't yours to answer.")]
    elsewhere = httpx.post(chat.url + "/webhooks/irc/interactions", content=b"{}", timeout=10)
    check_response(elsewhere)
    assert elsewhere.status_code == 404 and elsewhere.json()["ok"] is False


def test_a_double_tap_on_two_choices_runs_one_and_tells_the_other_privately(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn, desk: Desk
) -> None:
    booking(ollama)
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury book a room"))
    [asked] = bridge.wait_for_answer(1)
    small, big = asked.buttons
    presses = [bridge.pressed(asked, "U1", b.action) for b in (small, big)]
    with ThreadPoolExecutor(2) as pool:
        taken = list(pool.map(lambda p: bridge.press(chat, p).json()["taken"], presses))
    assert taken == [1, 1]
    bridge.wait_for("one answer and one refusal", lambda: bridge.answered and len(bridge.live) == 2)
    [_, done] = bridge.wait_for_answer(2)
    assert done.text == "Confirmed and done."
    assert [text for _, text in bridge.answered] == ["Already answered or expired."]
    assert len(desk.booked) == 1 and len(bridge.settled) == 1
    assert len(bridge.live) == 2  # nothing said in the group about the second tap


def test_an_error_mid_answer_replaces_the_partial_text_with_its_sentence(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(
        ChatScript(content=["Half ", "an ", "answer ", "and"], delay_s=0.3, error_after=3)
    )
    bridge.post(chat, bridge.message("D9", "U4", "go"))
    [message] = bridge.wait_for_answer(1)
    assert any(text.startswith("Half") for text in shows(bridge, 1))
    assert message.state == "failed"
    assert message.text.startswith("The model ") and "Half" not in message.text
    assert message.buttons == ()


def test_the_files_a_turn_wrote_come_with_the_finished_answer(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(
        ChatScript(
            tool_calls=[
                {"name": "outbox_write", "arguments": {"filename": "plan.txt", "content": "A"}}
            ]
        ),
        ChatScript.words("Here is the plan."),
    )
    bridge.post(chat, bridge.message("D9", "U4", "write the plan"))
    [message] = bridge.wait_for_answer(1)
    assert message.text == "Here is the plan."
    assert [(f.filename, f.data) for f in message.files] == [("plan.txt", b"A")]


def test_a_muted_persons_press_runs_nothing_and_says_nothing(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn, desk: Desk
) -> None:
    booking(ollama)
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury book a room"))
    [asked] = bridge.wait_for_answer(1)
    mute = {"person": "slack:U1", "duration": "10m", "reason": "spam"}
    ollama.enqueue(
        ChatScript(tool_calls=[{"name": "mute", "arguments": mute}]),
        ChatScript(tool_calls=[{"name": "mute", "arguments": {**mute, "confirm": True}}]),
        ChatScript.words("Muted."),
    )
    bridge.post(chat, bridge.message("C1", "UADMIN", "@Mercury mute U1"))
    bridge.wait_for_answer(2)
    assert bridge.press(chat, bridge.pressed(asked, "U1", asked.buttons[0].action)).json() == {
        "ok": True,
        "taken": 1,
    }
    time.sleep(1.0)  # what must not happen has had time to
    assert desk.booked == [] and bridge.answered == [] and bridge.settled == []
    assert len(bridge.live) == 2


def test_a_typed_stop_leaves_one_stopped_where_the_answer_was_being_written(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript(content=["Very ", "long"], delay_s=30.0))
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury write an essay", thread="6.6"))
    ollama.wait_until(lambda: ollama.open_streams >= 1, timeout=20, what="the turn")
    bridge.post(chat, bridge.message("C1", "U1", "@Mercury stop", thread="6.6"))
    [stopped] = bridge.wait_for_answer(1)
    assert stopped.state == "failed" and stopped.text == "Stopped."
    ollama.wait_for_closed(1, timeout=20)
    time.sleep(0.5)
    assert bridge.replies == [] and len(bridge.live) == 1  # said once, not twice


def test_a_stop_value_pressed_in_another_conversation_stops_nothing(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    """Eve, who only DMs the bot, presses G's stop value on a message of her own DM: a press
    is judged against the turn it names, in that turn's space, never in her DM's."""
    ollama.enqueue(ChatScript.words("Hello Eve."))
    bridge.post(chat, bridge.message("D8", "UEVE", "hello"))
    [own] = bridge.wait_for_answer(1)
    ollama.enqueue(ChatScript(content=["Very ", "long"], delay_s=30.0))
    bridge.post(chat, bridge.message("C1", "UANN", "@Mercury write an essay", thread="9.9"))
    ollama.wait_until(lambda: ollama.open_streams >= 1, timeout=20, what="Ann's turn")
    bridge.wait_for("Ann's first words", lambda: "Very " in shows(bridge, 2))
    [stop] = bridge.calls_to(2)[0].buttons

    bridge.press(chat, bridge.pressed(own, "UEVE", stop.action))
    bridge.wait_for("the answer to Eve's press", lambda: bridge.answered)
    assert bridge.answered[-1][1] != "Stopped."
    time.sleep(0.5)  # what must not happen has had time to
    assert ollama.open_streams == 1 and bridge.live[1].state == "open"

    bridge.press(chat, bridge.pressed(bridge.live[1], "UANN", stop.action))
    [_, stopped] = bridge.wait_for_answer(2)
    assert stopped.state == "failed" and stopped.text == "Stopped."


def test_a_stop_value_is_unguessable_and_new_for_every_turn(
    chat: RunningServer, bridge: LiveRecordingBridge, ollama: OllamaStandIn
) -> None:
    """Nothing public (the space, the thread, the session key) gives a stop button's value."""
    ollama.enqueue(ChatScript.words("One."), ChatScript.words("Two."))
    for count in (1, 2):
        bridge.post(chat, bridge.message("C1", "U1", "@Mercury hi", thread="4.4"))
        bridge.wait_for_answer(count)
    first, second = ([b.action for b in bridge.calls_to(n)[0].buttons] for n in (1, 2))
    assert first != second
    assert all(len(action.encode()) <= 64 for action in first + second)
    assert "space:slack:C1:slack:C1:4.4" not in first[0]


def test_a_token_typed_with_the_trigger_in_a_group_confirms_and_never_reaches_the_model(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn, desk: Desk
) -> None:
    bridge = LiveRecordingBridge(
        limits=LiveLimits(max_chars=400, edit_interval_s=0.05, max_buttons=1)
    )
    chat = make_server({"bridges": [bridge], "plugins": [desk.plugin()]})
    booking(ollama, "Pick one.")
    bridge.post(chat, bridge.message("C7", "U1", "@Mercury book a room"))
    [asked] = bridge.wait_for_answer(1)
    token = asked.text.split("Big room: ")[1].rstrip(").")
    # As Element sends a reply that mentions the bot, and as people write it by hand.
    bridge.post(chat, bridge.message("C7", "U1", f"Mercury: {token}"))
    [_, done] = bridge.wait_for_answer(2)
    assert done.text == "Confirmed and done." and desk.booked == ["big"]
    assert len(ollama.requests) == 2  # the token was never a message to the model
    assert all(token not in str(request["messages"]) for request in ollama.requests)


def test_an_answer_whose_client_went_mid_answer_runs_again_into_the_same_message(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    """A frozen instance wakes past its lease with its platform client closed: the answer's
    last word can't reach the platform, so the delivery is run again, into that message."""
    bridge = LiveRecordingBridge(limits=LiveLimits(max_chars=400, edit_interval_s=0.05))
    chat = make_server({"bridges": [bridge]}, MERCURY_CONVERSATION_LEASE_S="2")
    words = [f"w{n} " for n in range(20)]
    whole = "".join(words)
    ollama.enqueue(ChatScript(content=words, delay_s=0.05), ChatScript.words(whole))
    bridge.post(chat, bridge.message("D9", "U4", "go"))
    bridge.wait_for("the first words", lambda: any(shows(bridge, 1)))
    bridge.cut_open()
    [message] = bridge.wait_for_answer(1, timeout=30)
    assert message.state == "finished" and message.text == whole
    assert [c.kind for c in bridge.calls].count("reopen") == 1
    assert len(ollama.requests) == 2 and bridge.replies == []


def test_a_taken_over_answer_whose_message_was_deleted_is_posted_anew_once(
    make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    bridge = LiveRecordingBridge(limits=LiveLimits(max_chars=400, edit_interval_s=0.05))
    chat = make_server({"bridges": [bridge]}, MERCURY_CONVERSATION_LEASE_S="2")
    # Another instance took the delivery, posted its answer's first words and died; the
    # message is gone since (deleted by someone in the chat).
    dead = Deliveries(chat.services.db, lease_s=0.5, holder="dead-instance")
    message = bridge.message("D8", "U4", "again")
    assert chat.call(dead.take(message))
    chat.call(dead.posted(message, "999"))
    ollama.enqueue(ChatScript.words("Written anew."))
    [answer] = bridge.wait_for_answer(1, timeout=30)
    assert answer.text == "Written anew." and answer.to.delivery_id == message.delivery_id
    assert "reopen" not in [c.kind for c in bridge.calls]
