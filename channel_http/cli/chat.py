"""``mercury-http chat``: talk to a running Mercury HTTP server from a terminal or a script.

A message goes to ``POST /turn`` and its events are shown as they stream; with ``--file`` or
``--no-stream`` it goes to ``POST /chat`` and the answer comes at once, with the files the
assistant wrote saved beside you. Exit statuses (:class:`Exit`): 0 answered, 1 the turn
failed, 2 a usage error, 3 waiting for a confirmation, 4 refused (401, 403, 429), 130
cancelled with Ctrl-C (the server sees the connection close and stops the turn).

The token comes from ``MERCURY_TOKEN``, else the ``token`` of the user config file
(``$XDG_CONFIG_HOME/mercury-http/config.toml``, by default under ``~/.config``), which may
also give ``server``. The default conversation is one per terminal session, derived from
the session's id, so successive commands in one shell continue it.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import enum
import hashlib
import json
import logging
import os
import secrets
import sys
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TextIO

import httpx

from channel_http.cli.language import ENGLISH, accept_language, spoken, translator_for
from core.people.i18n import Translator

if TYPE_CHECKING:
    from channel_http.cli.chat_view import View

__all__ = [
    "DEFAULT_SERVER",
    "ChatProblem",
    "Exit",
    "add_command",
    "refusal",
    "resolve_connection",
    "run",
]

DEFAULT_SERVER: Final = "http://127.0.0.1:4100"
CONFIG_NAME: Final = "mercury-http/config.toml"


class Exit(enum.IntEnum):
    """What ``mercury-http chat`` exits with."""

    ANSWERED = 0
    FAILED = 1
    USAGE = 2
    PENDING = 3
    REFUSED = 4
    CANCELLED = 130


class ChatProblem(Exception):
    """The command can't go on; ``status`` says how it ends and the message why."""

    def __init__(self, message: str, status: Exit) -> None:
        super().__init__(message)
        self.status = status


def add_command(commands: Any, tr: Translator) -> None:
    """Declare ``chat`` on the ``mercury-http`` sub-command parser, its texts in ``tr``'s."""
    parser = commands.add_parser(
        "chat",
        help=tr.gettext("talk to a running server"),
        description=tr.gettext(
            "Send a message to a running Mercury HTTP server and show the answer as it "
            "streams. Without TEXT, the message is read from stdin; on a terminal, an "
            "interactive conversation starts (/new for a new one, /quit to leave)."
        ),
        epilog=tr.gettext(
            "The token comes from MERCURY_TOKEN or the user config file "
            '($XDG_CONFIG_HOME/mercury-http/config.toml: token = "...", server = "..."). '
            "Exit statuses: 0 answered, 1 the turn failed, 2 usage error, 3 waiting for a "
            "confirmation (confirm with a later call sending the token as TEXT), 4 refused "
            "(401, 403, 429), 130 cancelled with Ctrl-C."
        ),
    )
    parser.add_argument("text", nargs="*", help=tr.gettext("the message (default: stdin)"))
    parser.add_argument(
        "--conversation",
        metavar="ID",
        help=tr.gettext(
            "the conversation to continue (default: one per terminal session, printed)"
        ),
    )
    parser.add_argument(
        "--file",
        metavar="PATH",
        action="append",
        default=[],
        type=Path,
        help=tr.gettext("send a file with the message (repeatable; uses POST /chat)"),
    )
    parser.add_argument(
        "--server",
        metavar="URL",
        help=tr.gettext("the server (default %(server)s)") % {"server": DEFAULT_SERVER},
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help=tr.gettext("one JSON object per event (or the answer), for scripts"),
    )
    parser.add_argument(
        "--no-stream",
        action="store_true",
        help=tr.gettext("wait for the whole answer (POST /chat)"),
    )
    parser.add_argument(
        "--save-to",
        metavar="DIR",
        type=Path,
        default=Path(),
        help=tr.gettext("where files the assistant sends back are saved (default: here)"),
    )
    parser.add_argument(
        "--show-reasoning",
        action="store_true",
        help=tr.gettext("keep the model's reasoning unfolded"),
    )


# ----------------------------------------------------------------------------- settings


def config_file(environ: dict[str, str]) -> Path:
    base = environ.get("XDG_CONFIG_HOME") or str(Path(environ.get("HOME", "~")) / ".config")
    return Path(base).expanduser() / CONFIG_NAME


def _read_config(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as file:
            return tomllib.load(file)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as error:
        said = _terminal().gettext("The config file %(path)s can't be read: %(error)s")
        raise ChatProblem(said % {"path": path, "error": error}, Exit.USAGE) from None


def _terminal() -> Translator:
    """The terminal's language, for what is said before any server was asked."""
    return translator_for(accept_language(os.environ))


def resolve_connection(server_argument: str | None) -> tuple[str, str]:
    """The server and the token a command talks with: ``--server``, ``MERCURY_SERVER`` or the
    config file's ``server`` (default :data:`DEFAULT_SERVER`); ``MERCURY_TOKEN`` or its
    ``token``. Shared by ``chat`` and the space commands (:mod:`channel_http.cli.admin`)."""
    environ = dict(os.environ)
    config = _read_config(config_file(environ))
    token = environ.get("MERCURY_TOKEN") or config.get("token")
    if not isinstance(token, str) or not token.strip():
        said = _terminal().gettext('No token: set MERCURY_TOKEN, or token = "..." in %(path)s.')
        raise ChatProblem(said % {"path": config_file(environ)}, Exit.USAGE)
    server = server_argument or environ.get("MERCURY_SERVER") or config.get("server")
    server = str(server or DEFAULT_SERVER).rstrip("/")
    if not server.startswith(("http://", "https://")):
        said = _terminal().gettext("The server %(server)r is not an http(s) URL.")
        raise ChatProblem(said % {"server": server}, Exit.USAGE)
    return server, token.strip()


def default_conversation() -> str:
    """One conversation per terminal session: the session id and the terminal, hashed."""
    try:
        terminal = os.ttyname(0)
    except OSError:
        terminal = ""
    seed = f"{os.getsid(0)}:{terminal}:{os.getuid()}"
    return "cli-" + hashlib.sha256(seed.encode()).hexdigest()[:12]


@dataclass
class Session:
    """The connection to the server and the conversation the command talks in."""

    server: str
    token: str
    conversation: str
    view: View
    save_to: Path
    streaming: bool
    interactive: bool
    json_output: bool = False
    language: str | None = None
    """The terminal's locale as a language tag, sent as ``Accept-Language``."""
    tr: Translator = ENGLISH
    """The command's own words, in the language the server speaks to the person."""
    client: httpx.Client = field(init=False)

    def __post_init__(self) -> None:
        headers = {"authorization": f"Bearer {self.token}", "user-agent": "mercury-http-chat"}
        if self.language:
            headers["accept-language"] = self.language
        self.client = httpx.Client(
            base_url=self.server, headers=headers, timeout=httpx.Timeout(30.0, read=None)
        )


# ------------------------------------------------------------------------------ the wire


def refusal(response: httpx.Response) -> ChatProblem:
    try:
        message = str(response.json().get("error") or response.reason_phrase)
    except (ValueError, AttributeError):
        message = response.text.strip()[:300] or response.reason_phrase
    status = response.status_code
    if status in (401, 403, 429):
        if status == 401:  # the server's sentence, then where this command took the token,
            # in the language the server's sentence came in
            spoke = translator_for(response.headers.get("content-language"))
            message += " " + spoke.gettext("The token came from MERCURY_TOKEN or the config file.")
        return ChatProblem(message, Exit.REFUSED)
    if 400 <= status < 500:
        return ChatProblem(message, Exit.USAGE)
    return ChatProblem(message, Exit.FAILED)


def _sse_events(lines: Iterator[str]) -> Iterator[tuple[str, dict[str, Any]]]:
    name, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield name, json.loads("\n".join(data))
            name, data = "message", []
        elif line.startswith(":"):
            continue
        else:
            key, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
    if data:
        yield name, json.loads("\n".join(data))


@dataclass
class Outcome:
    """How one exchange ended: a pending confirmation, or a failure message."""

    pending: dict[str, Any] | None = None
    failed: str | None = None


def stream_turn(session: Session, text: str) -> Outcome:
    """``POST /turn``, each event shown as it arrives."""
    body = {"text": text, "conversationId": session.conversation}
    outcome = Outcome()
    with session.client.stream("POST", "/turn", json=body) as response:
        if response.status_code != 200:
            response.read()
            raise refusal(response)
        for name, data in _sse_events(response.iter_lines()):
            if name == "turn" and not session.json_output:
                continue  # the turn's id, for rejoining a dropped stream; --json prints it
            session.view.event(name, data)
            if name == "pending":
                outcome.pending = data
            elif name == "error":
                outcome.failed = data["message"]
    session.view.close()
    return outcome


def chat_once(session: Session, text: str, files: Sequence[Path]) -> Outcome:
    """``POST /chat``: the answer at once, the returned files saved."""
    body: dict[str, Any] = {"text": text, "conversationId": session.conversation}
    if files:
        body["files"] = [
            {"name": path.name, "data": base64.b64encode(path.read_bytes()).decode("ascii")}
            for path in files
        ]
    response = session.client.post("/chat", json=body)
    if response.status_code != 200:
        raise refusal(response)
    answer = response.json()
    session.view.answer(answer)
    session.view.close()
    for sent in answer.get("files", []):
        saved = _save(session.save_to, str(sent["filename"]), base64.b64decode(sent["data"]))
        session.view.note(
            session.tr.gettext("Saved %(path)s (%(type)s, %(size)s bytes)")
            % {"path": saved, "type": sent["mimeType"], "size": sent["sizeBytes"]}
        )
    return Outcome(pending=answer.get("pending"))


def _save(folder: Path, name: str, data: bytes) -> Path:
    """Write ``data`` under ``folder`` with the server's name made safe, never overwriting."""
    safe = "".join(c for c in Path(name.replace("\\", "/")).name if c.isprintable()).lstrip(".")
    safe = safe or "file"
    stem, suffix = os.path.splitext(safe)
    folder.mkdir(parents=True, exist_ok=True)
    target, n = folder / safe, 1
    while True:
        try:
            with target.open("xb") as file:
                file.write(data)
            return target
        except FileExistsError:
            n += 1
            target = folder / f"{stem}-{n}{suffix}"


def exchange(session: Session, text: str, files: Sequence[Path]) -> Outcome:
    if files or not session.streaming:
        return chat_once(session, text, files)
    return stream_turn(session, text)


# ------------------------------------------------------------------------ confirmations


def _choices(pending: dict[str, Any], tr: Translator) -> list[tuple[str, str]]:
    confirm = tr.gettext("Confirm")
    return [
        (choice.get("label") or confirm, choice["token"]) for choice in pending.get("choices", [])
    ] or [(confirm, pending["token"])]


def ask_choice(
    pending: dict[str, Any], out: TextIO, read: Any, tr: Translator = ENGLISH
) -> str | None:
    """The token the person picks by number, or None when they leave it waiting."""
    choices = _choices(pending, tr)
    waiting = tr.gettext("Waiting for your confirmation: %(command)s")
    out.write(f"\n⏸ {waiting % {'command': pending['command']}}\n")
    for number, (label, _) in enumerate(choices, start=1):
        out.write(f"  {number}) {label}\n")
    out.write(f"  0) {tr.gettext('Not now')}\n")
    out.flush()
    while True:
        try:
            picked = read(tr.gettext("Choose a number: ")).strip()
        except EOFError:
            return None
        if picked.isdigit() and 0 <= int(picked) <= len(choices):
            return None if picked == "0" else choices[int(picked) - 1][1]
        out.write(tr.gettext("Type a number from 0 to %(count)s.") % {"count": len(choices)} + "\n")


def print_choices(
    pending: dict[str, Any], conversation: str, out: TextIO, tr: Translator = ENGLISH
) -> None:
    waiting = tr.gettext("Waiting for your confirmation: %(command)s")
    out.write(waiting % {"command": pending["command"]} + "\n")
    for label, token in _choices(pending, tr):
        out.write(f"  {label}: mercury-http chat --conversation {conversation} {token}\n")
    out.flush()


def settle(session: Session, outcome: Outcome, out: TextIO, read: Any) -> Exit:
    """Follow an exchange through its confirmations; the status the command ends with."""
    while outcome.pending is not None:
        if not session.interactive:
            if not session.json_output:  # the pending event said it already
                print_choices(outcome.pending, session.conversation, out, session.tr)
            return Exit.PENDING
        token = ask_choice(outcome.pending, out, read, session.tr)
        if token is None:
            return Exit.PENDING
        outcome = exchange(session, token, ())
    return Exit.FAILED if outcome.failed is not None else Exit.ANSWERED


# -------------------------------------------------------------------------------- main


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _build_session(arguments: argparse.Namespace, interactive: bool) -> Session:
    from rich.console import Console

    from channel_http.cli.chat_view import JsonView, LiveView, PlainView

    server, token = resolve_connection(arguments.server)
    session = Session(
        server=server,
        token=token,
        conversation=arguments.conversation or default_conversation(),
        view=JsonView(),
        save_to=arguments.save_to,
        streaming=not arguments.no_stream,
        interactive=interactive,
        json_output=arguments.json,
        language=accept_language(os.environ),
    )
    session.tr = spoken(session.client, session.language)
    if not arguments.json and _is_tty(sys.stdout):
        session.view = LiveView(
            Console(highlight=False), show_reasoning=arguments.show_reasoning, tr=session.tr
        )
    elif not arguments.json:
        session.view = PlainView(tr=session.tr)
    return session


def run(arguments: argparse.Namespace) -> int:
    """Run ``mercury-http chat``; returns its exit status."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # no line per request
    for path in arguments.file:
        if not path.is_file():
            print(f"mercury-http chat: no such file: {path}", file=sys.stderr)
            return Exit.USAGE
    text = " ".join(arguments.text)
    stdin_tty = _is_tty(sys.stdin)
    repl = not text and stdin_tty and not arguments.json
    if not text and not stdin_tty:
        text = sys.stdin.read().strip()
    if not text and not repl and not arguments.file:
        nothing = translator_for(accept_language(os.environ)).gettext(
            "nothing to send: give TEXT or pipe it in."
        )
        print(f"mercury-http chat: {nothing}", file=sys.stderr)
        return Exit.USAGE
    try:
        session = _build_session(arguments, interactive=stdin_tty and not arguments.json)
    except ChatProblem as problem:
        print(f"mercury-http chat: {problem}", file=sys.stderr)
        return problem.status
    print(
        session.tr.gettext("Conversation %(id)s (continue it with --conversation %(id)s)")
        % {"id": session.conversation},
        file=sys.stderr,
        flush=True,
    )
    try:
        if repl:
            return _repl(session)
        return _one(session, text, arguments.file)
    finally:
        session.client.close()


def _one(session: Session, text: str, files: Sequence[Path]) -> int:
    try:
        outcome = exchange(session, text, files)
        status = settle(session, outcome, sys.stdout, input)
    except KeyboardInterrupt:
        session.view.close()
        print("\n" + session.tr.gettext("Cancelled."), file=sys.stderr)
        return Exit.CANCELLED
    except ChatProblem as problem:
        session.view.close()
        print(f"mercury-http chat: {problem}", file=sys.stderr)
        return problem.status
    except httpx.HTTPError as error:
        session.view.close()
        said = session.tr.gettext("the server at %(server)s can't be reached (%(error)s).")
        print(
            "mercury-http chat: " + said % {"server": session.server, "error": error},
            file=sys.stderr,
        )
        return Exit.FAILED
    return status


def _repl(session: Session) -> int:
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401 - line editing and history for input()
    print(
        session.tr.gettext("Type a message; /new starts a new conversation, /quit leaves."),
        file=sys.stderr,
    )
    while True:
        try:
            line = input("you › ").strip()
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return Exit.ANSWERED
        if not line:
            continue
        if line in ("/quit", "/exit"):
            return Exit.ANSWERED
        if line == "/new":
            session.conversation = "cli-" + secrets.token_hex(6)
            print(
                session.tr.gettext("New conversation %(id)s") % {"id": session.conversation},
                file=sys.stderr,
            )
            continue
        status = _one(session, line, ())
        if status == Exit.REFUSED:
            return status
