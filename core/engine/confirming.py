"""Confirming a staged action: the token taken, the action run, and what the turn says next.

:class:`Confirmer` serves every way of confirming, ``POST /confirm``, a bare token sent as
a turn's text, and a turn's text that answers a question a tool asked in the conversation
(a staging taken by the person's next message there); the session manager decides what
follows (a reply, or the model resuming with the action's result).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec

from core.engine import events
from core.engine.confirmations import ChoiceRef, StagedActionSpec
from core.tools.registry import (
    REPLY,
    AnswerRefused,
    InputRequired,
    LoginRequired,
    ToolCallContext,
    ToolError,
    ToolRegistry,
    ToolReply,
)

if TYPE_CHECKING:
    from core.engine.confirmations import ConfirmationStore
    from core.engine.tool_log import ToolLog
    from core.observe.metrics import Metrics

log = logging.getLogger("mercury.sessions")


class Confirmer:
    """Takes a staged action by its token and runs it for the person who staged it."""

    def __init__(
        self,
        *,
        confirmations: ConfirmationStore,
        registry: ToolRegistry,
        tool_log: ToolLog,
        metrics: Metrics | None = None,
    ) -> None:
        self.confirmations = confirmations
        self.registry = registry
        self.tool_log = tool_log
        self.metrics = metrics

    async def resolve(
        self,
        context: ToolCallContext,
        token: str | ChoiceRef | None,
        *,
        reply: str | None = None,
    ) -> tuple[str | None, tuple[str, str] | None, LoginRequired | None, list[events.Event]]:
        """Take and run a staged action: (reply, None, …) or (None, (tool, result), None, …).

        ``token`` is a choice's token, or the choice named by its staging's id (its owner's
        answer from a page that no longer holds the tokens): the same rules either way.

        A reply of None means nothing was pending for this caller and session. The third
        item is set when the action needs a service login that has lapsed since staging.
        When the action, once run, asks the person something (an MCP server's question),
        the question is staged in turn; the fourth item holds the events that show it
        (``pending``, and ``login`` for a link), for the caller to deliver.

        With ``reply`` (the person's message) instead of a token, the staging that message
        answers is taken, if any (a question whose answer is typed), and the message goes
        to the tool as :data:`~core.tools.registry.REPLY` + message. An answer that doesn't
        fit is refused with a sentence for the person and the question staged again.
        """
        shown: list[events.Event] = []
        translator = context.translator
        if reply is not None:
            taken = await self.confirmations.take_reply(context.session_key, context.person.key)
            if taken is None:
                return None, None, None, shown
        else:
            taken = await self.confirmations.take(
                context.session_key, context.person.key, token or ""
            )
        if self.metrics is not None:
            self.metrics.confirmations.labels("expired" if taken is None else "confirmed").inc()
        if taken is None:
            return None, None, None, shown
        refused: str | None = None
        login: LoginRequired | None = None
        offered = await self.registry.offer(context.person, context.space)
        tool_entry = offered.get(taken.tool_name)
        arguments = dict(taken.arguments)
        if tool_entry is None:
            outcome, result = "failed", "the tool is no longer offered"
        else:
            tool = tool_entry[1]
            if tool.choice_argument and reply is not None:
                arguments[tool.choice_argument] = REPLY + reply
            elif tool.choice_argument and taken.choice_value is not None:
                arguments[tool.choice_argument] = taken.choice_value
            try:
                ran = await tool.run(context, arguments)
                outcome, result = "success", ran.text if isinstance(ran, ToolReply) else ran
            except AnswerRefused as again:
                outcome, refused = "failed", again.reason
                result = await self._stage_question(context, taken.tool_name, again, shown)
            except InputRequired as asked:
                outcome = "success"
                result = await self._stage_question(context, taken.tool_name, asked, shown)
            except LoginRequired as required:
                outcome, result, login = "failed", str(required), required
            except ToolError as error:
                outcome, result = "failed", str(error)
            except Exception as error:
                log.exception("confirmed tool %s failed", taken.tool_name)
                outcome, result = "failed", type(error).__name__
        await self.tool_log.record(
            context.person.key,
            context.conversation_id,
            taken.tool_name,
            msgspec.json.encode(arguments).decode(),
            result,
            "success" if outcome == "success" else "failed",
        )
        if login is not None:
            text = translator.gettext("You need to log in to %(service)s first.")
            return text % {"service": login.service}, None, login, shown
        if refused is not None:
            return refused, None, None, shown
        if taken.hands_back:
            how = (
                "Answered by the person's message"
                if reply is not None
                else "Confirmed by the person"
            )
            handed = (taken.tool_name, f"{how}. Result: {result}")
            return None, handed, None, shown
        if outcome == "success":
            return translator.gettext("Confirmed and done."), None, None, shown
        failed = translator.gettext("Confirmed, but it failed: %(error)s") % {"error": result}
        return failed, None, None, shown

    async def cancel(self, context: ToolCallContext, confirmation_id: str) -> bool:
        """Drop a staged action unrun, under the rules of :meth:`resolve`; whether it was
        pending for this caller and session."""
        dropped = await self.confirmations.drop(
            context.session_key, context.person.key, confirmation_id
        )
        if self.metrics is not None:
            self.metrics.confirmations.labels("cancelled" if dropped else "expired").inc()
        return dropped

    async def _stage_question(
        self,
        context: ToolCallContext,
        tool_name: str,
        asked: InputRequired,
        shown: list[events.Event],
    ) -> str:
        """Stage what the confirmed action asks; the events that show it go to ``shown``."""
        staging = await self.confirmations.stage(
            context.session_key,
            context.person.key,
            StagedActionSpec(
                tool_name=tool_name,
                arguments=asked.arguments,
                summary=asked.summary,
                hands_back=True,
            ),
            asked.choices,
            by_reply=asked.ask is not None,
        )
        if self.metrics is not None:
            self.metrics.confirmations.labels("staged").inc()
        if asked.link is not None:
            shown.append(events.Login(service=asked.link[0], url=asked.link[1]))
        shown.append(
            events.Pending(
                command=asked.summary,
                token=staging.token,
                choices=tuple(events.Choice(c.token, c.label) for c in staging.choices),
                confirmation_id=staging.id,
                expires_at=staging.expires_at,
            )
        )
        if asked.ask is not None:
            return asked.ask
        return (
            f"It asks the person: {asked.summary} They have been shown the choices; tell "
            "them briefly, without inventing a token, and wait."
        )
