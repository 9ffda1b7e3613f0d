"""The scripted model ``mercury-http dev-model`` serves: deterministic, every event on demand.

One server on 127.0.0.1 speaks Ollama's protocol (``/api/…``) and OpenAI's (``/v1/…``), and
answers each chat request from the last user message: ``/demo <what>`` anywhere in it asks
for one of `DEMOS`, anything else is echoed (``You said: …``) after a short reasoning. After
a tool's result it answers once with a sentence about that result, never with another call.

Confirmations and sign-ins need tools that ask for them: :func:`services_yaml` is the
``services`` block of a settings file declaring two small REST services that this same server
answers (``/demo/…``), one of them with an OAuth login (``/oauth/authorize`` sends the browser
straight back with a code, ``/oauth/token`` gives a token for it). :func:`demo_yaml` adds the
demo space (`DEMO_SPACE`, administered by the development person) and a directory naming its
people. ``mercury-http serve --dev-model`` writes them beside the data and merges them into
the settings in force, never into the person's own file.
"""

from __future__ import annotations

import asyncio
import contextvars
import re
import secrets
from collections.abc import Sequence
from typing import Any, Final, Literal
from urllib.parse import parse_qsl, urlencode

import msgspec

from dev_model.ollama import ChatScript, OllamaStandIn, _Outcome, _Request, _write_json
from dev_model.openai import OpenAIStandIn

__all__ = ["DEMOS", "DEMO_SPACE", "DevModel", "demo_yaml", "respond", "services_yaml"]

#: What each ``/demo <what>`` produces, as the command's help and the docs list it.
DEMOS: Final[dict[str, str]] = {
    "reasoning": "a long reasoning (thinking events), then the answer",
    "tool": "a tool call (wiki_list: a tool event), then an answer about its result",
    "confirm": "a tool that needs the person's confirmation: a pending event (one choice)",
    "choices": "a note written, then overwritten: a pending event with two labelled choices",
    "login": "a tool that needs signing in to a service: a login event with its link",
    "present": "a display (present): a table shown after the answer",
    "markdown": "an answer in Markdown: a heading, a list, a table, code",
    "slow": "a slow stream: 40 words at 4 a second",
    "error": "the model fails after a few words: an error event",
    "cancel": "a stream that stops after a few words and never ends: cancel the turn",
}

CONFIRM_TOOL: Final = "demo_archive"
LOGIN_TOOL: Final = "demo_account_whoami"
NOTES_TOOL: Final = "demo_notes"
WIKI_TOOL: Final = "wiki_list"
WRITE_TOOL: Final = "wiki_write"
DEMO_NOTE: Final = "personal/notes/dev-model-demo.md"
PRESENT_TOOL: Final = "present"
#: The demo space ``--dev-model`` declares: a Slack channel no Slack workspace needs, whose
#: admin is the development person and whose members are two demo people to mute or name.
DEMO_SPACE: Final = "slack:CDEMO"

_DEMO: Final = re.compile(r"/demo(?:\s+([a-z]+))?", re.IGNORECASE)
_WORDS: Final = re.compile(r"\s*\S+\s*")
_STAMP: Final = re.compile(r"^\[[^\]\n]{1,80}\]\s*")
"""What the server puts before a message (its time) or a tool result (its call id)."""
_ENCODER: Final = msgspec.json.Encoder()

_HELP: Final = "I am Mercury's scripted development model. Say one of these for an example:\n\n" + (
    "\n".join(f"- `/demo {name}`: {what}" for name, what in DEMOS.items())
)
_REASONING: Final = (
    "The person asked for a long reasoning. First I restate the question, then I weigh "
    "two readings of it, then I pick the simpler one. A scripted model has no real doubts, "
    "but a UI has to show thoughts arriving piece by piece, fold them away once the answer "
    "starts, and keep them apart from the answer itself."
)
_MARKDOWN: Final = (
    "## A heading\n\nSome **bold**, some *italic*, `inline code` and a "
    "[link](https://example.com).\n\n- one\n- two\n  - two and a half\n\n"
    "| Planet | Moons |\n|---|---:|\n| Mercury | 0 |\n| Venus | 0 |\n| Earth | 1 |\n\n"
    "```python\nprint('hello')\n```\n"
)
_TABLE: Final = "| Planet | Day (Earth days) |\n|---|---:|\n| Mercury | 58.6 |\n| Venus | 243 |"

_Protocol = Literal["ollama", "openai"]
_PROTOCOL: contextvars.ContextVar[_Protocol] = contextvars.ContextVar(
    "dev_model_protocol", default="ollama"
)


def _words(text: str) -> list[str]:
    return _WORDS.findall(text)


def _say(text: str, *, thinking: str = "Reading the message.", **options: Any) -> ChatScript:
    return ChatScript(thinking=_words(thinking), content=_words(text), **options)


def _call(name: str, arguments: dict[str, Any], thinking: str) -> ChatScript:
    return ChatScript(
        thinking=_words(thinking), tool_calls=[{"name": name, "arguments": arguments}]
    )


def _messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in request.get("messages") or [] if isinstance(m, dict)]


def _offered(request: dict[str, Any]) -> set[str]:
    names = set()
    for tool in request.get("tools") or []:
        if isinstance(tool, dict) and isinstance(tool.get("function"), dict):
            names.add(str(tool["function"].get("name")))
    return names


def _unavailable(tool: str) -> ChatScript:
    return _say(
        f"This demo needs the tool `{tool}`, which this server doesn't offer. Start the "
        "server with `mercury-http serve --dev --dev-model` (`scripts/serve --dev-model`): "
        "it declares the demo services the confirmation and sign-in demos call."
    )


def respond(request: dict[str, Any]) -> ChatScript:
    """The answer to one chat request (either protocol), from its messages alone."""
    messages = _messages(request)
    if request.get("stream") is False:  # a memory capture: a summary, and nothing to remember
        summary = {"summary": "A conversation with the scripted model.", "facts": []}
        return ChatScript(content=[_ENCODER.encode(summary).decode()])
    asking = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    text = _STAMP.sub("", str(messages[asking].get("content") or "")) if asking >= 0 else ""
    asked = _DEMO.search(text)
    results = sum(1 for m in messages[asking + 1 :] if m.get("role") == "tool")
    if asked is not None and (asked.group(1) or "").lower() == "choices" and results == 1:
        # The note exists now: writing it again without a mode asks how (two choices).
        return _call(WRITE_TOOL, {"path": DEMO_NOTE, "content": "Second version."}, "Again.")
    if results:
        return _after(_called(messages), _STAMP.sub("", str(messages[-1].get("content") or "")))
    if asked is None:
        if not any(m.get("role") == "user" for m in messages[:asking]):
            return _say(_greeting(text), thinking="A new conversation.")
        return _say(
            f"You said: {text.strip()}\n\n(Say `/demo` to see what this model can show.)",
            thinking="Thinking about it.",
        )
    return _demo((asked.group(1) or "").lower(), _offered(request))


def _greeting(text: str) -> str:
    said = text.strip()
    echo = f"You said: {said}\n\n" if said else ""
    return f"Hello! I'm Mercury's scripted model. {echo}Say `/demo` to see what I can show."


def _called(messages: list[dict[str, Any]]) -> str:
    """The name of the tool whose result came last (from the call the assistant made)."""
    for message in reversed(messages):
        calls = message.get("tool_calls") if message.get("role") == "assistant" else None
        if isinstance(calls, list) and calls and isinstance(calls[-1], dict):
            function = calls[-1].get("function")
            if isinstance(function, dict):
                return str(function.get("name") or "")
    return ""


def _after(tool: str, result: str) -> ChatScript:
    """What a model would say after ``tool`` answered ``result``: a sentence for the person,
    never the instructions the server wrote for the model."""
    if result.startswith("This action needs the person's confirmation"):
        if tool == CONFIRM_TOOL:
            said = (
                "Archiving the demo note “old-ideas” needs your yes first: confirm it and I "
                "archive it, cancel it and nothing changes."
            )
        elif tool == WRITE_TOOL:
            said = (
                "The note exists already, so tell me how to write it: replace what it holds, "
                "or add the new text to its end."
            )
        else:
            said = "That needs your confirmation first."
        return _say(said, thinking="It waits for the person's yes.")
    if result.startswith("The person must log in"):
        said = (
            "I need you to sign in to the demo service first: open the link I showed you, "
            "then ask me again."
        )
        return _say(said, thinking="A sign-in is needed.")
    if result.startswith("Error:"):
        return _say(f"That didn't work. {result.removeprefix('Error:').strip()}")
    said = {
        WIKI_TOOL: "I listed the notes in your wiki: they are under the tool call above.",
        CONFIRM_TOOL: "Done: the demo note “old-ideas” is archived.",
        WRITE_TOOL: "Done: the demo note is written.",
        PRESENT_TOOL: "Here are the days on the inner planets, in a table.",
    }.get(tool, "Done.")
    if tool == LOGIN_TOOL:
        try:
            account = msgspec.json.decode(result[result.find("{") :])
            said = (
                f"You're signed in to the demo service as {account['displayName']} "
                f"({account['user']})."
            )
        except (msgspec.DecodeError, KeyError, TypeError):
            said = "You're signed in to the demo service."
    return _say(said, thinking="The tool has answered.")


def _demo(name: str, offered: set[str]) -> ChatScript:
    if name == "reasoning":
        # Paced, so a UI shows the reasoning arriving for a few seconds.
        return _say("After all that thinking: the answer is 42.", thinking=_REASONING, delay_s=0.05)
    if name == "tool":
        if WIKI_TOOL not in offered:
            return _unavailable(WIKI_TOOL)
        return _call(WIKI_TOOL, {}, "Let me look at the wiki.")
    if name == "confirm":
        if CONFIRM_TOOL not in offered:
            return _unavailable(CONFIRM_TOOL)
        return _call(CONFIRM_TOOL, {"note": "old-ideas"}, "Archiving needs a yes first.")
    if name == "choices":
        if WRITE_TOOL not in offered:
            return _unavailable(WRITE_TOOL)
        arguments = {"path": DEMO_NOTE, "content": "First version.", "mode": "replace"}
        return _call(WRITE_TOOL, arguments, "First I write the note, then I write it again.")
    if name == "login":
        if LOGIN_TOOL not in offered:
            return _unavailable(LOGIN_TOOL)
        return _call(LOGIN_TOOL, {}, "I need to act as you on the demo service.")
    if name == "present":
        if PRESENT_TOOL not in offered:
            return _unavailable(PRESENT_TOOL)
        arguments = {"title": "Days on the inner planets", "content": _TABLE}
        return _call(PRESENT_TOOL, arguments, "A table shows this best.")
    if name == "markdown":
        return _say(_MARKDOWN)
    if name == "slow":
        text = " ".join(f"word{i}" for i in range(1, 41)) + "."
        return _say(text, thinking="Taking my time.", delay_s=0.25)
    if name == "error":
        return _say(
            "This answer will break off here and never",
            error_after=4,
            error="the scripted model was asked to fail (/demo error)",
        )
    if name == "cancel":
        return _say("This stream stops here and waits for you to cancel it …", hang=True)
    return _say(_HELP, thinking="The person asked what I can do.")


def services_yaml(model_url: str) -> str:
    """The ``services`` block declaring the demo services this server answers at ``model_url``."""
    base = model_url.rstrip("/")
    return f"""\
# Written by `mercury-http serve --dev-model`: the demo services the scripted model's
# `/demo confirm` and `/demo login` call, answered by the scripted model itself.
services:
  - name: demo
    base_url: {base}/demo
    operations:
      - name: notes
        description: List the demo notes.
        method: GET
        path: /notes
      - name: archive
        description: Archive a demo note.
        method: POST
        path: /notes/archive
        confirm: true
        parameters:
          type: object
          properties:
            note: {{type: string}}
          required: [note]
  - name: demo_account
    base_url: {base}/demo
    authorize_url: {base}/oauth/authorize
    token_url: {base}/oauth/token
    client_id: mercury-dev
    operations:
      - name: whoami
        description: Tell who the person is signed in to the demo service as.
        method: GET
        path: /account
"""


def demo_yaml(model_url: str) -> str:
    """The demo services, the demo space and the directory naming its people, as a file."""
    return (
        services_yaml(model_url)
        + f"""\
# The demo space: the development person (user `dev` of the development token) administers
# it, so its settings, mutes and members can be tried from the UI and the command line.
spaces:
  "{DEMO_SPACE}":
    admins: ["static:dev"]
    members: ["slack:UDEMOANN", "slack:UDEMOBEN"]
# Who is who: `dev` may approve requests for access (the directory role admin).
directory:
  static_people:
    - {{id: dev, displayName: Developer, roles: [admin], identities: ["static:dev"]}}
    - {{id: ann, displayName: Ann, identities: ["slack:UDEMOANN"]}}
    - {{id: ben, displayName: Ben, identities: ["slack:UDEMOBEN"]}}
"""
    )


class DevModel(OpenAIStandIn):
    """The scripted model: both protocols and the demo services on one port of 127.0.0.1."""

    def __init__(self, *, port: int = 0, models: Sequence[str] | None = None) -> None:
        super().__init__(models=models, port=port, responder=respond)
        self._codes: set[str] = set()
        self._tokens: set[str] = set()

    async def _dispatch(
        self, request: _Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        if request.path.startswith("/v1/"):
            _PROTOCOL.set("openai")
            return await OpenAIStandIn._dispatch(self, request, reader, writer)
        if request.path.startswith(("/demo/", "/oauth/")):
            await self._service(request, writer)
            return request.keep_alive
        _PROTOCOL.set("ollama")
        return await OllamaStandIn._dispatch(self, request, reader, writer)

    async def _stream(
        self,
        script: ChatScript,
        payload: dict[str, Any],
        model: str,
        keep: bool,
        writer: asyncio.StreamWriter,
    ) -> _Outcome:
        protocol = OpenAIStandIn if _PROTOCOL.get() == "openai" else OllamaStandIn
        return await protocol._stream(self, script, payload, model, keep, writer)

    async def _answer(
        self,
        script: ChatScript,
        payload: dict[str, Any],
        model: str,
        keep: bool,
        writer: asyncio.StreamWriter,
    ) -> _Outcome:
        protocol = OpenAIStandIn if _PROTOCOL.get() == "openai" else OllamaStandIn
        return await protocol._answer(self, script, payload, model, keep, writer)

    async def _service(self, request: _Request, writer: asyncio.StreamWriter) -> None:
        """The demo services and their OAuth login (see :func:`services_yaml`)."""
        keep = request.keep_alive
        target = (request.method, request.path)
        if target == ("GET", "/oauth/authorize"):
            query = dict(parse_qsl(request.query))
            redirect = query.get("redirect_uri", "")
            if not redirect.startswith(("http://", "https://")):
                await _write_json(
                    writer, 400, {"error": "redirect_uri is missing"}, keep_alive=keep
                )
                return
            code = secrets.token_urlsafe(16)
            self._codes.add(code)
            back = {"code": code, "state": query.get("state", "")}
            separator = "&" if "?" in redirect else "?"
            head = (
                "HTTP/1.1 302 Found\r\n"
                f"Location: {redirect}{separator}{urlencode(back)}\r\n"
                "Content-Length: 0\r\n" + ("" if keep else "Connection: close\r\n") + "\r\n"
            )
            writer.write(head.encode("latin-1"))
            await writer.drain()
            return
        if target == ("POST", "/oauth/token"):
            form = dict(parse_qsl(request.body.decode("utf-8", "replace")))
            code = form.get("code", "")
            if form.get("grant_type") != "authorization_code" or code not in self._codes:
                await _write_json(writer, 400, {"error": "invalid_grant"}, keep_alive=keep)
                return
            self._codes.discard(code)
            token = "dev-access-" + secrets.token_urlsafe(16)
            self._tokens.add(token)
            answer = {"access_token": token, "token_type": "Bearer", "expires_in": 3600}
            await _write_json(writer, 200, answer, keep_alive=keep)
            return
        if target == ("GET", "/demo/notes"):
            notes = [{"name": "old-ideas", "words": 120}, {"name": "launch-plan", "words": 480}]
            await _write_json(writer, 200, {"notes": notes}, keep_alive=keep)
            return
        if target == ("POST", "/demo/notes/archive"):
            await _write_json(writer, 200, {"archived": True}, keep_alive=keep)
            return
        if target == ("GET", "/demo/account"):
            scheme, _, token = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or token not in self._tokens:
                await _write_json(writer, 401, {"error": "sign in first"}, keep_alive=keep)
                return
            answer = {"user": "dev", "displayName": "Developer"}
            await _write_json(writer, 200, answer, keep_alive=keep)
            return
        await _write_json(writer, 404, {"error": "no such demo route"}, keep_alive=keep)
