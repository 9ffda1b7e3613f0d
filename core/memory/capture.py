"""Episodic and semantic capture: the model summarizes recent messages and extracts facts.

A capture runs after a turn once enough new messages exist, and when an idle session is
freed. It writes one episodic point and one semantic point per fact through the
:class:`~core.memory.archive.ArchiveWriter`, so nothing waits on the store. A capture that
fails leaves the session's marker where it was, so the next trigger tries again; it
never surfaces as a turn error.

The primer is the other direction: what a new session is told of the person's memory.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Final

import msgspec

from core.model import ChatMessage, Completion, ModelClient

if TYPE_CHECKING:
    from core.memory import MemoryStore
    from core.memory.archive import ArchiveWriter
    from core.workspace.wiki import Vault

log = logging.getLogger("mercury.capture")

#: The primer's size bound, in characters.
PRIMER_MAX_CHARS: Final = 1500
#: How much of the recent conversation one capture reads.
CAPTURE_MAX_CHARS: Final = 12000
#: How many of a topic's latest values decide its inferred note.
CONSOLIDATION_WINDOW: Final = 3
_SLUG = re.compile(r"[^a-z0-9]+")
_DERIVED = re.compile(rb"^derived_from: (\d{1,9})$", re.MULTILINE)  # int() refuses 4,301+ digits

_INSTRUCTIONS: Final = (
    "You keep the long-term memory of an assistant. Read the conversation below and answer "
    "with one JSON object and nothing else: "
    '{"summary": "<two or three sentences on what was discussed and decided>", '
    '"facts": [{"topic": "<short lowercase topic>", "value": "<what is true about the '
    'person or their work>"}]}. Only facts worth remembering across conversations; '
    "an empty list when there are none."
)
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)


class FactItem(msgspec.Struct, frozen=True):
    topic: str
    value: str


class Extraction(msgspec.Struct, frozen=True):
    summary: str = ""
    facts: tuple[FactItem, ...] = ()


class CaptureFailed(Exception):
    """The model's answer gave no usable summary."""


def parse_extraction(answer: str) -> Extraction:
    """The JSON object in the model's answer, tolerant of text around it."""
    match = _OBJECT.search(answer)
    if match is None:
        raise CaptureFailed("the model's answer holds no JSON object")
    try:
        extraction = msgspec.json.decode(match.group(0), type=Extraction)
    except msgspec.DecodeError as error:
        raise CaptureFailed(f"the model's answer is not a summary object: {error}") from None
    if not extraction.summary.strip():
        raise CaptureFailed("the model's summary is empty")
    return extraction


class Capture:
    """Runs captures and builds primers for one core."""

    def __init__(
        self,
        model: ModelClient,
        archive: ArchiveWriter,
        memory: MemoryStore,
        vault: Vault | None = None,
    ) -> None:
        self.model = model
        self.archive = archive
        self.memory = memory
        self.vault = vault

    async def capture(
        self,
        person_key: str,
        session_key: str,
        messages: Sequence[ChatMessage],
        *,
        answered: Callable[[Completion], None] | None = None,
    ) -> Extraction:
        """Summarize ``messages`` and queue the episode and the facts; raises on failure.

        ``answered`` hears of the model's answer (its tokens) as soon as it came, whether
        or not it holds a usable summary: the call was made either way.
        """
        transcript = _transcript(messages)
        if not transcript:
            return Extraction()
        answer = await self.model.complete(
            [
                ChatMessage(role="system", content=_INSTRUCTIONS),
                ChatMessage(role="user", content=transcript),
            ]
        )
        if answered is not None:
            answered(answer)
        extraction = parse_extraction(answer.text)
        base = {"personKey": person_key, "sessionKey": session_key}
        self.archive.submit("episodic", {**base, "summary": extraction.summary.strip()})
        # A fact the model lists twice in one answer is one observation: stored twice, it
        # would also count twice towards its topic's inferred note.
        seen: set[tuple[str, str]] = set()
        for fact in extraction.facts:
            topic, value = fact.topic.strip().lower()[:100], fact.value.strip()[:1000]
            same = (topic, " ".join(value.casefold().split()))
            if same in seen:
                continue
            seen.add(same)
            if topic and value:
                self.archive.submit(
                    "semantic", {"personKey": person_key, "topic": topic, "value": value}
                )
                await self._consolidate(person_key, topic, value)
        return extraction

    async def _consolidate(self, person_key: str, topic: str, value: str) -> None:
        """Keep ``personal/inferred/<topic>.md`` on the value the latest facts agree on.

        The dominant value among the topic's last three occurrences replaces the note only
        when its count strictly beats the count the note was derived from: never on a tie.
        """
        slug = _SLUG.sub("-", topic).strip("-")[:60]
        if self.vault is None or not slug:
            return
        try:
            stored = await self.memory.facts(person_key, limit=200)
        except Exception as error:  # the archive may not have caught up; next capture will
            log.warning("no consolidation of %r: %r", topic, error)
            return
        latest = [value, *(f.value for f in stored if f.topic == topic)][:CONSOLIDATION_WINDOW]
        dominant, count = Counter(latest).most_common(1)[0]
        note = f"---\ntopic: {topic}\nderived_from: {count}\n---\n{dominant}\n".encode()

        def build(current: bytes | None) -> bytes:
            match = _DERIVED.search(current or b"")
            incumbent = int(match.group(1)) if match else 0
            if current is not None and count <= incumbent:
                return current
            return note

        await self.vault.update_inferred(person_key, f"{slug}.md", build)

    async def primer(self, person_key: str) -> str:
        """What a new session is told of the person's memory; empty when nothing is known."""
        try:
            async with asyncio.timeout(2.0):
                if self.archive.holds_memory_of(person_key):
                    await self.archive.settled(1.0)  # a summary just written belongs in it
                episode = await self.memory.latest_episode(person_key)
                facts = await self.memory.facts(person_key, limit=20)
        except Exception as error:  # memory is enrichment: a session never waits on it
            level = logging.DEBUG if self.archive.explains(error) else logging.WARNING
            log.log(level, "no primer for a new session: %r", error)
            return ""
        parts: list[str] = []
        if facts:
            seen: set[str] = set()
            lines = []
            for fact in facts:
                if fact.topic not in seen:
                    seen.add(fact.topic)
                    lines.append(f"- {fact.topic}: {fact.value}")
            parts.append("Known facts about the person:\n" + "\n".join(lines))
        if episode is not None:
            parts.append("Last conversation, summarized: " + episode.summary)
        if not parts:
            return ""
        text = "What you remember from earlier conversations.\n\n" + "\n\n".join(parts)
        return text if len(text) <= PRIMER_MAX_CHARS else text[: PRIMER_MAX_CHARS - 1] + "…"


def conversational(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The person's and the assistant's words, without tool traffic or instructions."""
    return [
        message
        for message in messages
        if message.role in ("user", "assistant") and message.content.strip()
    ]


def _transcript(messages: Sequence[ChatMessage]) -> str:
    lines = [f"{m.role}: {m.content.strip()}" for m in conversational(messages)]
    text = "\n".join(lines)
    return text[-CAPTURE_MAX_CHARS:]
