"""An MCP server's question to the person, as a staged ``pending`` with choices.

On 2026-07-28 a tool answers ``input_required`` with elicitation requests and an opaque
``requestState``. :func:`question_of` turns the first request into
:class:`~core.tools.registry.InputRequired`: the call is staged in the confirmations store
(shared across instances, single use, expiring) with the state in its arguments, and
:func:`responses_for` builds the ``inputResponses`` the retry carries once the person chose.

- A form whose one field is a boolean: Yes / No; an enum (or ``oneOf`` of ``const`` with
  ``title``): one choice per value with its title. Decline and Cancel are always offered.
- A form with no fields: Accept. Free-text fields can't be answered with buttons: the model
  is told the question, to ask the person in the conversation.
- URL mode: a ``login`` link naming the host, and the choices Done / Decline / Cancel.

Exceptions::

    ToolError (core.tools.registry)
    └── InputRequired        what the server asks, staged with its choices
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import mcp_types as types
import msgspec

from core.tools.registry import InputRequired, ToolError, cap

if TYPE_CHECKING:
    from core.people.i18n import Translator

__all__ = ["ANSWER", "INPUT", "answer_of", "question_for", "question_of", "responses_for"]

#: The argument a staged call's chosen value arrives in.
ANSWER: Final = "__mcp_answer"
#: The argument a staged question's state travels in: {key, state, field}.
INPUT: Final = "__mcp_input"
_MAX_CHOICES: Final = 10


def question_of(
    server_title: str,
    result: types.InputRequiredResult,
    arguments: Mapping[str, Any],
    translator: Translator,
) -> InputRequired:
    """The staging for what ``result`` asks; ToolError for a question buttons can't answer."""
    requests = result.input_requests or {}
    if len(requests) != 1:
        raise ToolError(
            f"{server_title} asked {len(requests)} questions at once, which Mercury can't put "
            "to the person; tell them the tool can't be used from here."
        )
    ((key, request),) = requests.items()
    if not isinstance(request, types.ElicitRequest):
        raise ToolError(
            f"{server_title} asked for {request.method}, which Mercury doesn't provide; "
            "tell the person the tool can't be used from here."
        )
    state: dict[str, Any] = {"key": key, "state": result.request_state, "field": None}
    return question_for(server_title, request.params, state, arguments, translator)


def question_for(
    server_title: str,
    params: types.ElicitRequestParams,
    state: dict[str, Any],
    arguments: Mapping[str, Any],
    translator: Translator,
) -> InputRequired:
    """The staging for one question; ``state`` travels in the staged arguments (``field``
    and ``url`` are filled in here)."""
    ends = [(translator.gettext("Decline"), "decline"), (translator.gettext("Cancel"), "cancel")]
    if isinstance(params, types.ElicitRequestURLParams):
        state["url"] = True
        host = urllib.parse.urlsplit(params.url).hostname or params.url
        summary = cap(f"{server_title}: {params.message} ({host})", 300)
        return InputRequired(
            summary,
            [(translator.gettext("Done"), "accept"), *ends],
            {**arguments, INPUT: state},
            link=(f"{server_title} ({host})", params.url),
        )
    schema = params.requested_schema or {}
    properties = schema.get("properties") or {}
    message = cap(f"{server_title}: {params.message}", 300)
    if not properties:
        return InputRequired(
            message, [(translator.gettext("Accept"), "accept"), *ends], {**arguments, INPUT: state}
        )
    if len(properties) == 1:
        ((field, spec),) = properties.items()
        options = _options(spec, translator)
        if options is not None:
            state["field"] = field
            return InputRequired(message, [*options, *ends], {**arguments, INPUT: state})
    fields = ", ".join(
        f"{name} ({(spec or {}).get('title') or (spec or {}).get('type') or 'text'})"
        for name, spec in properties.items()
    )
    raise ToolError(
        f"{server_title} asks the person: {cap(params.message, 300)} It needs {fields}, which "
        "can't be answered with buttons: ask the person in the conversation, then call the "
        "tool again with what they said in its arguments."
    )


def _options(spec: Mapping[str, Any], translator: Translator) -> list[tuple[str, str]] | None:
    """(label, value) per choice of a boolean or enumerated field; None for free text."""
    encode = msgspec.json.encode
    if spec.get("type") == "boolean":
        return [
            (translator.gettext("Yes"), "accept:" + encode(True).decode()),
            (translator.gettext("No"), "accept:" + encode(False).decode()),
        ]
    one_of = spec.get("oneOf") or spec.get("anyOf")
    if isinstance(one_of, list) and one_of and all("const" in o for o in one_of):
        items = [(str(o.get("title") or o["const"]), o["const"]) for o in one_of]
    elif isinstance(spec.get("enum"), list) and spec["enum"]:
        titles = spec.get("enumNames") or spec["enum"]
        items = [(str(t), v) for t, v in zip(titles, spec["enum"], strict=False)]
    else:
        return None
    return [(cap(label, 60), "accept:" + encode(value).decode()) for label, value in items][
        :_MAX_CHOICES
    ]


def responses_for(
    state: Mapping[str, Any], answer: str | None
) -> tuple[dict[str, types.ElicitResult], str | None]:
    """The ``inputResponses`` and ``requestState`` a retry carries for ``answer``."""
    request_state = state.get("state")
    responses = {str(state.get("key")): answer_of(state, answer)}
    return responses, request_state if isinstance(request_state, str) else None


def answer_of(state: Mapping[str, Any], answer: str | None) -> types.ElicitResult:
    """What the person's choice ``answer`` says to the server's question."""
    field = state.get("field")
    if answer is None or answer == "cancel":
        result = types.ElicitResult(action="cancel")
    elif answer == "decline":
        result = types.ElicitResult(action="decline")
    elif answer.startswith("accept:") and field:
        value = msgspec.json.decode(answer.removeprefix("accept:"))
        result = types.ElicitResult(action="accept", content={str(field): value})
    elif state.get("url"):
        result = types.ElicitResult(action="accept")
    else:
        result = types.ElicitResult(action="accept", content={})
    return result
