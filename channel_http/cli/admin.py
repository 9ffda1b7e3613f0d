"""The space commands of ``mercury-http``: spaces, preferences, mutes, settings, pairing and
usage; and ``connections``, the MCP servers the caller has signed in to.

Each talks to a running server over its HTTP routes (``/spaces…``, ``/pairing…``,
``/me/connections…``) with the
caller's token, found as ``mercury-http chat`` finds it
(:func:`~channel_http.cli.chat.resolve_connection`), so the server decides who may do what
by the same rule its routes and the agent's tools use: a refusal is the server's sentence,
printed as it came. ``--json`` prints the server's answer as one JSON object, for scripts.
The lines written for people speak the language the server speaks to the caller
(:mod:`channel_http.cli.language`, as ``chat`` does); identifiers (space ids, keys, codes,
permissions) and the ``--json`` answers stay as the server gives them.

Exit statuses (:class:`~channel_http.cli.chat.Exit`): 0 done, 1 the server failed or
can't be reached, 2 a usage error or a request the server refused as wrong (400, 404), 4
refused (401, 403, 429). Deleting a space and muting someone ask first on a terminal; with
no terminal they need ``--yes``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from datetime import datetime
from functools import cached_property
from typing import Any, Final, TextIO
from urllib.parse import quote

import httpx

from channel_http.cli.chat import ChatProblem, Exit, refusal, resolve_connection
from channel_http.cli.language import accept_language, spoken, translator_for
from core.people.i18n import N_, Translator

__all__ = ["COMMANDS", "add_commands", "run"]

#: The sub-commands this module declares on ``mercury-http``.
COMMANDS: Final = (
    "spaces",
    "prefs",
    "mute",
    "unmute",
    "mutes",
    "settings",
    "pairing",
    "usage",
    "connections",
)

#: A space role and where a setting's value comes from, as the lines show them.
ROLES: Final = {
    # Shown: a person's role in a space, in the command line's lists (mercury-http spaces).
    "admin": N_("admin"),
    # Shown: a person's role in a space, in the command line's lists (mercury-http spaces).
    "member": N_("member"),
}
SOURCES: Final = {
    # Shown: in brackets after a space setting's value: the space set it itself.
    "space": N_("space"),
    # Shown: in brackets after a space setting's value: it comes from the configuration file.
    "file": N_("file"),
    # Shown: in brackets after a space setting's value: the global setting applies.
    "global": N_("global"),
}
#: The answer a ``[y/N]`` question takes besides ``y``, in the question's language.
# Shown: the letter typed for "yes" in the "[y/N]" of a question (Italian "s", German "j").
YES: Final = N_("y")


# ---------------------------------------------------------------------------- the parser


def add_commands(commands: Any, tr: Translator) -> None:
    """Declare the space commands on the ``mercury-http`` sub-command parser, in ``tr``'s."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", metavar="URL", help=tr.gettext("the server (as for chat)"))
    common.add_argument(
        "--json",
        action="store_true",
        help=tr.gettext("print the server's answer as JSON, for scripts"),
    )
    # The same options on an action (``spaces list --json``), not overriding what was
    # given before it (``spaces --json list``).
    nested = argparse.ArgumentParser(add_help=False)
    nested.add_argument(
        "--server", metavar="URL", default=argparse.SUPPRESS, help=tr.gettext("the server")
    )
    nested.add_argument(
        "--json",
        action="store_true",
        default=argparse.SUPPRESS,
        help=tr.gettext("print JSON, for scripts"),
    )
    asking = argparse.ArgumentParser(add_help=False)
    asking.add_argument(
        "--yes",
        action="store_true",
        help=tr.gettext("don't ask for a confirmation (needed without a terminal)"),
    )
    epilog = tr.gettext(
        "The token and server come as for chat (MERCURY_TOKEN, MERCURY_SERVER or the user "
        "config file). Exit statuses: 0 done, 1 the server failed or can't be reached, 2 usage "
        "error or a request refused as wrong (400, 404), 4 refused (401, 403, 429)."
    )
    space_help = tr.gettext("the space id, e.g. slack:C0123")
    rest_help = tr.gettext("the value (the rest of the line)")

    spaces = commands.add_parser(
        "spaces",
        parents=[common],
        help=tr.gettext("list your spaces, show one, or delete one"),
        description=tr.gettext(
            "Without arguments, the spaces you take part in with your role. "
            "'show SPACE' gives its members and roles; 'delete SPACE' forgets it (asks first)."
        ),
        epilog=epilog,
    )
    spaces_actions = spaces.add_subparsers(dest="action")
    spaces_actions.add_parser(
        "list", parents=[nested], help=tr.gettext("the spaces you take part in")
    )
    show = spaces_actions.add_parser(
        "show", parents=[nested], help=tr.gettext("one space and its members")
    )
    show.add_argument("space", help=space_help)
    forget = spaces_actions.add_parser(
        "delete", parents=[nested, asking], help=tr.gettext("forget a space (admins)")
    )
    forget.add_argument("space", help=space_help)

    prefs = commands.add_parser(
        "prefs",
        parents=[common],
        help=tr.gettext("a space's preferences"),
        description=tr.gettext(
            "List, read, set or delete a space's preferences. 'set' takes the rest of "
            "the line as the value."
        ),
        epilog=epilog,
    )
    prefs_actions = prefs.add_subparsers(dest="action", required=True)
    listed = prefs_actions.add_parser("list", parents=[nested], help=tr.gettext("every preference"))
    listed.add_argument("space")
    got = prefs_actions.add_parser("get", parents=[nested], help=tr.gettext("one preference"))
    got.add_argument("space")
    got.add_argument("key")
    put = prefs_actions.add_parser("set", parents=[nested], help=tr.gettext("set a preference"))
    put.add_argument("space")
    put.add_argument("key")
    put.add_argument("value", nargs="+", help=rest_help)
    dropped = prefs_actions.add_parser(
        "delete", parents=[nested, asking], help=tr.gettext("delete a preference")
    )
    dropped.add_argument("space")
    dropped.add_argument("key")

    mute = commands.add_parser(
        "mute",
        parents=[common, asking],
        help=tr.gettext("mute a person in a space (shows the reminder, then asks)"),
        description=tr.gettext(
            "Mute PERSON in SPACE for DURATION (10m, 1h, 24h, 7d). The server's "
            "reminder of what muting does is shown first, then you confirm."
        ),
        epilog=epilog,
    )
    mute.add_argument("space")
    mute.add_argument("person", help=tr.gettext("slack:U0123, static:alice or people:alice"))
    mute.add_argument("duration", help=tr.gettext("10m, 1h, 24h, 7d (1 minute to 30 days)"))
    mute.add_argument("--reason", help=tr.gettext("why, kept with the mute"))
    unmute = commands.add_parser(
        "unmute", parents=[common], help=tr.gettext("lift a person's mute"), epilog=epilog
    )
    unmute.add_argument("space")
    unmute.add_argument("person")
    mutes = commands.add_parser(
        "mutes",
        parents=[common],
        help=tr.gettext("the mutes in force in a space"),
        epilog=epilog,
    )
    mutes.add_argument("space")

    settings = commands.add_parser(
        "settings",
        parents=[common],
        help=tr.gettext("a space's runtime settings"),
        description=tr.gettext(
            "SPACE alone lists the settings with where each value comes from; KEY "
            "shows one; KEY VALUE sets it; --unset KEY falls back to the file or the default."
        ),
        epilog=epilog,
    )
    settings.add_argument("space")
    settings.add_argument("key", nargs="?")
    settings.add_argument(
        "value", nargs="*", help=tr.gettext("the new value (the rest of the line)")
    )
    settings.add_argument(
        "--unset",
        metavar="KEY",
        nargs="?",
        const="",
        help=tr.gettext(
            "remove the space's own value of KEY (settings SPACE --unset KEY, or settings "
            "SPACE KEY --unset)"
        ),
    )

    pairing = commands.add_parser(
        "pairing",
        parents=[common],
        help=tr.gettext("people waiting to be let in (admins)"),
        description=tr.gettext(
            "The pairing requests of people who wrote to the assistant and are not "
            "known yet; approve or deny one by its code."
        ),
        epilog=epilog,
    )
    pairing_actions = pairing.add_subparsers(dest="action")
    pairing_actions.add_parser("list", parents=[nested], help=tr.gettext("the pending requests"))
    approve = pairing_actions.add_parser(
        "approve", parents=[nested], help=tr.gettext("approve a request")
    )
    approve.add_argument("code")
    deny = pairing_actions.add_parser("deny", parents=[nested], help=tr.gettext("deny a request"))
    deny.add_argument("code")
    pairing_actions.add_parser("admitted", parents=[nested], help=tr.gettext("the accounts let in"))
    revoke = pairing_actions.add_parser(
        "revoke", parents=[nested], help=tr.gettext("let an approved account out again")
    )
    revoke.add_argument(
        "account", help=tr.gettext("the account as listed, such as telegram:123456")
    )

    usage = commands.add_parser(
        "usage",
        parents=[common],
        help=tr.gettext("the tokens the model used: yours, a space's, or everyone's"),
        description=tr.gettext(
            "Your own tokens by day and model (GET /me/usage); with --space, a "
            "space's by person and model (its admins); with --everyone (or --person, --model), "
            "everyone's by person, space and model (administrators)."
        ),
        epilog=epilog,
    )
    usage.add_argument(
        "--period",
        choices=("today", "7d", "30d", "month"),
        help=tr.gettext("the days covered (30d)"),
    )
    usage.add_argument(
        "--by", help=tr.gettext("what rows are grouped by: day, person, space, model")
    )
    usage.add_argument("--space", help=tr.gettext("one space's usage, e.g. slack:C0123"))
    usage.add_argument(
        "--everyone", action="store_true", help=tr.gettext("everyone's usage (admins)")
    )
    usage.add_argument("--person", help=tr.gettext("with --everyone: one person (a person key)"))
    usage.add_argument("--model", help=tr.gettext("with --everyone: one model"))
    usage.add_argument(
        "--allowances",
        action="store_true",
        help=tr.gettext("the named people's own token allowances (admins)"),
    )
    usage.add_argument(
        "--set-allowance",
        nargs=3,
        metavar=("PERSON", "WINDOW", "TOKENS"),
        help=tr.gettext(
            "give one person their own allowance: day or month, in tokens (0: none; admins)"
        ),
    )
    usage.add_argument(
        "--drop-allowance",
        nargs=2,
        metavar=("PERSON", "WINDOW"),
        help=tr.gettext(
            "drop a person's runtime allowance: the file's, else everyone's, applies (admins)"
        ),
    )

    connections = commands.add_parser(
        "connections",
        parents=[common],
        help=tr.gettext("the MCP servers you're signed in to, or sign out of one"),
        description=tr.gettext(
            "Without arguments, the MCP servers you have signed in to, with the "
            "scopes granted and when the access lapses (it is renewed before). 'remove SERVER' "
            "signs you out of it: the next use of its tools asks you to sign in again."
        ),
        epilog=epilog,
    )
    connections_actions = connections.add_subparsers(dest="action")
    connections_actions.add_parser("list", parents=[nested], help=tr.gettext("your connections"))
    removed = connections_actions.add_parser(
        "remove", parents=[nested], help=tr.gettext("sign out of a server")
    )
    removed.add_argument("name", metavar="SERVER", help=tr.gettext("the server's name, as listed"))


# ----------------------------------------------------------------------------- the wire


class Client:
    """The server, with the caller's token; answers are the JSON objects of the routes.

    ``language`` (the terminal's locale) goes out as ``Accept-Language``, so the server's
    sentences come in it unless the person saved another; ``local`` speaks the locale's
    language for the problems met before the server said anything.
    """

    def __init__(self, server: str, token: str, language: str | None) -> None:
        headers = {"authorization": f"Bearer {token}", "user-agent": "mercury-http-admin"}
        if language:
            headers["accept-language"] = language
        self.http = httpx.Client(base_url=server, headers=headers, timeout=30.0)
        self.language = language
        self.local = translator_for(language)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = self.http.request(method, path, json=body)
        except httpx.HTTPError as error:
            said = self.local.gettext("The server at %(server)s can't be reached: %(error)s")
            raise ChatProblem(
                said % {"server": self.http.base_url, "error": error}, Exit.FAILED
            ) from None
        if response.status_code >= 400:
            raise refusal(response)
        try:
            answer = response.json()
        except ValueError:
            said = self.local.gettext("The server's answer is not JSON.")
            raise ChatProblem(said, Exit.FAILED) from None
        if not isinstance(answer, dict):
            said = self.local.gettext("The server's answer is not a JSON object.")
            raise ChatProblem(said, Exit.FAILED)
        return answer


def _segment(value: str) -> str:
    """One path segment: a space id (``slack:C1``) or a person keeps its colons."""
    return quote(value, safe=":@")


# ---------------------------------------------------------------------------- the commands


class Console:
    """Where a command writes, how it asks (a terminal, or ``--yes``), and in what language."""

    def __init__(
        self,
        out: TextIO,
        arguments: argparse.Namespace,
        read: Callable[[str], str],
        client: Client,
    ):
        self.out = out
        self.json = bool(arguments.json)
        self.yes = bool(getattr(arguments, "yes", False))
        self._read = read
        self._interactive = _is_tty(sys.stdin)
        self._client = client

    @cached_property
    def tr(self) -> Translator:
        """The language the server speaks to the caller, asked (``GET /me``) when first needed:
        ``--json`` alone never asks."""
        return spoken(self._client.http, self._client.language)

    def gettext(self, message: str, **values: object) -> str:
        """``message`` in the caller's language, its ``%(name)s`` placeholders filled."""
        said = self.tr.gettext(message)
        return said % values if values else said

    def ngettext(self, singular: str, plural: str, n: int, **values: object) -> str:
        """The form of ``singular``/``plural`` for ``n`` in the caller's language, filled."""
        return self.tr.ngettext(singular, plural, n) % values

    def say(self, line: str = "") -> None:
        print(line, file=self.out)

    def answer(self, answer: dict[str, Any], human: Callable[[dict[str, Any]], None]) -> None:
        if self.json:
            print(json.dumps(answer, ensure_ascii=False), file=self.out)
        else:
            human(answer)

    def confirm(self, question: str, expected: str | None = None) -> bool:
        """True once confirmed: ``--yes``, or the expected answer typed on a terminal (by
        default yes: ``y`` or the question's language's letter for it)."""
        if self.yes:
            return True
        if not self._interactive:
            raise ChatProblem(
                self.gettext(
                    "There is no terminal to ask on: add --yes to go ahead without asking."
                ),
                Exit.USAGE,
            )
        try:
            typed = self._read(question).strip().lower()
        except EOFError:
            return False
        if expected is not None:
            return typed == expected.lower()
        return typed in ("y", self.tr.gettext(YES).lower())

    def role(self, role: object) -> str:
        """A space role in the caller's language (``admin`` → ``amministratore``)."""
        known = ROLES.get(str(role))
        return self.tr.gettext(known) if known else str(role)


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def local_time(stamp: object) -> str:
    """A server's ISO time in this computer's zone, to the minute: ``2026-12-07 13:13 CET``."""
    try:
        moment = datetime.fromisoformat(str(stamp))
    except ValueError:
        return str(stamp)
    if moment.tzinfo is None:
        return str(stamp)
    return moment.astimezone().strftime("%Y-%m-%d %H:%M %Z")


def _who(entry: dict[str, Any], key: str = "person") -> str:
    """A person as people read them: the name, with the id beside it."""
    person = str(entry.get(key) or entry.get("id") or "")
    name = entry.get("name")
    return f"{name} ({person})" if isinstance(name, str) and name else person


def _spaces(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    action = arguments.action or "list"
    if action == "list":
        answer = client.call("GET", "/spaces")

        def listed(answer: dict[str, Any]) -> None:
            spaces = answer.get("spaces") or []
            if not spaces:
                console.say(console.gettext("You take part in no space yet."))
            for space in spaces:
                title = space.get("title") or (
                    console.gettext("direct messages") if space.get("isDm") else ""
                )
                role = console.role(space["role"])
                console.say(f"{space['spaceId']}\t{role}\t{title}".rstrip())

        console.answer(answer, listed)
        return
    space = _segment(arguments.space)
    if action == "show":
        answer = client.call("GET", f"/spaces/{space}")

        def shown(answer: dict[str, Any]) -> None:
            about = answer.get("space") or {}
            console.say(f"{about.get('spaceId')}  {about.get('title') or ''}".rstrip())
            console.say(
                console.gettext(
                    "platform: %(platform)s, your role: %(role)s",
                    platform=about.get("platform"),
                    role=console.role(about.get("role")),
                )
            )
            # The permissions are the names the configuration file uses: not translated.
            permissions = ", ".join(about.get("permissions") or [])
            console.say(
                console.gettext("you may: %(permissions)s", permissions=permissions)
                if permissions
                else console.gettext("you may: nothing")
            )
            members = answer.get("members") or []
            console.say(
                console.ngettext(
                    "%(count)d member:", "%(count)d members:", len(members), count=len(members)
                )
            )
            for member in members:
                console.say(f"  {_who(member, 'id')}\t{console.role(member.get('role'))}")

        console.answer(answer, shown)
        return
    # delete
    if not console.confirm(
        console.gettext(
            "Forget the space %(space)s: its members, preferences, mutes and settings? "
            "Type its id to confirm: ",
            space=arguments.space,
        ),
        expected=arguments.space,
    ):
        raise ChatProblem(console.gettext("Nothing was deleted."), Exit.USAGE)
    answer = client.call("DELETE", f"/spaces/{space}")
    console.answer(
        answer,
        lambda _: console.say(
            console.gettext("Forgot the space %(space)s.", space=arguments.space)
        ),
    )


def _prefs(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    base = f"/spaces/{_segment(arguments.space)}/prefs"
    if arguments.action == "list":

        def listed(answer: dict[str, Any]) -> None:
            preferences = answer.get("preferences") or []
            if not preferences:
                console.say(console.gettext("The space has no preferences."))
            for preference in preferences:
                console.say(f"{preference['key']} = {preference['value']}")

        console.answer(client.call("GET", base), listed)
    elif arguments.action == "get":
        answer = client.call("GET", f"{base}/{_segment(arguments.key)}")
        console.answer(answer, lambda a: console.say(str(a["preference"]["value"])))
    elif arguments.action == "set":
        value = " ".join(arguments.value)
        answer = client.call("PUT", f"{base}/{_segment(arguments.key)}", {"value": value})
        said = (
            N_("Added %(key)s = %(value)s")
            if answer.get("created")
            else N_("Replaced %(key)s = %(value)s")
        )
        console.answer(
            answer, lambda _: console.say(console.gettext(said, key=arguments.key, value=value))
        )
    else:
        if not console.confirm(
            console.gettext("Delete the preference %(key)s? [y/N] ", key=arguments.key)
        ):
            raise ChatProblem(console.gettext("Nothing was deleted."), Exit.USAGE)
        answer = client.call("DELETE", f"{base}/{_segment(arguments.key)}")
        console.answer(
            answer, lambda _: console.say(console.gettext("Deleted %(key)s.", key=arguments.key))
        )


def _mute(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    path = f"/spaces/{_segment(arguments.space)}/mutes"
    body: dict[str, Any] = {"person": arguments.person, "duration": arguments.duration}
    if arguments.reason is not None:
        body["reason"] = arguments.reason
    reminder = client.call("POST", path, body)
    if not console.json or not console.yes:
        # The reminder goes to stderr under --json, so stdout stays one JSON object.
        stream = sys.stderr if console.json else console.out
        print(str(reminder.get("notice") or ""), file=stream)  # the prompt below confirms
    if not console.confirm(console.gettext("Mute? [y/N] ")):
        raise ChatProblem(console.gettext("Nobody was muted."), Exit.USAGE)
    answer = client.call("POST", path, {**body, "confirm": True})

    def muted(answer: dict[str, Any]) -> None:
        mute = answer.get("mute") or {}
        console.say(
            console.gettext(
                "Muted %(person)s until %(until)s.",
                person=_who(mute),
                until=local_time(mute.get("until")),
            )
        )

    console.answer(answer, muted)


def _unmute(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    path = f"/spaces/{_segment(arguments.space)}/mutes/{_segment(arguments.person)}"
    answer = client.call("DELETE", path)
    console.answer(
        answer,
        lambda a: console.say(console.gettext("Unmuted %(person)s.", person=a.get("unmuted"))),
    )


def _mutes(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    answer = client.call("GET", f"/spaces/{_segment(arguments.space)}/mutes")

    def listed(answer: dict[str, Any]) -> None:
        mutes = answer.get("mutes") or []
        if not mutes:
            console.say(console.gettext("Nobody is muted in this space."))
        for mute in mutes:
            reason = f" ({mute['reason']})" if mute.get("reason") else ""
            until = console.gettext("until %(time)s", time=local_time(mute["until"]))
            by = console.gettext("by %(person)s", person=mute["by"])
            console.say(f"{_who(mute)}\t{until}\t{by}{reason}")

    console.answer(answer, listed)


def _typed(value: str, current: Any) -> Any:
    """A value typed on the command line, in the type the setting has now (``5`` a number,
    ``on`` a truth value); text stays text."""
    if isinstance(current, bool):
        lowered = value.strip().lower()
        if lowered in ("true", "on", "yes", "1"):
            return True
        if lowered in ("false", "off", "no", "0"):
            return False
        return value
    if isinstance(current, int):
        try:
            return int(value.strip())
        except ValueError:
            return value
    if current is None:
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        return parsed if isinstance(parsed, bool | int) else value
    return value


def _setting_line(console: Console, setting: dict[str, Any]) -> str:
    value = json.dumps(setting.get("value"), ensure_ascii=False)
    source = str(setting.get("source"))
    known = SOURCES.get(source)
    return f"{setting['key']} = {value}\t({console.tr.gettext(known) if known else source})"


def _settings(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    base = f"/spaces/{_segment(arguments.space)}/settings"

    def one(answer: dict[str, Any]) -> None:
        console.say(_setting_line(console, answer["setting"]))

    if arguments.key is None and arguments.unset is None:
        if arguments.value:
            raise ChatProblem(
                console.gettext("Name the setting: settings SPACE KEY [VALUE]."), Exit.USAGE
            )

        def every(answer: dict[str, Any]) -> None:
            for setting in answer.get("settings") or []:
                console.say(_setting_line(console, setting))

        console.answer(client.call("GET", base), every)
        return
    if arguments.unset is not None:
        key = arguments.unset or arguments.key
        if arguments.value or (arguments.unset and arguments.key is not None) or not key:
            raise ChatProblem(console.gettext("--unset takes one KEY and no value."), Exit.USAGE)
        console.answer(client.call("DELETE", f"{base}/{_segment(key)}"), one)
        return
    listed = client.call("GET", base)
    current = {s.get("key"): s for s in listed.get("settings") or [] if isinstance(s, dict)}
    if arguments.key not in current:
        known = ", ".join(sorted(str(k) for k in current))
        raise ChatProblem(
            console.gettext(
                "There is no setting %(key)s; the settings: %(known)s.",
                key=arguments.key,
                known=known,
            ),
            Exit.USAGE,
        )
    if not arguments.value:
        shown = {"ok": True, "spaceId": listed.get("spaceId"), "setting": current[arguments.key]}
        console.answer(shown, one)
        return
    value = _typed(" ".join(arguments.value), current[arguments.key].get("value"))
    answer = client.call("PUT", f"{base}/{_segment(arguments.key)}", {"value": value})
    console.answer(answer, one)


def _pairing(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    action = arguments.action or "list"
    if action == "list":

        def listed(answer: dict[str, Any]) -> None:
            pairings = answer.get("pairings") or []
            if not pairings:
                console.say(console.gettext("Nobody is waiting."))
            for request in pairings:
                who = _who(request, "account")
                expires = console.gettext("expires %(time)s", time=local_time(request["expiresAt"]))
                console.say(f"{request['code']}\t{request['platform']}\t{who}\t{expires}")

        console.answer(client.call("GET", "/pairing"), listed)
        return
    if action == "admitted":

        def admitted(answer: dict[str, Any]) -> None:
            accounts = answer.get("accounts") or []
            if not accounts:
                console.say(console.gettext("Nobody was let in."))
            for account in accounts:
                by = console.gettext("by %(person)s", person=account["approvedBy"])
                console.say(
                    f"{account['account']}\t{account['name'] or '-'}\t"
                    f"{by}\t{local_time(account['approvedAt'])}"
                )

        console.answer(client.call("GET", "/pairing/admitted"), admitted)
        return
    if action == "revoke":
        answer = client.call("DELETE", f"/pairing/admitted/{_segment(arguments.account)}")
        console.answer(
            answer,
            lambda _: console.say(
                console.gettext("Revoked %(account)s.", account=arguments.account)
            ),
        )
        return
    answer = client.call("POST", f"/pairing/{_segment(arguments.code)}/{action}")
    done = N_("Approved %(code)s.") if action == "approve" else N_("Denied %(code)s.")
    console.answer(answer, lambda _: console.say(console.gettext(done, code=arguments.code)))


def _usage(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    if arguments.allowances or arguments.set_allowance or arguments.drop_allowance:
        _allowances(client, console, arguments)
        return
    query: dict[str, str] = {}
    for name in ("period", "by"):
        if getattr(arguments, name):
            query[name] = getattr(arguments, name)
    if arguments.space:
        path = f"/spaces/{_segment(arguments.space)}/usage"
    elif arguments.everyone or arguments.person or arguments.model:
        path = "/usage"
        for name in ("person", "model"):
            if getattr(arguments, name):
                query[name] = getattr(arguments, name)
    else:
        path = "/me/usage"
    if query:
        path += "?" + "&".join(f"{k}={quote(v, safe=',')}" for k, v in query.items())

    def shown(answer: dict[str, Any]) -> None:
        console.say(
            console.gettext("%(start)s to %(end)s (UTC)", start=answer["from"], end=answer["to"])
        )
        for row in answer.get("rows") or []:
            person = row.get("person")
            where = [row.get("day"), person and _who(person, "id"), row.get("model")]
            if "spaceId" in row:
                where.insert(2, row["spaceId"] or console.gettext("(own conversations)"))
            label = "\t".join(str(part) for part in where if part)
            console.say(f"{label}\t{_tokens(console, row)}")
        total = console.gettext("total")
        console.say(f"{total}\t{_tokens(console, answer['total'])}")

    console.answer(client.call("GET", path), shown)


def _allowances(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    def line(allowance: dict[str, Any]) -> str:
        return (
            f"{_who(allowance['person'], 'id')}\t{allowance['window']}\t"
            + console.ngettext(
                "%(tokens)d token",
                "%(tokens)d tokens",
                int(allowance["tokens"]),
                tokens=int(allowance["tokens"]),
            )
            + f"\t({allowance['source']})"
        )

    if arguments.set_allowance:
        person, window, tokens = arguments.set_allowance
        path = f"/usage/allowances/{_segment(person)}/{_segment(window)}"
        answer = client.call("PUT", path, {"value": tokens})
        console.answer(answer, lambda a: console.say(line(a["allowance"])))
        return
    if arguments.drop_allowance:
        person, window = arguments.drop_allowance
        path = f"/usage/allowances/{_segment(person)}/{_segment(window)}"

        def dropped(answer: dict[str, Any]) -> None:
            left = answer.get("allowance")
            console.say(
                line(left)
                if left
                else f"{person}\t{window}\t" + console.gettext("everyone's allowance")
            )

        console.answer(client.call("DELETE", path), dropped)
        return

    def listed(answer: dict[str, Any]) -> None:
        found = answer.get("allowances") or []
        if not found:
            console.say(console.gettext("No one has an allowance of their own."))
        for allowance in found:
            console.say(line(allowance))

    console.answer(client.call("GET", "/usage/allowances"), listed)


def _tokens(console: Console, sums: dict[str, Any]) -> str:
    return console.ngettext(
        "%(input)s in, %(output)s out, %(cached)s cached, %(calls)d call",
        "%(input)s in, %(output)s out, %(cached)s cached, %(calls)d calls",
        int(sums["calls"]),
        input=sums["input"],
        output=sums["output"],
        cached=sums["cached"],
        calls=int(sums["calls"]),
    )


def _connections(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    if (arguments.action or "list") == "list":

        def listed(answer: dict[str, Any]) -> None:
            connections = answer.get("connections") or []
            if not connections:
                console.say(console.gettext("You aren't signed in to any MCP server."))
            for connection in connections:
                scopes = " ".join(connection.get("scopes") or []) or "-"
                expires = connection.get("expiresAt")
                lapses = (
                    console.gettext("lapses %(time)s", time=local_time(expires))
                    if expires
                    else console.gettext("never lapses")
                )
                console.say(
                    f"{connection['server']}\t{connection.get('title') or ''}\t"
                    f"{connection.get('issuer') or '-'}\t{scopes}\t{lapses}"
                )

        console.answer(client.call("GET", "/me/connections"), listed)
        return
    answer = client.call("DELETE", f"/me/connections/{_segment(arguments.name)}")
    console.answer(
        answer,
        lambda _: console.say(console.gettext("Signed out of %(server)s.", server=arguments.name)),
    )


_RUN: Final[dict[str, Callable[[Client, Console, argparse.Namespace], None]]] = {
    "spaces": _spaces,
    "prefs": _prefs,
    "mute": _mute,
    "unmute": _unmute,
    "mutes": _mutes,
    "settings": _settings,
    "pairing": _pairing,
    "usage": _usage,
    "connections": _connections,
}


def run(
    arguments: argparse.Namespace,
    out: TextIO | None = None,
    read: Callable[[str], str] = input,
) -> int:
    """Run one space command; returns its exit status."""
    logging.getLogger("httpx").setLevel(logging.WARNING)
    out = out or sys.stdout
    try:
        server, token = resolve_connection(arguments.server)
        client = Client(server, token, accept_language(os.environ))
        _RUN[arguments.command](client, Console(out, arguments, read, client), arguments)
    except ChatProblem as problem:
        print(problem, file=sys.stderr)
        return int(problem.status)
    except KeyboardInterrupt:
        return int(Exit.CANCELLED)
    return int(Exit.ANSWERED)
