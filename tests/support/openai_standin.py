"""The tests' OpenAI-protocol stand-in: the shipped scripted model's (:mod:`dev_model.openai`)."""

from __future__ import annotations

from dev_model.openai import CompletionScript, OpenAIStandIn, completion_echo

__all__ = ["CompletionScript", "OpenAIStandIn", "completion_echo"]
