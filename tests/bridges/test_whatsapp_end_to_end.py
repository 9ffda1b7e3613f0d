"""WhatsApp end to end: the Cloud API stand-in delivers signed webhooks to a real server whose
WhatsApp bridge (httpx on the Graph API) answers through the stand-in; the model is the Ollama
stand-in. The scenes of tests/bridges/test_pipeline_end_to_end.py through WhatsApp's own wire:
the callback's verification, mentions and ambient context in a group, replies to the bot,
DMs, files both ways, re-deliveries, delivery receipts and forged deliveries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import pytest

from tests.support.live_scenarios import Desk, until
from tests.support.ollama_standin import ChatScript, OllamaStandIn
from tests.support.scenes import settle, system_of, user_contents
from tests.support.server import RunningServer
from tests.support.whatsapp_standin import Inbound, WhatsAppStandIn

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]

ANN, BEN, CAT, DEE = "15551230001", "15551230002", "15551230003", "15551230004"
NAMES = {ANN: "Ann Example", BEN: "Ben Example", CAT: "Cat Example", DEE: "Dee Example"}
GROUP = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD"
GROUP_SPACE = f"whatsapp:{GROUP}@g.us"


@pytest.fixture(scope="module")
def whatsapp_server() -> Iterator[WhatsAppStandIn]:
    with WhatsAppStandIn() as standin:
        yield standin


@pytest.fixture
def whatsapp(whatsapp_server: WhatsAppStandIn) -> Iterator[WhatsAppStandIn]:
    whatsapp_server.reset()
    yield whatsapp_server
    whatsapp_server.reset()


@pytest.fixture
def chat(make_server: Callable[..., RunningServer], whatsapp: WhatsAppStandIn) -> RunningServer:
    return make_server(MERCURY_CONFIG_FILE="", **whatsapp.env())


def hook(chat: RunningServer) -> str:
    return chat.url + "/webhooks/whatsapp"


def said(whatsapp: WhatsAppStandIn, sender: str, text: str, **options: Any) -> Inbound:
    return whatsapp.text(sender, text, name=NAMES[sender], **options)


def mention(whatsapp: WhatsAppStandIn) -> str:
    """The bot's mention as WhatsApp writes it: its business number."""
    return f"@{whatsapp.display_phone_number}"


async def say(whatsapp: WhatsAppStandIn, chat: RunningServer, *messages: Inbound) -> int:
    """Deliver ``messages`` in one signed webhook call; how many the server took to run."""
    with anyio.fail_after(30):
        delivered = await whatsapp.deliver(hook(chat), whatsapp.event(*messages))
    assert delivered.status == 200, delivered.answer
    return int(json.loads(delivered.answer)["taken"])


def space_folder(chat: RunningServer, space_id: str) -> Path:
    vault = Path(chat.services.settings.wiki.vault_path)
    return vault / "users" / quote("space:" + space_id, safe="")


async def test_the_callback_verification_answers_the_challenge_only_for_the_verify_token(
    chat: RunningServer, whatsapp: WhatsAppStandIn
) -> None:
    with anyio.fail_after(30):
        verified = await whatsapp.verify(hook(chat), challenge="1158201444")
        refused = await whatsapp.verify(hook(chat), token="a-guess")
    assert (verified.status, verified.answer) == (200, b"1158201444")
    assert refused.status == 401
    assert b"1158201444" not in refused.answer


async def test_in_a_group_only_the_mention_runs_and_its_answer_quotes_it(
    chat: RunningServer, whatsapp: WhatsAppStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Lunch is at noon."))
    await say(whatsapp, chat, said(whatsapp, ANN, "who's up for lunch?", group_id=GROUP))
    await say(whatsapp, chat, said(whatsapp, BEN, "me, at the usual place", group_id=GROUP))
    asked = said(whatsapp, CAT, f"{mention(whatsapp)} when is lunch?", group_id=GROUP)
    assert await say(whatsapp, chat, asked) == 1

    [reply] = await whatsapp.wait_for_messages(1, timeout=40)
    assert (reply["recipient_type"], reply["to"]) == ("group", GROUP)
    assert reply["text"]["body"] == "Lunch is at noon."
    assert reply["context"] == {"message_id": asked.id}
    [request] = ollama.requests
    words = user_contents(request)[-1]
    assert "<ambient" in words and "not addressed to you" in words
    assert 'author="Ann Example"' in words and "who's up for lunch?" in words
    assert 'author="Ben Example"' in words and "me, at the usual place" in words
    assert f'<caller id="whatsapp:{CAT}" name="Cat Example"' in words
    assert words.endswith("@Mercury when is lunch?</caller>")
    assert f"group chat ({GROUP_SPACE})" in system_of(request)
    # Meta's groups mark no message read, so no typing indicator there (#37).
    assert whatsapp.read_receipts() == []
    await settle()
    assert len(ollama.requests) == 1 and len(whatsapp.sent_messages()) == 1


async def test_a_reply_quoting_the_bots_answer_runs_without_a_mention(
    chat: RunningServer, whatsapp: WhatsAppStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("The build is green."), ChatScript.words("Since noon."))
    await say(whatsapp, chat, said(whatsapp, ANN, f"{mention(whatsapp)} build?", group_id=GROUP))
    await whatsapp.wait_for_messages(1, timeout=40)
    [answer_id] = whatsapp.sent_message_ids()

    quoted = (answer_id, whatsapp.display_phone_number)
    follow_up = said(whatsapp, ANN, "since when?", group_id=GROUP, reply_to=quoted)
    assert await say(whatsapp, chat, follow_up) == 1

    _, second = await whatsapp.wait_for_messages(2, timeout=40)
    assert second["text"]["body"] == "Since noon."
    assert second["context"] == {"message_id": follow_up.id}


async def test_a_direct_message_always_runs_and_is_answered_to_the_person(
    chat: RunningServer, whatsapp: WhatsAppStandIn, ollama: OllamaStandIn
) -> None:
    ollama.enqueue(ChatScript.words("Hi Dee."))
    hello = said(whatsapp, DEE, "hello there")
    assert await say(whatsapp, chat, hello) == 1

    [reply] = await whatsapp.wait_for_messages(1, timeout=40)
    assert (reply["recipient_type"], reply["to"], reply["text"]["body"]) == (
        "individual",
        DEE,
        "Hi Dee.",
    )
    assert [t["message_id"] for t in whatsapp.typing_indicators()] == [hello.id]
    [request] = ollama.requests
    assert f"direct chat (whatsapp:{DEE})" in system_of(request)
    assert f'<caller id="whatsapp:{DEE}" name="Dee Example"' in user_contents(request)[-1]


async def test_a_file_comes_into_the_spaces_inbox_and_the_outbox_file_goes_out_as_a_document(
    chat: RunningServer, whatsapp: WhatsAppStandIn, ollama: OllamaStandIn
) -> None:
    seen: list[str] = []

    def respond(request: dict[str, Any]) -> ChatScript:
        if not seen:
            seen.append(user_contents(request)[-1])
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
    scores = b"name,score\nann,3\n"
    asked = whatsapp.media_message(
        ANN,
        "document",
        scores,
        "text/csv",
        filename="scores.csv",
        caption=f"{mention(whatsapp)} summarize",
        name=NAMES[ANN],
        group_id=GROUP,
    )
    assert await say(whatsapp, chat, asked) == 1
    text, document = await whatsapp.wait_for_messages(2, timeout=40)

    assert re.search(r"^- inbox/.*scores\.csv$", seen[0], re.MULTILINE), seen[0]
    media_id = asked.message["document"]["id"]
    fetched = [(c.path, c.authorized) for c in whatsapp.calls if c.method == "GET"]
    assert fetched == [(f"/{media_id}", True), (f"/download/{media_id}", True)]
    inbox = space_folder(chat, GROUP_SPACE) / "inbox"
    assert [p.read_bytes() for p in inbox.iterdir()] == [scores]
    assert text["text"]["body"] == "Here is the summary."
    assert text["context"] == {"message_id": asked.id}
    assert (document["type"], document["to"]) == ("document", GROUP)
    assert document["document"]["filename"] == "summary.txt"
    assert whatsapp.media(document["document"]["id"]).data == b"ann leads"
    [upload] = [c for c in whatsapp.calls if c.path.endswith("/media")]
    assert upload.files[0].filename == "summary.txt"


async def test_a_message_meta_delivers_again_runs_once(
    chat: RunningServer, whatsapp: WhatsAppStandIn, ollama: OllamaStandIn
) -> None:
    payload = whatsapp.event(said(whatsapp, DEE, "count me once"))
    with anyio.fail_after(30):
        first = await whatsapp.deliver(hook(chat), payload)
        again = await whatsapp.redeliver(first)
    assert (first.status, again.status) == (200, 200)
    assert (json.loads(first.answer)["taken"], json.loads(again.answer)["taken"]) == (1, 0)

    await whatsapp.wait_for_messages(1, timeout=40)
    await settle()
    assert len(ollama.requests) == 1 and len(whatsapp.sent_messages()) == 1


async def test_a_verify_token_given_twice_is_refused_whichever_comes_last(
    chat: RunningServer, whatsapp: WhatsAppStandIn
) -> None:
    # Adversarial review (#34): the last hub.verify_token of the query was the one checked.
    token = whatsapp.settings().verify_token
    async with httpx.AsyncClient(timeout=10) as client:
        for tokens in (["a-guess", token], [token, "a-guess"]):
            answer = await client.get(
                hook(chat),
                params=[
                    ("hub.mode", "subscribe"),
                    ("hub.challenge", "1158201444"),
                    *(("hub.verify_token", t) for t in tokens),
                ],
            )
            assert answer.status_code == 400
            assert "hub.verify_token" in answer.json()["error"]
            assert b"1158201444" not in answer.content


async def test_a_stale_message_is_acknowledged_and_runs_nothing(
    chat: RunningServer, whatsapp: WhatsAppStandIn, ollama: OllamaStandIn
) -> None:
    # Adversarial review (#34): a message stamped 2010 ran.
    old = whatsapp.inbound(DEE, "text", {"body": "from 2010"}, timestamp=1_262_304_000)
    assert await say(whatsapp, chat, old) == 0
    await settle()
    assert ollama.requests == [] and whatsapp.calls == []


async def test_a_forged_or_unsigned_delivery_runs_nothing(
    chat: RunningServer, whatsapp: WhatsAppStandIn, ollama: OllamaStandIn
) -> None:
    payload = whatsapp.event(said(whatsapp, DEE, "forged"))
    with anyio.fail_after(30):
        forged = await whatsapp.deliver(hook(chat), payload, secret="not-the-app-secret")
        unsigned = await whatsapp.deliver(hook(chat), payload, signature="")

    assert (forged.status, unsigned.status) == (401, 401)
    assert json.loads(forged.answer)["ok"] is False
    await settle()
    assert ollama.requests == []
    assert whatsapp.calls == []


async def test_delivery_receipts_and_the_bots_own_echo_run_nothing(
    chat: RunningServer, whatsapp: WhatsAppStandIn, ollama: OllamaStandIn
) -> None:
    with anyio.fail_after(30):
        receipt = await whatsapp.deliver(hook(chat), whatsapp.status_event("wamid.x", DEE, "read"))
    assert (receipt.status, json.loads(receipt.answer)["taken"]) == (200, 0)
    echo = whatsapp.text(whatsapp.display_phone_number, "Hello!", group_id=GROUP)
    assert await say(whatsapp, chat, echo) == 0
    await settle()
    assert ollama.requests == []
    assert whatsapp.calls == []


# --- live answers and buttons (#37) -------------------------------------------------------------


@pytest.fixture
def desk() -> Desk:
    return Desk(floors=True)


@pytest.fixture
def desk_chat(
    make_server: Callable[..., RunningServer], whatsapp: WhatsAppStandIn, desk: Desk
) -> RunningServer:
    return make_server({"plugins": [desk.plugin()]}, MERCURY_CONFIG_FILE="", **whatsapp.env())


def tool_then(name: str, answer: str) -> Callable[[dict[str, Any]], ChatScript]:
    """The model calls ``name`` once, then answers ``answer`` to every request."""
    calls = [ChatScript(tool_calls=[{"name": name, "arguments": {}}])]

    def respond(request: dict[str, Any]) -> ChatScript:
        return calls.pop() if calls else ChatScript.words(answer)

    return respond


def sent_with_ids(whatsapp: WhatsAppStandIn) -> list[tuple[str, dict[str, Any]]]:
    return list(zip(whatsapp.sent_message_ids(), whatsapp.sent_messages(), strict=True))


def chunks_of(text: str) -> list[str]:
    """``text`` as a model streams it, word by word (joined, exactly ``text``)."""
    words = text.split(" ")
    return [word + " " for word in words[:-1]] + words[-1:]


def texts_to(whatsapp: WhatsAppStandIn, to: str) -> list[str]:
    return [m["text"]["body"] for m in whatsapp.text_messages() if m["to"] == to]


async def test_a_long_answer_arrives_as_paragraph_messages_that_join_into_final(
    chat: RunningServer, whatsapp: WhatsAppStandIn, ollama: OllamaStandIn
) -> None:
    paragraphs = [f"Part {n}. " + "Some words go here. " * 6 for n in range(4)]
    final = "\n\n".join(p.strip() for p in paragraphs)
    ollama.enqueue(ChatScript(content=chunks_of(final), delay_s=0.03))
    hello = said(whatsapp, DEE, "tell me a story")
    assert await say(whatsapp, chat, hello) == 1

    await until("the whole answer", lambda: "".join(texts_to(whatsapp, DEE)) == final)
    bodies = whatsapp.text_messages()
    assert len(bodies) >= 2, bodies  # paragraphs as they were finished, not one message
    assert all(b["text"]["body"].strip() for b in bodies)
    assert [b.get("context") for b in bodies] == [{"message_id": hello.id}] + [None] * (
        len(bodies) - 1
    )
    assert [t["message_id"] for t in whatsapp.typing_indicators()] == [hello.id]
    await settle()
    assert "".join(texts_to(whatsapp, DEE)) == final  # nothing repeated afterwards


async def test_two_choices_are_reply_buttons_only_their_owner_confirms_and_once(
    desk_chat: RunningServer, whatsapp: WhatsAppStandIn, ollama: OllamaStandIn, desk: Desk
) -> None:
    ollama.responder = tool_then("book", "Which room?")
    asked = said(whatsapp, CAT, f"{mention(whatsapp)} book a room", group_id=GROUP)
    assert await say(whatsapp, desk_chat, asked) == 1

    # The answer goes to the group; Meta's groups take no buttons: they go to Cat's own chat.
    interactive = await until("the buttons", whatsapp.interactive_messages)
    [(buttons_id, buttons)] = [
        (i, m) for i, m in sent_with_ids(whatsapp) if m["type"] == "interactive"
    ]
    assert (buttons["recipient_type"], buttons["to"]) == ("individual", CAT)
    assert buttons["interactive"]["type"] == "button"
    assert [t for _, t in whatsapp.choices(buttons)] == ["Small room", "Big room"]
    assert len(interactive) == 1
    assert "Which room?" in "".join(texts_to(whatsapp, GROUP))
    (small, _), (big, _) = whatsapp.choices(buttons)

    # Ben's press (from his own chat) runs nothing and is told so privately.
    _, refused = await whatsapp.deliver_press(
        hook(desk_chat), BEN, buttons_id, big, name=NAMES[BEN]
    )
    assert json.loads(refused.answer)["taken"] == 1
    await until("Ben's answer", lambda: texts_to(whatsapp, BEN))
    assert texts_to(whatsapp, BEN) == ["This isn't yours to answer."]

    # Cat's press confirms, and the group is told what was chosen.
    _, delivery = await whatsapp.deliver_press(
        hook(desk_chat), CAT, buttons_id, big, title="Big room", name=NAMES[CAT]
    )
    assert json.loads(delivery.answer)["taken"] == 1
    await until("the booking", lambda: desk.booked)
    await until("the choice told", lambda: "Chosen: Big room" in texts_to(whatsapp, GROUP))
    again = await whatsapp.redeliver(delivery)  # Meta's retry of the same press
    assert json.loads(again.answer)["taken"] == 0

    # A second press is answered and changes nothing.
    await whatsapp.deliver_press(hook(desk_chat), CAT, buttons_id, small, name=NAMES[CAT])
    await until("Cat's answer", lambda: texts_to(whatsapp, CAT))
    assert texts_to(whatsapp, CAT) == ["Already answered or expired."]
    await settle()
    assert desk.booked == ["big"]
    assert texts_to(whatsapp, BEN) == ["This isn't yours to answer."]


async def test_four_choices_are_a_list_whose_row_confirms(
    desk_chat: RunningServer, whatsapp: WhatsAppStandIn, ollama: OllamaStandIn, desk: Desk
) -> None:
    ollama.responder = tool_then("book_floor", "Which floor?")
    assert await say(whatsapp, desk_chat, said(whatsapp, DEE, "book a floor")) == 1
    await until("the list", whatsapp.interactive_messages)
    [(list_id, listed)] = [(i, m) for i, m in sent_with_ids(whatsapp) if m["type"] == "interactive"]
    assert (listed["to"], listed["interactive"]["type"]) == (DEE, "list")
    rows = whatsapp.choices(listed)
    assert [t for _, t in rows] == ["Floor 1", "Floor 2", "Floor 3", "Floor 4"]

    await whatsapp.deliver_press(
        hook(desk_chat), DEE, list_id, rows[2][0], kind="list_reply", name=NAMES[DEE]
    )
    await until("the booking", lambda: desk.booked)
    assert desk.booked == ["floor3"]
    [settled] = [m for m in whatsapp.text_messages() if m["text"]["body"] == "Chosen: Floor 3"]
    assert settled["context"] == {"message_id": list_id}


async def test_a_sign_in_link_goes_to_the_persons_own_number_never_the_group(
    desk_chat: RunningServer, whatsapp: WhatsAppStandIn, ollama: OllamaStandIn
) -> None:
    ollama.responder = tool_then("calendar", "Sign in first, please.")
    asked = said(whatsapp, CAT, f"{mention(whatsapp)} what's on Friday?", group_id=GROUP)
    assert await say(whatsapp, desk_chat, asked) == 1
    link = "https://calendar.example/login?state=s1"
    [private] = await until(
        "the sign-in link", lambda: [t for t in texts_to(whatsapp, CAT) if link in t]
    )
    assert "Calendar" in private
    await until("the group's answer", lambda: texts_to(whatsapp, GROUP))
    await settle()
    assert not any(link in t for t in texts_to(whatsapp, GROUP))
    [sent] = [m for m in whatsapp.text_messages() if m["to"] == CAT]
    assert sent["recipient_type"] == "individual"


async def test_with_live_answers_off_the_answer_is_the_one_message_of_before(
    make_server: Callable[..., RunningServer],
    whatsapp: WhatsAppStandIn,
    ollama: OllamaStandIn,
    desk: Desk,
) -> None:
    chat = make_server(
        {"plugins": [desk.plugin()]},
        MERCURY_CONFIG_FILE="",
        BRIDGE_LIVE_ANSWERS="false",
        **whatsapp.env(),
    )
    final = "First part.\n\nSecond part.\n\nThird part."
    ollama.enqueue(ChatScript(content=chunks_of(final), delay_s=0.02))
    hello = said(whatsapp, DEE, "three parts please")
    assert await say(whatsapp, chat, hello) == 1
    [reply] = await whatsapp.wait_for_messages(1, timeout=40)
    assert reply["text"]["body"] == final
    assert reply["context"] == {"message_id": hello.id}

    ollama.responder = tool_then("book", "Which room?")
    assert await say(whatsapp, chat, said(whatsapp, DEE, "book a room")) == 1
    _, typed = await whatsapp.wait_for_messages(2, timeout=40)
    assert typed["type"] == "text"
    assert "To confirm, answer with the token" in typed["text"]["body"]
    await settle()
    assert whatsapp.interactive_messages() == []


async def test_a_rate_limit_mid_answer_delays_a_paragraph_but_loses_and_repeats_nothing(
    chat: RunningServer, whatsapp: WhatsAppStandIn, ollama: OllamaStandIn
) -> None:
    final = "\n\n".join(f"Part {n}. " + "More words here. " * 4 for n in range(3)).strip()
    ollama.enqueue(ChatScript(content=chunks_of(final), delay_s=0.03))
    whatsapp.slow_next(2, delay_s=0)  # the typing indicator and the first paragraph go through
    whatsapp.throttle_next(code=130429, status=429, retry_after=1)
    assert await say(whatsapp, chat, said(whatsapp, DEE, "three parts")) == 1

    await until("the whole answer", lambda: "".join(texts_to(whatsapp, DEE)) == final)
    [refused] = [c for c in whatsapp.calls if c.status == 429]
    assert refused.json["type"] == "text"  # a paragraph, sent again after the wait
    await settle()
    assert "".join(texts_to(whatsapp, DEE)) == final
