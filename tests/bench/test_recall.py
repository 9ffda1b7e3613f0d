"""bench/recall.py's ``embedded:DIR`` data set, on a tiny corpus of generated vectors."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import numpy as np
import pytest

from bench.recall import Embedded, _timed, bench_one

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

DIM = 12


def _corpus(root: Path, person: int = 40) -> Embedded:
    rng = np.random.default_rng(0)
    for name, rows in (("person", person), ("other", 8), ("near", 6), ("random", 6)):
        block = rng.standard_normal((rows, DIM)).astype(np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        np.save(root / f"{name}.npy", block)
    return Embedded.load(root)


def _args() -> argparse.Namespace:
    return argparse.Namespace(
        dim=768,
        queries=5,
        warmup=2,
        budget_s=60.0,
        optimize=True,
        merge_above=0,
        search_ef=32,
        index_every=10,
    )


async def test_an_embedded_corpus_is_stored_in_its_own_dimension_and_searched(
    tmp_path: Path,
) -> None:
    corpus = _corpus(tmp_path)

    result = await bench_one("edge", 30, _args(), f"embedded:{tmp_path}", corpus)

    assert "skipped" not in result
    assert (result["data"], result["dim"], result["data_dir"]) == ("embedded", DIM, str(tmp_path))
    assert result["search"]["p50_ms"] > 0
    assert result["search"]["first_ms"] > 0
    assert 0 < result["recall_random"] <= 1
    assert 0 < result["recall_near"] <= 1
    assert len(result["load"]) == 2


async def test_a_size_beyond_the_corpus_is_skipped(tmp_path: Path) -> None:
    corpus = _corpus(tmp_path, person=10)

    result = await bench_one("edge", 1000, _args(), f"embedded:{tmp_path}", corpus)

    assert result["skipped"] == "the corpus holds 10 points for the person"


def test_a_folder_without_the_corpus_files_names_what_is_missing(tmp_path: Path) -> None:
    np.save(tmp_path / "person.npy", np.ones((3, DIM), dtype=np.float32))

    with pytest.raises(ValueError, match=r"other\.npy, near\.npy, random\.npy"):
        Embedded.load(tmp_path)


async def test_the_warm_up_reads_are_not_counted_but_the_first_is_reported() -> None:
    calls: list[float] = []

    async def work() -> None:
        calls.append(0.0)
        if len(calls) == 1:  # a cold first read, far slower than the rest
            await asyncio.sleep(0.3)

    timed = await _timed(work, runs=5, warmup=3)

    assert len(calls) == 8
    assert timed["first_ms"] >= 300
    assert timed["p95_ms"] < timed["first_ms"]
