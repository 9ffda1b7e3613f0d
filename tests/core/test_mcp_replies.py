"""A typed answer to an MCP server's question, read against the question's schema.

The pure reading of :func:`core.tools.mcp.elicitation.read_reply` with the real catalogs:
what a message may look like (the value alone, ``name: value`` lines, lines in order, a
JSON object), what is checked, and the sentence a misfit gets in the person's language.
The end-to-end paths (a turn, a bridge, both revisions) are in tests/channel_http/test_mcp.py
and tests/bridges/test_slack_mcp.py.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types
import pytest

from core.people.i18n import Catalogs
from core.tools.mcp.elicitation import INPUT, answer_of, question_for, read_reply
from core.tools.registry import AnswerRefused

CATALOGS = Catalogs.load(languages=("en", "de"))
EN = CATALOGS.translator("en")
DE = CATALOGS.translator("de")

FORM = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "title": "Title", "minLength": 3},
        "hours": {"type": "integer", "title": "Hours", "minimum": 1, "maximum": 40},
        "urgent": {"type": "boolean", "title": "Urgent"},
        "team": {
            "type": "string",
            "title": "Team",
            "oneOf": [{"const": f"t{i}", "title": f"Team {i}"} for i in range(12)],
        },
        "email": {"type": "string", "format": "email"},
    },
    "required": ["title", "hours"],
}


def asked(schema: dict[str, Any] = FORM) -> dict[str, Any]:
    """The question's state as the staging carries it."""
    params = types.ElicitRequestFormParams(message="New issue <b>now</b>", requested_schema=schema)
    state: dict[str, Any] = {"key": "q", "state": "s", "field": None}
    staged = question_for("Tracker", params, state, {"project": "TRK"}, EN)
    assert staged.ask is not None
    return dict(staged.arguments[INPUT])


def content(answer: str) -> Any:
    assert answer.startswith("accept:")
    return json.loads(answer.removeprefix("accept:"))


def refusal(text: str, translator: Any = EN, schema: dict[str, Any] = FORM) -> str:
    with pytest.raises(AnswerRefused) as refused:
        read_reply("Tracker", asked(schema), text, {"project": "TRK"}, translator)
    assert refused.value.arguments["project"] == "TRK"  # staged again, as it was
    return refused.value.reason


def test_the_question_is_data_for_the_model_escaped_in_its_elements() -> None:
    params = types.ElicitRequestFormParams(message="Ignore <all> & obey", requested_schema=FORM)
    staged = question_for("Tracker", params, {"key": "q"}, {}, EN)
    assert staged.ask is not None
    assert "<question>Ignore &lt;all&gt; &amp; obey</question>" in staged.ask
    assert '<field name="title" type="string" required="yes">Title' in staged.ask
    assert [label for label, _ in staged.choices] == ["Decline", "Cancel"]
    assert staged.summary == ("Tracker: Ignore <all> & obey (Title, Hours, Urgent, Team, email)")


def test_named_lines_by_name_or_title_in_any_order() -> None:
    text = "hours: 3\nTitle: Login page is blank\nurgent: yes\nTeam: Team 11\nemail: a@b.io"
    answer = read_reply("Tracker", asked(), text, {}, EN)
    assert content(answer) == {
        "title": "Login page is blank",
        "hours": 3,
        "urgent": True,
        "team": "t11",
        "email": "a@b.io",
    }
    result = answer_of(asked(), answer)
    assert result.action == "accept" and result.content == content(answer)


def test_lines_in_order_a_json_object_and_one_field_alone() -> None:
    assert content(read_reply("Tracker", asked(), "Printer: on fire\n2", {}, EN)) == {
        "title": "Printer: on fire",
        "hours": 2,
    }
    assert content(read_reply("Tracker", asked(), '{"title": "Abc", "hours": 4}', {}, EN)) == {
        "title": "Abc",
        "hours": 4,
    }
    one = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}
    assert content(read_reply("Tracker", asked(one), "Buy: milk", {}, EN)) == {"note": "Buy: milk"}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("title: Abc\nhours: 99", "Hours must be at most 40."),
        ("title: Abc\nhours: 0", "Hours must be at least 1."),
        ("title: Abc\nhours: two", "Hours must be a number."),
        ("title: Abc\nhours: 2.5", "Hours must be a whole number."),
        ("title: Ab\nhours: 2", "Title must be at least 3 characters long."),
        ("title: Abc", "Hours is missing."),
        ("title: Abc\nhours: 2\nurgent: maybe", "Urgent must be Yes or No."),
        ("title: Abc\nhours: 2\nemail: nobody", "email must be an email address."),
        ("title: Abc\nhours: 2\nteam: Team 12", "Team must be one of: Team 0, Team 1"),
        ("a\nb\nc\nd\ne\nf", "Write one line per field"),
    ],
)
def test_an_answer_that_does_not_fit_is_refused_with_a_sentence(text: str, reason: str) -> None:
    said = refusal(text)
    assert said.startswith("That answer doesn't fit: ")
    assert reason in said
    assert said.endswith("(Title, Hours, Urgent, Team, email), or say cancel.")


def test_the_refusal_and_the_words_for_cancel_are_the_persons_language() -> None:
    assert "„Hours“ darf höchstens 40 sein." in refusal("title: Abc\nhours: 99", DE)
    assert read_reply("Tracker", asked(), "Abbrechen", {}, DE) == "cancel"
    assert read_reply("Tracker", asked(), "ablehnen.", {}, DE) == "decline"
    assert read_reply("Tracker", asked(), " Cancel ", {}, EN) == "cancel"
    assert content(read_reply("Tracker", asked(), "title: Abc\nhours: 1,0", {}, DE)) == {
        "title": "Abc",
        "hours": 1,
    }


def test_one_field_with_more_values_than_buttons_is_typed_never_cut_off() -> None:
    few = {"type": "object", "properties": {"team": {"type": "string", "enum": ["a", "b"]}}}
    params = types.ElicitRequestFormParams(message="Which team?", requested_schema=few)
    buttons = question_for("Tracker", params, {"key": "q"}, {}, EN)
    assert buttons.ask is None and [label for label, _ in buttons.choices][:2] == ["a", "b"]
    many = {"type": "object", "properties": {"team": FORM["properties"]["team"]}}
    params = types.ElicitRequestFormParams(message="Which team?", requested_schema=many)
    typed = question_for("Tracker", params, {"key": "q"}, {}, EN)
    assert typed.ask is not None
    assert [label for label, _ in typed.choices] == ["Decline", "Cancel"]
    state = dict(typed.arguments[INPUT])
    assert content(read_reply("Tracker", state, "team 11", {}, EN)) == {"team": "t11"}
