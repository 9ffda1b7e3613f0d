"""The wiki on a folder several instances share, with their writes serialized per note."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.workspace.wiki import Vault
from tests.support.state import StateBackend

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

ALICE = "static:alice"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_appends_through_two_instances_on_one_folder_all_land(
    tmp_path: Path,
    shared_state: StateBackend,
) -> None:
    folder = tmp_path / "shared-vault"
    a = Vault(folder, db=await shared_state.open())
    b = Vault(folder, db=await shared_state.open())
    await a.init()
    await b.init()

    await asyncio.gather(
        *(
            (a if n % 2 else b).append_note(ALICE, "personal/notes/log.md", f"line {n}")
            for n in range(40)
        )
    )

    content = await b.read(ALICE, "personal/notes/log.md")
    assert content is not None
    assert sorted(content.splitlines()) == sorted(f"line {n}" for n in range(40))


async def test_a_note_written_through_one_instance_is_read_through_the_other_at_once(
    tmp_path: Path,
    shared_state: StateBackend,
) -> None:
    folder = tmp_path / "shared-vault"
    a = Vault(folder, db=await shared_state.open())
    b = Vault(folder, db=await shared_state.open())
    await a.init()

    await a.write_note(ALICE, "personal/notes/plan.md", "the plan")

    assert "personal/notes/plan.md" in await b.list(ALICE)
    assert await b.read(ALICE, "personal/notes/plan.md") == "the plan"
