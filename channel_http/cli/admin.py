"""The space commands of ``mercury-http``: spaces, preferences, mutes, settings, pairing and
usage; and ``connections``, the MCP servers the caller has signed in to.

Each talks to a running server over its HTTP routes (``/spaces…``, ``/pairing…``,
``/me/connections…``) with the
caller's token, found as ``mercury-http chat`` finds it
(:func:`~channel_http.cli.chat.resolve_connection`), so the server decides who may do what
by the same rule its routes and the agent's tools use: a refusal is the server's sentence,
printed as it came. ``--json`` prints the server's answer as one JSON object, for scripts.

Exit statuses (:class:`~channel_http.cli.chat.Exit`): 0 done, 1 the server failed or
can't be reached, 2 a usage error or a request the server refused as wrong (400, 404), 4
refused (401, 403, 429). Deleting a space and muting someone ask first on a terminal; with
no terminal they need ``--yes``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Any, Final, TextIO
from urllib.parse import quote

import httpx

from channel_http.cli.chat import ChatProblem, Exit, refusal, resolve_connection

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


# ---------------------------------------------------------------------------- the parser


def add_commands(commands: Any) -> None:
    """Declare the space commands on the ``mercury-http`` sub-command parser."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--server", metavar="URL", help="the server (as for chat)")
    common.add_argument(
        "--json", action="store_true", help="print the server's answer as JSON, for scripts"
    )
    # The same options on an action (``spaces list --json``), not overriding what was
    # given before it (``spaces --json list``).
    nested = argparse.ArgumentParser(add_help=False)
    nested.add_argument("--server", metavar="URL", default=argparse.SUPPRESS, help="the server")
    nested.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print JSON, for scripts"
    )
    asking = argparse.ArgumentParser(add_help=False)
    asking.add_argument(
        "--yes",
        action="store_true",
        help="don't ask for a confirmation (needed without a terminal)",
    )
    epilog = (
        "The token and server come as for chat (MERCURY_TOKEN, MERCURY_SERVER or the user "
        "config file). Exit statuses: 0 done, 1 the server failed or can't be reached, 2 usage "
        "error or a request refused as wrong (400, 404), 4 refused (401, 403, 429)."
    )

    spaces = commands.add_parser(
        "spaces",
        parents=[common],
        help="list your spaces, show one, or delete one",
        description="Without arguments, the spaces you take part in with your role. "
        "'show SPACE' gives its members and roles; 'delete SPACE' forgets it (asks first).",
        epilog=epilog,
    )
    spaces_actions = spaces.add_subparsers(dest="action")
    spaces_actions.add_parser("list", parents=[nested], help="the spaces you take part in")
    show = spaces_actions.add_parser("show", parents=[nested], help="one space and its members")
    show.add_argument("space", help="the space id, e.g. slack:C0123")
    forget = spaces_actions.add_parser(
        "delete", parents=[nested, asking], help="forget a space (admins)"
    )
    forget.add_argument("space")

    prefs = commands.add_parser(
        "prefs",
        parents=[common],
        help="a space's preferences",
        description="List, read, set or delete a space's preferences. 'set' takes the rest of "
        "the line as the value.",
        epilog=epilog,
    )
    prefs_actions = prefs.add_subparsers(dest="action", required=True)
    listed = prefs_actions.add_parser("list", parents=[nested], help="every preference")
    listed.add_argument("space")
    got = prefs_actions.add_parser("get", parents=[nested], help="one preference")
    got.add_argument("space")
    got.add_argument("key")
    put = prefs_actions.add_parser("set", parents=[nested], help="set a preference")
    put.add_argument("space")
    put.add_argument("key")
    put.add_argument("value", nargs="+", help="the value (the rest of the line)")
    dropped = prefs_actions.add_parser(
        "delete", parents=[nested, asking], help="delete a preference"
    )
    dropped.add_argument("space")
    dropped.add_argument("key")

    mute = commands.add_parser(
        "mute",
        parents=[common, asking],
        help="mute a person in a space (shows the reminder, then asks)",
        description="Mute PERSON in SPACE for DURATION (10m, 1h, 24h, 7d). The server's "
        "reminder of what muting does is shown first, then you confirm.",
        epilog=epilog,
    )
    mute.add_argument("space")
    mute.add_argument("person", help="slack:U0123, static:alice or people:alice")
    mute.add_argument("duration", help="10m, 1h, 24h, 7d (1 minute to 30 days)")
    mute.add_argument("--reason", help="why, kept with the mute")
    unmute = commands.add_parser(
        "unmute", parents=[common], help="lift a person's mute", epilog=epilog
    )
    unmute.add_argument("space")
    unmute.add_argument("person")
    mutes = commands.add_parser(
        "mutes", parents=[common], help="the mutes in force in a space", epilog=epilog
    )
    mutes.add_argument("space")

    settings = commands.add_parser(
        "settings",
        parents=[common],
        help="a space's runtime settings",
        description="SPACE alone lists the settings with where each value comes from; KEY "
        "shows one; KEY VALUE sets it; --unset KEY falls back to the file or the default.",
        epilog=epilog,
    )
    settings.add_argument("space")
    settings.add_argument("key", nargs="?")
    settings.add_argument("value", nargs="*", help="the new value (the rest of the line)")
    settings.add_argument(
        "--unset",
        metavar="KEY",
        nargs="?",
        const="",
        help="remove the space's own value of KEY (settings SPACE --unset KEY, or settings "
        "SPACE KEY --unset)",
    )

    pairing = commands.add_parser(
        "pairing",
        parents=[common],
        help="people waiting to be let in (admins)",
        description="The pairing requests of people who wrote to the assistant and are not "
        "known yet; approve or deny one by its code.",
        epilog=epilog,
    )
    pairing_actions = pairing.add_subparsers(dest="action")
    pairing_actions.add_parser("list", parents=[nested], help="the pending requests")
    for verb in ("approve", "deny"):
        decided = pairing_actions.add_parser(verb, parents=[nested], help=f"{verb} a request")
        decided.add_argument("code")
    pairing_actions.add_parser("admitted", parents=[nested], help="the accounts let in")
    revoke = pairing_actions.add_parser(
        "revoke", parents=[nested], help="let an approved account out again"
    )
    revoke.add_argument("account", help="the account as listed, such as telegram:123456")

    usage = commands.add_parser(
        "usage",
        parents=[common],
        help="the tokens the model used: yours, a space's, or everyone's",
        description="Your own tokens by day and model (GET /me/usage); with --space, a "
        "space's by person and model (its admins); with --everyone (or --person, --model), "
        "everyone's by person, space and model (administrators).",
        epilog=epilog,
    )
    usage.add_argument(
        "--period", choices=("today", "7d", "30d", "month"), help="the days covered (30d)"
    )
    usage.add_argument("--by", help="what rows are grouped by: day, person, space, model")
    usage.add_argument("--space", help="one space's usage, e.g. slack:C0123")
    usage.add_argument("--everyone", action="store_true", help="everyone's usage (admins)")
    usage.add_argument("--person", help="with --everyone: one person (a person key)")
    usage.add_argument("--model", help="with --everyone: one model")
    usage.add_argument(
        "--allowances",
        action="store_true",
        help="the named people's own token allowances (admins)",
    )
    usage.add_argument(
        "--set-allowance",
        nargs=3,
        metavar=("PERSON", "WINDOW", "TOKENS"),
        help="give one person their own allowance: day or month, in tokens (0: none; admins)",
    )
    usage.add_argument(
        "--drop-allowance",
        nargs=2,
        metavar=("PERSON", "WINDOW"),
        help="drop a person's runtime allowance: the file's, else everyone's, applies (admins)",
    )

    connections = commands.add_parser(
        "connections",
        parents=[common],
        help="the MCP servers you're signed in to, or sign out of one",
        description="Without arguments, the MCP servers you have signed in to, with the "
        "scopes granted and when the access lapses (it is renewed before). 'remove SERVER' "
        "signs you out of it: the next use of its tools asks you to sign in again.",
        epilog=epilog,
    )
    connections_actions = connections.add_subparsers(dest="action")
    connections_actions.add_parser("list", parents=[nested], help="your connections")
    removed = connections_actions.add_parser(
        "remove", parents=[nested], help="sign out of a server"
    )
    removed.add_argument("name", metavar="SERVER", help="the server's name, as listed")


# ----------------------------------------------------------------------------- the wire


class Client:
    """The server, with the caller's token; answers are the JSON objects of the routes."""

    def __init__(self, server: str, token: str) -> None:
        self.http = httpx.Client(
            base_url=server,
            headers={"authorization": f"Bearer {token}", "user-agent": "mercury-http-admin"},
            timeout=30.0,
        )

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = self.http.request(method, path, json=body)
        except httpx.HTTPError as error:
            raise ChatProblem(
                f"The server at {self.http.base_url} can't be reached: {error}", Exit.FAILED
            ) from None
        if response.status_code >= 400:
            raise refusal(response)
        try:
            answer = response.json()
        except ValueError:
            raise ChatProblem("The server's answer is not JSON.", Exit.FAILED) from None
        if not isinstance(answer, dict):
            raise ChatProblem("The server's answer is not a JSON object.", Exit.FAILED)
        return answer


def _segment(value: str) -> str:
    """One path segment: a space id (``slack:C1``) or a person keeps its colons."""
    return quote(value, safe=":@")


# ---------------------------------------------------------------------------- the commands


class Console:
    """Where a command writes, and how it asks (a terminal, or ``--yes``)."""

    def __init__(self, out: TextIO, arguments: argparse.Namespace, read: Callable[[str], str]):
        self.out = out
        self.json = bool(arguments.json)
        self.yes = bool(getattr(arguments, "yes", False))
        self._read = read
        self._interactive = _is_tty(sys.stdin)

    def say(self, line: str = "") -> None:
        print(line, file=self.out)

    def answer(self, answer: dict[str, Any], human: Callable[[dict[str, Any]], None]) -> None:
        if self.json:
            print(json.dumps(answer, ensure_ascii=False), file=self.out)
        else:
            human(answer)

    def confirm(self, question: str, expected: str = "y") -> bool:
        """True once confirmed: ``--yes``, or the expected answer typed on a terminal."""
        if self.yes:
            return True
        if not self._interactive:
            raise ChatProblem(
                "There is no terminal to ask on: add --yes to go ahead without asking.",
                Exit.USAGE,
            )
        try:
            typed = self._read(question)
        except EOFError:
            return False
        return typed.strip().lower() == expected.lower()


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
                console.say("You take part in no space yet.")
            for space in spaces:
                title = space.get("title") or ("direct messages" if space.get("isDm") else "")
                console.say(f"{space['spaceId']}\t{space['role']}\t{title}".rstrip())

        console.answer(answer, listed)
        return
    space = _segment(arguments.space)
    if action == "show":
        answer = client.call("GET", f"/spaces/{space}")

        def shown(answer: dict[str, Any]) -> None:
            about = answer.get("space") or {}
            console.say(f"{about.get('spaceId')}  {about.get('title') or ''}".rstrip())
            console.say(f"platform: {about.get('platform')}, your role: {about.get('role')}")
            permissions = ", ".join(about.get("permissions") or []) or "none"
            console.say(f"you may: {permissions}")
            members = answer.get("members") or []
            console.say(f"members ({len(members)}):")
            for member in members:
                console.say(f"  {_who(member, 'id')}\t{member.get('role')}")

        console.answer(answer, shown)
        return
    # delete
    if not console.confirm(
        f"Forget the space {arguments.space}: its members, preferences, mutes and settings? "
        "Type its id to confirm: ",
        expected=arguments.space,
    ):
        raise ChatProblem("Nothing was deleted.", Exit.USAGE)
    answer = client.call("DELETE", f"/spaces/{space}")
    console.answer(answer, lambda _: console.say(f"Forgot the space {arguments.space}."))


def _prefs(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    base = f"/spaces/{_segment(arguments.space)}/prefs"
    if arguments.action == "list":

        def listed(answer: dict[str, Any]) -> None:
            preferences = answer.get("preferences") or []
            if not preferences:
                console.say("The space has no preferences.")
            for preference in preferences:
                console.say(f"{preference['key']} = {preference['value']}")

        console.answer(client.call("GET", base), listed)
    elif arguments.action == "get":
        answer = client.call("GET", f"{base}/{_segment(arguments.key)}")
        console.answer(answer, lambda a: console.say(str(a["preference"]["value"])))
    elif arguments.action == "set":
        value = " ".join(arguments.value)
        answer = client.call("PUT", f"{base}/{_segment(arguments.key)}", {"value": value})
        verb = "Added" if answer.get("created") else "Replaced"
        console.answer(answer, lambda _: console.say(f"{verb} {arguments.key} = {value}"))
    else:
        if not console.confirm(f"Delete the preference {arguments.key}? [y/N] "):
            raise ChatProblem("Nothing was deleted.", Exit.USAGE)
        answer = client.call("DELETE", f"{base}/{_segment(arguments.key)}")
        console.answer(answer, lambda _: console.say(f"Deleted {arguments.key}."))


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
    if not console.confirm("Mute? [y/N] "):
        raise ChatProblem("Nobody was muted.", Exit.USAGE)
    answer = client.call("POST", path, {**body, "confirm": True})

    def muted(answer: dict[str, Any]) -> None:
        mute = answer.get("mute") or {}
        console.say(f"Muted {_who(mute)} until {local_time(mute.get('until'))}.")

    console.answer(answer, muted)


def _unmute(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    path = f"/spaces/{_segment(arguments.space)}/mutes/{_segment(arguments.person)}"
    answer = client.call("DELETE", path)
    console.answer(answer, lambda a: console.say(f"Unmuted {a.get('unmuted')}."))


def _mutes(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    answer = client.call("GET", f"/spaces/{_segment(arguments.space)}/mutes")

    def listed(answer: dict[str, Any]) -> None:
        mutes = answer.get("mutes") or []
        if not mutes:
            console.say("Nobody is muted in this space.")
        for mute in mutes:
            reason = f" ({mute['reason']})" if mute.get("reason") else ""
            until = local_time(mute["until"])
            console.say(f"{_who(mute)}\tuntil {until}\tby {mute['by']}{reason}")

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


def _setting_line(setting: dict[str, Any]) -> str:
    value = json.dumps(setting.get("value"), ensure_ascii=False)
    return f"{setting['key']} = {value}\t({setting.get('source')})"


def _settings(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    base = f"/spaces/{_segment(arguments.space)}/settings"
    if arguments.key is None and arguments.unset is None:
        if arguments.value:
            raise ChatProblem("Name the setting: settings SPACE KEY [VALUE].", Exit.USAGE)

        def every(answer: dict[str, Any]) -> None:
            for setting in answer.get("settings") or []:
                console.say(_setting_line(setting))

        console.answer(client.call("GET", base), every)
        return
    if arguments.unset is not None:
        key = arguments.unset or arguments.key
        if arguments.value or (arguments.unset and arguments.key is not None) or not key:
            raise ChatProblem("--unset takes one KEY and no value.", Exit.USAGE)
        answer = client.call("DELETE", f"{base}/{_segment(key)}")
        console.answer(answer, lambda a: console.say(_setting_line(a["setting"])))
        return
    listed = client.call("GET", base)
    current = {s.get("key"): s for s in listed.get("settings") or [] if isinstance(s, dict)}
    if arguments.key not in current:
        known = ", ".join(sorted(str(k) for k in current))
        raise ChatProblem(
            f"There is no setting {arguments.key}; the settings: {known}.", Exit.USAGE
        )
    if not arguments.value:
        console.answer(
            {"ok": True, "spaceId": listed.get("spaceId"), "setting": current[arguments.key]},
            lambda a: console.say(_setting_line(a["setting"])),
        )
        return
    value = _typed(" ".join(arguments.value), current[arguments.key].get("value"))
    answer = client.call("PUT", f"{base}/{_segment(arguments.key)}", {"value": value})
    console.answer(answer, lambda a: console.say(_setting_line(a["setting"])))


def _pairing(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    action = arguments.action or "list"
    if action == "list":

        def listed(answer: dict[str, Any]) -> None:
            pairings = answer.get("pairings") or []
            if not pairings:
                console.say("Nobody is waiting.")
            for request in pairings:
                who = _who(request, "account")
                console.say(
                    f"{request['code']}\t{request['platform']}\t{who}\t"
                    f"expires {local_time(request['expiresAt'])}"
                )

        console.answer(client.call("GET", "/pairing"), listed)
        return
    if action == "admitted":

        def admitted(answer: dict[str, Any]) -> None:
            accounts = answer.get("accounts") or []
            if not accounts:
                console.say("Nobody was let in.")
            for account in accounts:
                console.say(
                    f"{account['account']}\t{account['name'] or '-'}\t"
                    f"by {account['approvedBy']}\t{account['approvedAt']}"
                )

        console.answer(client.call("GET", "/pairing/admitted"), admitted)
        return
    if action == "revoke":
        answer = client.call("DELETE", f"/pairing/admitted/{_segment(arguments.account)}")
        console.answer(answer, lambda _: console.say(f"Revoked {arguments.account}."))
        return
    answer = client.call("POST", f"/pairing/{_segment(arguments.code)}/{action}")
    done = "Approved" if action == "approve" else "Denied"
    console.answer(answer, lambda _: console.say(f"{done} {arguments.code}."))


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
        console.say(f"{answer['from']} to {answer['to']} (UTC)")
        for row in answer.get("rows") or []:
            person = row.get("person")
            where = [row.get("day"), person and _who(person, "id"), row.get("model")]
            if "spaceId" in row:
                where.insert(2, row["spaceId"] or "(own)")
            label = "\t".join(str(part) for part in where if part)
            console.say(f"{label}\t{_tokens(row)}")
        console.say(f"total\t{_tokens(answer['total'])}")

    console.answer(client.call("GET", path), shown)


def _allowances(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    def line(allowance: dict[str, Any]) -> str:
        return (
            f"{_who(allowance['person'], 'id')}\t{allowance['window']}\t"
            f"{allowance['tokens']} tokens\t({allowance['source']})"
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
            console.say(line(left) if left else f"{person}\t{window}\teveryone's allowance")

        console.answer(client.call("DELETE", path), dropped)
        return

    def listed(answer: dict[str, Any]) -> None:
        found = answer.get("allowances") or []
        if not found:
            console.say("No one has an allowance of their own.")
        for allowance in found:
            console.say(line(allowance))

    console.answer(client.call("GET", "/usage/allowances"), listed)


def _tokens(sums: dict[str, Any]) -> str:
    return (
        f"{sums['input']} in, {sums['output']} out, {sums['cached']} cached, "
        f"{sums['calls']} call{'s' if sums['calls'] != 1 else ''}"
    )


def _connections(client: Client, console: Console, arguments: argparse.Namespace) -> None:
    if (arguments.action or "list") == "list":

        def listed(answer: dict[str, Any]) -> None:
            connections = answer.get("connections") or []
            if not connections:
                console.say("You aren't signed in to any MCP server.")
            for connection in connections:
                scopes = " ".join(connection.get("scopes") or []) or "-"
                lapses = connection.get("expiresAt") or "never"
                console.say(
                    f"{connection['server']}\t{connection.get('title') or ''}\t"
                    f"{connection.get('issuer') or '-'}\t{scopes}\tlapses {lapses}"
                )

        console.answer(client.call("GET", "/me/connections"), listed)
        return
    answer = client.call("DELETE", f"/me/connections/{_segment(arguments.name)}")
    console.answer(answer, lambda _: console.say(f"Signed out of {arguments.name}."))


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
        client = Client(server, token)
        _RUN[arguments.command](client, Console(out, arguments, read), arguments)
    except ChatProblem as problem:
        print(problem, file=sys.stderr)
        return int(problem.status)
    except KeyboardInterrupt:
        return int(Exit.CANCELLED)
    return int(Exit.ANSWERED)
