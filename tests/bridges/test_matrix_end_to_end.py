"""Matrix end to end against a real homeserver: Synapse on 127.0.0.1 (started once for the
module), a real server whose Matrix bridge syncs as the bot, people driven by mautrix's client
API, the model the Ollama stand-in. Replies are read back from the homeserver as people see
them: the bot's messages and their last edits."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from mautrix.api import Method
from mautrix.api import Path as ApiPath
from mautrix.types import UserID

from bridges.deliveries import Deliveries
from bridges.matrix import MatrixBridge
from bridges.port import Received
from core.config.settings import Settings
from tests.support.live_scenarios import LOGIN_URL, Desk
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.scenes import system_of, user_contents
from tests.support.server import RunningServer, serve
from tests.support.synapse import MatrixUser, Synapse

pytestmark = [pytest.mark.timeout(120)]

WAIT_S = 30.0


class People:
    """The homeserver and the accounts of one module: the bot and three people."""

    def __init__(self, synapse: Synapse) -> None:
        self.synapse = synapse
        self.bot = synapse.register("mercury")
        self.alice = synapse.register("alice")
        self.bob = synapse.register("bob")
        self.carol = synapse.register("carol")


@pytest.fixture(scope="module")
def people(tmp_path_factory: pytest.TempPathFactory) -> Iterator[People]:
    synapse = Synapse(tmp_path_factory.mktemp("synapse"))
    try:
        print(f"Synapse started in {synapse.start_s:.1f} s")
        yield People(synapse)
    finally:
        synapse.stop()


def matrix_env(people: People) -> dict[str, str]:
    return {
        "MERCURY_MATRIX": "true",
        "MATRIX_HOMESERVER": people.synapse.url,
        "MATRIX_USER_ID": people.bot.user_id,
        "MATRIX_ACCESS_TOKEN": people.bot.token,
    }


def bridge_of(server: RunningServer) -> MatrixBridge:
    [bridge] = [b for b in server.services.bridging.bridges if b.platform == "matrix"]
    assert isinstance(bridge, MatrixBridge)
    return bridge


def wait_until(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"Timed out waiting for {what}.")


def synced(server: RunningServer) -> RunningServer:
    """``server`` once its bridge has synced for the first time (what comes later runs)."""
    bridge = bridge_of(server)
    wait_until(lambda: bridge.checkpoint() is not None, "the bridge's first sync")
    return server


@pytest.fixture
def chat(people: People, make_server: Callable[..., RunningServer]) -> RunningServer:
    return synced(make_server(**matrix_env(people)))


def call(people: People, coroutine: Any) -> Any:
    return people.synapse.call(coroutine)


def open_room(people: People, owner: MatrixUser, *others: MatrixUser, direct: bool = False) -> str:
    """A room ``owner`` creates with ``others`` and the bot in it (the bot joins when asked)."""
    invitees = [UserID(people.bot.user_id), *(UserID(o.user_id) for o in others)]
    room = call(people, owner.client.create_room(invitees=invitees, is_direct=direct))
    for other in others:
        call(people, other.client.join_room_by_id(room))

    def joined() -> bool:
        members = call(people, owner.client.get_joined_members(room))
        return people.bot.user_id in {str(m) for m in members}

    wait_until(joined, "the bot to join")
    return str(room)


def send(people: People, user: MatrixUser, room: str, content: dict[str, Any]) -> str:
    path = ApiPath.v3.rooms[room].send["m.room.message"][user.client.api.get_txn_id()]
    answer = call(people, user.client.api.request(Method.PUT, path, content=content))
    return str(answer["event_id"])


def say(people: People, user: MatrixUser, room: str, text: str, **extra: Any) -> str:
    return send(people, user, room, {"msgtype": "m.text", "body": text, **extra})


def events(people: People, room: str, reader: MatrixUser | None = None) -> list[dict[str, Any]]:
    """The room's message events, oldest first, as ``reader`` (Alice) reads them."""
    path = ApiPath.v3.rooms[room].messages
    answer = call(
        people,
        (reader or people.alice).client.api.request(
            Method.GET, path, query_params={"dir": "b", "limit": "200"}
        ),
    )
    return [e for e in reversed(answer["chunk"]) if e["type"] == "m.room.message"]


def bot_messages(
    people: People, room: str, reader: MatrixUser | None = None
) -> list[tuple[dict[str, Any], str, int]]:
    """The bot's messages: each event, its text as shown now (after its last edit), and how
    many edits it had."""
    found: dict[str, tuple[dict[str, Any], str, int]] = {}
    for event in events(people, room, reader):
        if event["sender"] != people.bot.user_id:
            continue
        content = event["content"]
        relates = content.get("m.relates_to") or {}
        if relates.get("rel_type") == "m.replace":
            original, _, edits = found[relates["event_id"]]
            found[relates["event_id"]] = (original, content["m.new_content"]["body"], edits + 1)
        else:
            found[event["event_id"]] = (event, content.get("body", ""), 0)
    return list(found.values())


def final_replies(
    people: People, room: str, texts: list[str]
) -> list[tuple[dict[str, Any], str, int]]:
    """Wait until the bot's messages in ``room`` read ``texts``; them."""

    def done() -> list[tuple[dict[str, Any], str, int]] | None:
        got = bot_messages(people, room)
        return got if [text for _, text, _ in got] == texts else None

    try:
        return wait_until(done, f"the replies {texts!r}")  # type: ignore[no-any-return]
    except AssertionError:
        raise AssertionError(
            f"The bot's messages read {[t for _, t, _ in bot_messages(people, room)]!r}, "
            f"not {texts!r}."
        ) from None


def answer(ollama: OllamaStandIn, scripts: dict[str, ChatScript]) -> None:
    """The model answers a turn whose message ends with a key with its script (keyed, not
    queued: a turn that should not run takes nothing of another's, and shows as a request)."""

    def respond(request: dict[str, Any]) -> ChatScript:
        said = user_contents(request)[-1]
        for ending, script in scripts.items():
            if said.endswith(f"{ending}</caller>"):
                return script
        return ChatScript.words("(not this test's)")

    ollama.responder = respond


def requests_for(ollama: OllamaStandIn, ending: str) -> list[dict[str, Any]]:
    """The model's requests for a turn whose message ends with ``ending``."""
    return [r for r in ollama.requests if user_contents(r)[-1].endswith(f"{ending}</caller>")]


def settle(seconds: float = 1.5) -> None:
    """Give the bridge time to do something it must not do (the only sleep-based check)."""
    time.sleep(seconds)


def test_in_a_room_of_three_only_the_mention_runs_with_the_others_as_ambient_context(
    chat: RunningServer, people: People, ollama: OllamaStandIn
) -> None:
    room = open_room(people, people.alice, people.bob, people.carol)
    answer(
        ollama,
        {
            "when is lunch?": ChatScript.words("Lunch is at noon."),
            "and where?": ChatScript.words("At the usual place."),
        },
    )
    say(people, people.alice, room, "who's up for lunch?")
    say(people, people.bob, room, "me, at the usual place")
    asked = say(
        people,
        people.carol,
        room,
        "mercury: when is lunch?",
        **{"m.mentions": {"user_ids": [people.bot.user_id]}},
    )
    [(reply, _, _)] = final_replies(people, room, ["Lunch is at noon."])
    assert reply["content"]["m.relates_to"]["m.in_reply_to"]["event_id"] == asked
    [request] = requests_for(ollama, "when is lunch?")
    words = user_contents(request)[-1]
    assert "<ambient" in words and "not addressed to you" in words
    assert "who's up for lunch?" in words and "me, at the usual place" in words
    assert f'<caller id="matrix:{people.carol.user_id}" name="carol"' in words
    assert words.endswith("when is lunch?</caller>")
    assert f"group chat (matrix:{room})" in system_of(request)
    settle()  # the bot's own reply, synced back, starts nothing
    assert len(requests_for(ollama, "when is lunch?")) == 1
    assert not requests_for(ollama, "who's up for lunch?")
    assert not requests_for(ollama, "the usual place")

    # A reply to the bot's message is for it, unmentioned.
    say(
        people,
        people.bob,
        room,
        "and where?",
        **{"m.relates_to": {"m.in_reply_to": {"event_id": reply["event_id"]}}},
    )
    final_replies(people, room, ["Lunch is at noon.", "At the usual place."])


def test_a_direct_message_always_runs_and_its_edits_end_equal_to_the_final_answer(
    chat: RunningServer, people: People, ollama: OllamaStandIn
) -> None:
    room = open_room(people, people.alice, direct=True)
    final = "Hi Alice. " + " ".join(f"word{n}" for n in range(30)) + "."
    answer(ollama, {"hello there": ChatScript.words(final, delay_s=0.1)})
    say(people, people.alice, room, "hello there")
    [(reply, text, edits)] = final_replies(people, room, [final])
    assert text == final
    assert edits >= 1  # written live: posted, then edited
    assert "m.relates_to" not in reply["content"]  # a DM's answer replies to nothing
    [request] = requests_for(ollama, "hello there")
    assert f"direct chat (matrix:dm:{room})" in system_of(request), re.findall(
        r"You are in a [^.]*", system_of(request)
    )


def test_a_file_comes_into_the_spaces_inbox_and_one_goes_out(
    chat: RunningServer, people: People, ollama: OllamaStandIn
) -> None:
    seen: list[str] = []

    def respond(request: dict[str, Any]) -> ChatScript:
        said = user_contents(request)[-1]
        if "summarize this" not in said:
            return ChatScript.words("(not this test's)")
        if not seen:
            seen.append(said)
            return ChatScript(
                tool_calls=[
                    {
                        "name": "outbox_write",
                        "arguments": {"filename": "summary.txt", "content": "ann leads"},
                    }
                ]
            )
        return ChatScript.words("Here is the summary.")

    ollama.responder = respond
    room = open_room(people, people.alice, direct=True)
    data = b"name,score\nann,3\n"
    url = call(
        people, people.alice.client.upload_media(data, mime_type="text/csv", filename="scores.csv")
    )
    send(
        people,
        people.alice,
        room,
        {
            "msgtype": "m.file",
            "body": "summarize this",
            "filename": "scores.csv",
            "url": str(url),
            "info": {"mimetype": "text/csv", "size": len(data)},
        },
    )

    def file_sent() -> dict[str, Any] | None:
        sent = [e for e, _, _ in bot_messages(people, room) if e["content"]["msgtype"] == "m.file"]
        return sent[0] if sent else None

    carrier = wait_until(file_sent, "the bot's file")
    final_replies(people, room, ["Here is the summary.", "summary.txt"])
    assert re.search(r"^- inbox/.*scores\.csv$", seen[0], re.MULTILINE), seen[0]
    assert seen[0].endswith("summarize this</caller>") or "summarize this" in seen[0]
    assert carrier["content"]["filename"] == "summary.txt"
    out = call(people, people.alice.client.download_media(carrier["content"]["url"]))
    assert out == b"ann leads"
    space = quote(f"space:matrix:dm:{room}", safe="")
    inbox = Path(chat.services.settings.wiki.vault_path) / "users" / space / "inbox"
    assert [p.read_bytes() for p in inbox.iterdir()] == [data]


def test_a_thread_reply_lands_in_the_thread(
    chat: RunningServer, people: People, ollama: OllamaStandIn
) -> None:
    room = open_room(people, people.alice, people.bob)
    root = say(people, people.bob, room, "plans for friday")
    answer(ollama, {"what about friday?": ChatScript.words("Friday is free.")})
    asked = say(
        people,
        people.alice,
        room,
        "mercury what about friday?",
        **{
            "m.mentions": {"user_ids": [people.bot.user_id]},
            "m.relates_to": {
                "rel_type": "m.thread",
                "event_id": root,
                "is_falling_back": True,
                "m.in_reply_to": {"event_id": root},
            },
        },
    )
    [(reply, _, _)] = final_replies(people, room, ["Friday is free."])
    relates = reply["content"]["m.relates_to"]
    assert relates["rel_type"] == "m.thread" and relates["event_id"] == root
    assert relates["m.in_reply_to"]["event_id"] == asked
    [request] = requests_for(ollama, "what about friday?")
    assert user_contents(request)[-1].endswith("@Mercury what about friday?</caller>")


def test_a_restart_resumes_from_the_saved_sync_token_and_answers_nothing_twice(
    people: People, make_settings: Callable[..., Settings], ollama: OllamaStandIn
) -> None:
    settings = make_settings(**matrix_env(people))
    answer(
        ollama,
        {
            "first question": ChatScript.words("First answer."),
            "asked while you were away": ChatScript.words("Second answer."),
        },
    )
    with serve(settings) as first:
        synced(first)
        room = open_room(people, people.alice, direct=True)
        say(people, people.alice, room, "first question")
        final_replies(people, room, ["First answer."])
        saved = bridge_of(first).checkpoint()
    assert saved is not None

    # While no instance holds the connection, a message comes in.
    say(people, people.alice, room, "asked while you were away")

    resumed = MatrixBridge(settings.matrix, bot_name=settings.trigger.name)
    resumed.restore(saved)
    with serve(settings, bridges=[resumed]):
        final_replies(people, room, ["First answer.", "Second answer."])
        settle()
    assert len(requests_for(ollama, "first question")) == 1
    assert len(requests_for(ollama, "asked while you were away")) == 1


def member_state(people: People, user: MatrixUser, room: str) -> str | None:
    """The bot's membership in ``room`` as ``user`` sees it."""
    path = ApiPath.v3.rooms[room].state["m.room.member"][people.bot.user_id]
    try:
        content = call(people, user.client.api.request(Method.GET, path))
    except Exception:
        return None
    return str(content.get("membership"))


def test_the_bot_joins_only_the_rooms_an_admitted_person_invites_it_to(
    people: People, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    directory = [
        {"id": "alice", "displayName": "Alice", "identities": [f"matrix:{people.alice.user_id}"]}
    ]
    # The bot logs in with its password here (MATRIX_PASSWORD), not a token.
    env = {**matrix_env(people), "MATRIX_PASSWORD": people.bot.password}
    del env["MATRIX_ACCESS_TOKEN"]
    # Under allowlist; under pairing (the default with a directory) a DM invite is taken.
    env["MATRIX_DM_POLICY"] = "allowlist"
    synced(make_server(DIRECTORY_STATIC_PEOPLE=json.dumps(directory), **env))
    refused = str(
        call(people, people.bob.client.create_room(invitees=[UserID(people.bot.user_id)]))
    )
    open_room(people, people.alice)  # Alice is in the directory: the bot joins
    wait_until(lambda: member_state(people, people.bob, refused) == "leave", "the invite declined")


def test_nothing_runs_in_an_encrypted_room(
    chat: RunningServer, people: People, ollama: OllamaStandIn
) -> None:
    answer(ollama, {"in the open": ChatScript.words("Seen.")})
    encryption = {
        "type": "m.room.encryption",
        "state_key": "",
        "content": {"algorithm": "m.megolm.v1.aes-sha2"},
    }
    room = str(
        call(
            people,
            people.alice.client.create_room(
                invitees=[UserID(people.bot.user_id)], initial_state=[encryption]
            ),
        )
    )
    wait_until(lambda: member_state(people, people.alice, room) == "join", "the bot to join")
    say(
        people,
        people.alice,
        room,
        "mercury: a secret",
        **{"m.mentions": {"user_ids": [people.bot.user_id]}},
    )
    dm = open_room(people, people.alice, direct=True)
    say(people, people.alice, dm, "in the open")
    final_replies(people, dm, ["Seen."])  # the sync with the encrypted room's message is past
    settle()
    assert not requests_for(ollama, "a secret")
    assert bot_messages(people, room) == []


def test_a_first_start_begins_from_now_even_right_after_another_start(
    people: People, make_settings: Callable[..., Settings], ollama: OllamaStandIn, tmp_path: Path
) -> None:
    # Found by running these tests in a row: Synapse answered a second instance's initial sync
    # from its response cache, with the first's token, and the first's messages ran again.
    answer(ollama, {"only once": ChatScript.words("Once.")})
    with serve(make_settings(**matrix_env(people))) as first:
        synced(first)
        room = open_room(people, people.alice, direct=True)
        say(people, people.alice, room, "only once")
        final_replies(people, room, ["Once."])
    # Another instance, with nothing of the first's (no checkpoint, no delivery ids).
    other = make_settings(**matrix_env(people), MERCURY_DATA_DIR=str(tmp_path / "other"))
    with serve(other) as second:
        synced(second)
        settle(3.0)
    assert len(requests_for(ollama, "only once")) == 1
    assert [text for _, text, _ in bot_messages(people, room)] == ["Once."]


def test_with_live_answers_off_the_answer_is_one_message_never_edited(
    people: People, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    synced(make_server(BRIDGE_LIVE_ANSWERS="false", **matrix_env(people)))
    answer(ollama, {"all at once": ChatScript.words("One piece.", delay_s=0.1)})
    room = open_room(people, people.alice, direct=True)
    say(people, people.alice, room, "all at once")
    [(_, _, edits)] = final_replies(people, room, ["One piece."])
    assert edits == 0


def test_a_sign_in_link_goes_only_to_a_room_of_its_person_and_the_bot(
    people: People, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    desk = Desk()
    server = synced(make_server({"plugins": [desk.plugin()]}, **matrix_env(people)))

    def respond(request: dict[str, Any]) -> ChatScript:
        if any(m["role"] == "tool" for m in request["messages"]):
            return ChatScript.words("Sign in first.")
        return ChatScript(tool_calls=[{"name": "calendar", "arguments": {}}])

    ollama.responder = respond
    mention = {"m.mentions": {"user_ids": [people.bot.user_id]}}
    # Marked direct by its creator, yet three people read it.
    three = open_room(people, people.alice, people.bob, direct=True)
    say(people, people.alice, three, "mercury: my calendar?", **mention)
    final_replies(people, three, ["Sign in first."])
    # Marked direct, two joined, and a third invited who may join and read the history.
    invited = open_room(people, people.alice, direct=True)
    call(people, people.alice.client.invite_user(invited, UserID(people.carol.user_id)))
    say(people, people.alice, invited, "mercury: my calendar, again?", **mention)
    final_replies(people, invited, ["Sign in first."])

    for room in (three, invited):
        assert all(LOGIN_URL not in e["content"].get("body", "") for e in events(people, room))
    private = bridge_of(server)._private[people.alice.user_id]
    members = call(
        people, people.bot.client.api.request(Method.GET, ApiPath.v3.rooms[private].members)
    )
    assert {
        m["state_key"] for m in members["chunk"] if m["content"]["membership"] in ("join", "invite")
    } == {people.bot.user_id, people.alice.user_id}
    path = ApiPath.v3.rooms[private].messages
    sent = call(people, people.bot.client.api.request(Method.GET, path, query_params={"dir": "b"}))
    links = [e for e in sent["chunk"] if LOGIN_URL in e.get("content", {}).get("body", "")]
    assert len(links) == 2
    told = [m["content"] for r in ollama.requests for m in r["messages"] if m["role"] == "tool"]
    assert told and all("sent to them privately" in t for t in told)


def test_a_wrong_access_token_is_one_sentence_and_readyz_says_the_bridge_is_not_connected(
    people: People,
    make_server: Callable[..., RunningServer],
    ollama: OllamaStandIn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "mercury")
    env = {**matrix_env(people), "MATRIX_ACCESS_TOKEN": "syt_not_the_bots_token"}
    server = make_server(**env)

    def not_connected() -> dict[str, Any] | None:
        answer = httpx.get(server.url + "/readyz", timeout=10).json()
        return answer if answer.get("bridges") == {"matrix": False} else None

    wait_until(not_connected, "readyz to say the Matrix bridge is not connected")
    said = [r for r in caplog.records if r.name.startswith("mercury.bridges")]
    [refusal] = [r for r in said if "MATRIX_ACCESS_TOKEN" in r.getMessage()]
    assert refusal.levelno == logging.ERROR and "M_UNKNOWN_TOKEN" in refusal.getMessage()
    assert "syt_not_the_bots_token" not in caplog.text
    assert not [r for r in said if r.exc_info], [r.getMessage() for r in said if r.exc_info]


def test_under_pairing_a_strangers_dm_invite_is_taken_and_answered_with_a_code_only(
    people: People, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    directory = [
        {"id": "alice", "displayName": "Alice", "identities": [f"matrix:{people.alice.user_id}"]}
    ]
    synced(make_server(DIRECTORY_STATIC_PEOPLE=json.dumps(directory), **matrix_env(people)))
    asked = len(ollama.requests)
    dm = open_room(people, people.carol, direct=True)  # Carol is no one the directory knows
    say(people, people.carol, dm, "hello, let me in")
    [(_, code, _)] = wait_until(lambda: bot_messages(people, dm, people.carol), "the code")
    assert "give this code to an administrator" in code
    # A room of three a stranger invites the bot to is no DM: the bot leaves it.
    group = str(
        call(
            people,
            people.carol.client.create_room(
                invitees=[UserID(people.bot.user_id), UserID(people.bob.user_id)]
            ),
        )
    )
    wait_until(lambda: member_state(people, people.carol, group) == "leave", "the bot to leave")
    settle()
    assert len(ollama.requests) == asked  # nothing Carol wrote reached the model


def test_an_answer_cut_short_on_a_dead_instance_is_replaced_in_its_message_not_twice(
    people: People, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    chat = synced(make_server(**matrix_env(people), MERCURY_CONVERSATION_LEASE_S="2"))
    bridge = bridge_of(chat)
    room = open_room(people, people.alice, direct=True)
    message = Received(
        platform="matrix",
        thread_id=f"matrix:dm:{room}",
        delivery_id="$cut-short-answer",
        message_id="$cut-short-answer",
        author_id=people.alice.user_id,
        author_name="Alice",
        text="tell me",
        is_dm=True,
    )
    # Another instance took the event, posted its answer's first words and died: its lease
    # lapses, this instance takes the delivery over and runs it again.
    dead = Deliveries(chat.services.db, lease_s=2.0, holder="dead-instance")
    assert chat.call(dead.take(message))
    cut = chat.call(bridge.open_reply(message, status="Thinking…"))
    chat.call(cut.show("The first", None))
    ref = bridge.reply_ref(cut)
    chat.call(dead.posted(message, ref))

    words = "The first words, then the whole answer written by the run that took it over."
    answer(ollama, {"tell me": ChatScript.words(words, delay_s=0.01)})
    [(reply, _, edits)] = final_replies(people, room, [words])
    assert reply["event_id"] == ref and edits >= 1  # the half-written one, replaced


def last_caller(request: dict[str, Any]) -> str:
    """Who wrote the message a model request answers (the last ``<caller>`` of its turn)."""
    said = user_contents(request)[-1]
    return said.rsplit('<caller id="', 1)[-1].split('"', 1)[0]


def echo_bot(people: People, room: str, echo: MatrixUser, *, most: int = 10) -> int:
    """A bot that repeats each message of Mercury's it sees, at once, as an ordinary
    ``m.text`` mentioning Mercury, until no new one comes (at most ``most`` times); how many
    it repeated."""
    mention = {"m.mentions": {"user_ids": [people.bot.user_id]}}
    echoed = {event["event_id"] for event, _, _ in bot_messages(people, room)}
    repeated = 0
    while repeated < most:
        try:
            new = wait_until(
                lambda: [
                    e for e, _, _ in bot_messages(people, room) if e["event_id"] not in echoed
                ],
                "a new message of Mercury's",
                timeout=4.0,
            )
        except AssertionError:
            return repeated  # Mercury stopped answering: the loop is over
        for event in new:
            echoed.add(event["event_id"])
            say(people, echo, room, f"mercury: {event['content']['body']}", **mention)
            repeated += 1
    return repeated


def test_an_echo_bot_gets_a_bounded_run_of_turns_and_a_person_writing_starts_it_afresh(
    people: People,
    make_server: Callable[..., RunningServer],
    ollama: OllamaStandIn,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An echo bot Matrix flags as nothing: its first repeat runs (nothing tells it from a
    person), then at most ``BRIDGE_BOT_TURNS`` (3) turns in a row; the next repeat is kept as
    ambient context and the loop ends. Alice writing starts the count afresh."""
    caplog.set_level(logging.INFO, "mercury")
    echo = people.synapse.register("echo")
    # A window wider than the default: the test's echo bot polls, on a busy machine.
    synced(make_server(**matrix_env(people), BRIDGE_BOT_REPLY_S="30"))
    answered = 0

    def respond(request: dict[str, Any]) -> ChatScript:
        nonlocal answered
        answered += 1
        return ChatScript.words(f"Answer {answered}.")

    ollama.responder = respond
    room = open_room(people, people.alice, echo)
    mention = {"m.mentions": {"user_ids": [people.bot.user_id]}}

    def echo_turns() -> int:
        return len([r for r in ollama.requests if last_caller(r) == f"matrix:{echo.user_id}"])

    say(people, people.alice, room, "mercury: say something", **mention)
    echo_bot(people, room, echo)
    assert echo_turns() == 1 + 3
    loops = [r for r in caplog.records if "bot loop" in r.getMessage()]
    assert len(loops) == 1 and echo.user_id in loops[0].getMessage()

    say(people, people.alice, room, "mercury: once more", **mention)
    echo_bot(people, room, echo)
    assert echo_turns() == 2 * (1 + 3)
    assert len([r for r in caplog.records if "bot loop" in r.getMessage()]) == 2
    # What the loop's last repeat said reached the model only as Alice's ambient context.
    say(people, people.alice, room, "mercury: what did echo say?", **mention)
    wait_until(
        lambda: [r for r in ollama.requests if user_contents(r)[-1].endswith("echo say?</caller>")],
        "Alice's turn",
    )
    [alices] = [r for r in ollama.requests if user_contents(r)[-1].endswith("echo say?</caller>")]
    assert "<ambient" in user_contents(alices)[-1]
    ambient = user_contents(alices)[-1].split("</ambient>")[0]
    assert f'<message author="echo" caller="matrix:{echo.user_id}"' in ambient
    assert "@Mercury: Answer" in ambient


def test_a_notice_or_a_listed_bot_never_starts_a_turn_and_is_ambient_context(
    people: People, make_server: Callable[..., RunningServer], ollama: OllamaStandIn
) -> None:
    """An ``m.notice`` (a program's, by Matrix's convention) and a message of an account in
    ``MATRIX_BOT_USERS`` are never answered, mention or DM alike; the model reads them as
    ambient context when a person addresses it."""
    robot = people.synapse.register("robot-7")
    synced(make_server(**matrix_env(people), MATRIX_BOT_USERS="@robot-*:localhost, @nobody:x"))
    answer(ollama, {"what happened?": ChatScript.words("A deploy and a build.")})
    room = open_room(people, people.alice, people.bob, robot)
    mention = {"m.mentions": {"user_ids": [people.bot.user_id]}}
    send(
        people,
        people.bob,
        room,
        {"msgtype": "m.notice", "body": "mercury: the deploy finished", **mention},
    )
    say(people, robot, room, "mercury: the build is green", **mention)
    dm = open_room(people, robot, direct=True)
    say(people, robot, dm, "hello, Mercury")
    send(people, people.alice, room, {"msgtype": "m.notice", "body": "mercury: ping", **mention})
    settle()
    assert ollama.requests == []
    assert bot_messages(people, room) == [] and bot_messages(people, dm, robot) == []
    say(people, people.alice, room, "mercury: what happened?", **mention)
    final_replies(people, room, ["A deploy and a build."])
    [request] = requests_for(ollama, "what happened?")
    words = user_contents(request)[-1]
    assert "the deploy finished" in words and "the build is green" in words
