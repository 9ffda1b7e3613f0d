"""A system package a test needs (Chromium, PostgreSQL, HAProxy) and this machine lacks.

``scripts/test`` installs Debian's packages as root. Elsewhere a test needing a missing one
is skipped, saying which and how to get it, and ``scripts/test`` lists the skips at the end;
in CI (``CI=true``) the same absence fails the test, as a setup fault must.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

__all__ = ["missing"]


def missing(reason: str) -> NoReturn:
    """Skip the test for ``reason`` (a sentence naming the package), or fail it in CI."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: a missing system package fails the run)", pytrace=False)
    pytest.skip(reason)
