"""Recall latency of the memory store adapters at growing archive sizes per person.

For each adapter (Qdrant Edge, qdrant-client local mode) and each size N, a fresh store gets N
verbatim points for the measured person (sessions of 100 messages) plus N/10 for someone else;
Edge's background indexer is left to build its index (``index_s``) and to merge the segments it
built in a child process (``merge_s``); then the reads a turn makes are timed: ``search`` (the
recall tool), the first page of ``conversation``, and ``recent_messages`` (resuming a
conversation), each after ``--warmup`` untimed reads of its kind, as a serving store has done
them; the very first read's time is reported on its own (``first_ms``). For Edge, the search's
quality is measured against an exact search of the same vectors: the fraction of the true five
nearest that the indexed search returned, for random queries (``recall_random``: in 768 uniform
dimensions the true neighbours are barely nearer than any other point, the hardest case for a
graph index) and for queries near a stored point (``recall_near``: a stored vector moved to a
cosine of ~0.9, as a question resembles a message it was about). Prints a markdown table and
writes ``bench/results/recall.json`` (or ``--json PATH``), with the load average at each size's
start and at its timed searches.

Two data sets, each measured on its own store (``--data``): ``random``, vectors uniform on the
sphere (no structure at all: the worst case for any index), and ``clustered``, vectors around
300 topic centroids (each a centroid plus Gaussian noise of the same norm, so a point's cosine
to its topic is ~0.71 and two points of one topic ~0.5, of two topics ~0), closer to what
an embedding model gives a person's messages. On ``clustered`` the "random" queries are new
points drawn the same way (a new message on one of the topics), not uniform vectors.

A third, ``embedded:DIR``, is real sentences embedded by a model (``bench/embed_corpus.py``
writes DIR): a size of N stores the first N rows of ``person.npy`` for the measured person and
the first N/10 of ``other.npy`` for someone else; ``recall_near`` asks with ``near.npy``
(sentences of the same corpus that were not stored), ``recall_random`` and the timed searches
with ``random.npy`` (sentences of another corpus). The dimension is the files', not ``--dim``.

    python -m bench.recall --sizes 1000,10000 [--dim 768] [--queries 50] [--warmup 20]
                           [--optimize]
                           [--merge-above 0] [--data random,clustered,embedded:DIR]
                           [--search-ef 32] [--index-every 0] [--json PATH]

1M points per person (``--sizes 1000000 --adapters edge --budget-s 7200``) works the same way
but needs ~6 GB of disk for the shard (twice that with ``--merge-above``, whose child then
needs ~16 GB of memory) and well over an hour on two cores.

Local mode brute-forces in Python and NumPy; an insert running past ``--budget-s`` (120 s)
is abandoned and the size recorded as skipped, as is a size larger than an embedded corpus.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from core.memory import MemoryPoint
from core.memory.edge import SEARCH_EF, EdgeStore
from core.memory.qdrant import QdrantStore

RESULTS = Path(__file__).parent / "results" / "recall.json"
T0 = 1_767_225_600.0
SESSION_LEN = 100
BATCH = 1000
TOPICS = 300
DATA_SETS = ("random", "clustered")
EMBEDDED = "embedded:"
#: The files of an embedded corpus (bench/embed_corpus.py writes them).
EMBEDDED_FILES = ("person", "other", "near", "random")


@dataclass(frozen=True)
class Embedded:
    """Unit vectors a model gave real sentences: the person's, someone else's, two query sets."""

    root: Path
    person: np.ndarray
    other: np.ndarray
    near: np.ndarray
    random: np.ndarray

    @classmethod
    def load(cls, root: Path) -> Embedded:
        missing = [f"{name}.npy" for name in EMBEDDED_FILES if not (root / f"{name}.npy").is_file()]
        if missing:
            raise ValueError(
                f"{root} lacks {', '.join(missing)}; write it with bench/embed_corpus.py."
            )
        blocks = {name: np.load(root / f"{name}.npy") for name in EMBEDDED_FILES}
        dims = {block.shape[1] for block in blocks.values() if block.ndim == 2}
        if len(dims) != 1 or any(block.ndim != 2 for block in blocks.values()):
            raise ValueError(f"The arrays in {root} are not all rows of one dimension.")
        return cls(root, **{k: v.astype(np.float32, copy=False) for k, v in blocks.items()})

    @property
    def dim(self) -> int:
        return int(self.person.shape[1])


def _centroids(dim: int) -> np.ndarray:
    """The clustered data set's topics: the same for every size and run."""
    block = np.random.default_rng(0).standard_normal((TOPICS, dim), dtype=np.float32)
    block /= np.linalg.norm(block, axis=1, keepdims=True)
    return block


def _vectors(rng: np.random.Generator, n: int, dim: int, data: str = "random") -> list[list[float]]:
    """``n`` unit vectors of the data set: uniform, or a topic centroid plus noise of norm ~1."""
    block = rng.standard_normal((n, dim), dtype=np.float32)
    if data == "clustered":
        block /= np.sqrt(dim)
        block += _centroids(dim)[rng.integers(0, TOPICS, n)]
    block /= np.linalg.norm(block, axis=1, keepdims=True)
    return block.tolist()  # type: ignore[no-any-return]


def _points(person: str, start: int, vectors: list[list[float]]) -> list[MemoryPoint]:
    points = []
    for offset, vector in enumerate(vectors):
        i = start + offset
        ts = T0 + i
        session = f"{person}:s{i // SESSION_LEN}"
        payload = {
            "personKey": person,
            "sessionKey": session,
            "conversationId": session.split(":", 1)[1],
            "role": "user" if i % 2 == 0 else "assistant",
            "content": f"message {i} of {person}, a sentence of ordinary length for a chat turn.",
            "timestamp": datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds"),
            "ts": ts,
        }
        points.append(MemoryPoint(str(uuid.uuid4()), vector, payload))
    return points


def _load() -> float:
    """The load average over the last minute: the machine is shared, so each figure has one."""
    return round(os.getloadavg()[0], 2)


async def _timed(
    work: Callable[[], Awaitable[Any]], runs: int, warmup: int = 0
) -> dict[str, float]:
    """p50 and p95 of ``runs`` calls after ``warmup`` untimed ones, and the very first call's
    time (``first_ms``): a store's first reads after its index was built touch pages and
    caches nothing has touched yet, which a server pays once and a short run would count as
    its median."""
    times = []
    for _ in range(warmup + runs):
        started = time.perf_counter()
        await work()
        times.append((time.perf_counter() - started) * 1000)
    samples = sorted(times[warmup:])
    return {
        "p50_ms": round(statistics.median(samples), 2),
        "p95_ms": round(samples[min(len(samples) - 1, int(len(samples) * 0.95))], 2),
        "first_ms": round(times[0], 2),
    }


async def _open(adapter: str, root: Path, args: argparse.Namespace) -> EdgeStore | QdrantStore:
    if adapter == "edge":
        return EdgeStore(
            root / "edge",
            index_quiet_s=0.5,
            merge_above=args.merge_above,
            search_ef=args.search_ef,
        )
    return await QdrantStore.local(path=root / "qdrant")


def _near(rng: np.random.Generator, stored: list[list[float]], dim: int) -> list[list[float]]:
    """Stored vectors moved to a cosine of about 0.9 from where they were."""
    block = np.asarray(stored, dtype=np.float32)
    block += rng.standard_normal(block.shape, dtype=np.float32) * (0.48 / np.sqrt(dim))
    block /= np.linalg.norm(block, axis=1, keepdims=True)
    return block.tolist()  # type: ignore[no-any-return]


async def _quality(store: EdgeStore, queries: list[list[float]]) -> float:
    """The fraction of the exact five nearest (a full scan) that the store's search returned."""
    found = 0
    for vector in queries:
        hits = await store.search("verbatim", "alice", vector, limit=5)
        exact = await store.exact_search("verbatim", "alice", vector, limit=5)
        found += len({h.id for h in hits} & {h.id for h in exact})
    return round(found / (5 * len(queries)), 3)


async def bench_one(
    adapter: str,
    size: int,
    args: argparse.Namespace,
    data: str = "random",
    embedded: Embedded | None = None,
) -> dict[str, Any]:
    """One adapter at one size on one data set; ``embedded`` holds the vectors of ``embedded:``."""
    rng = np.random.default_rng(size)
    dim = embedded.dim if embedded else args.dim
    result: dict[str, Any] = {
        "adapter": adapter,
        "data": "embedded" if embedded else data,
        "points_per_person": size,
        "dim": dim,
        "load": [_load()],
    }
    others = max(1, size // 10)
    if embedded:
        result["data_dir"] = str(embedded.root)
        if size > len(embedded.person):
            result["skipped"] = f"the corpus holds {len(embedded.person)} points for the person"
            return result
        others = min(others, len(embedded.other))
    with tempfile.TemporaryDirectory(prefix=f"recall-{adapter}-") as tmp:
        store = await _open(adapter, Path(tmp), args)
        try:
            await store.ensure(dim)
            started = time.perf_counter()
            stored: list[list[float]] = []  # some of alice's, to ask near them
            for person, count in (("alice", size), ("bob", others)):
                for start in range(0, count, BATCH):
                    n = min(BATCH, count - start)
                    if embedded:
                        rows = embedded.person if person == "alice" else embedded.other
                        vectors = rows[start : start + n].tolist()
                    else:
                        vectors = await asyncio.to_thread(_vectors, rng, n, dim, data)
                    if person == "alice" and len(stored) < args.queries:
                        stored += vectors[: args.queries - len(stored)]
                    await store.upsert("verbatim", _points(person, start, vectors))
                    # A quiet moment of steady writes: the indexer catches up.
                    quiet = args.index_every and (start + n) % args.index_every == 0
                    if isinstance(store, EdgeStore) and person == "alice" and quiet:
                        while store.index_backlog() or store.merging():
                            await asyncio.sleep(0.2)
                    if time.perf_counter() - started > args.budget_s:
                        result["skipped"] = (
                            f"insert passed {args.budget_s:.0f} s at {start + n} points of {person}"
                        )
                        return result
            result["insert_s"] = round(time.perf_counter() - started, 2)
            if isinstance(store, EdgeStore):
                started = time.perf_counter()
                if args.optimize:
                    await store.optimize()
                else:  # the background indexer, as a server runs it once the store is quiet
                    while store.index_backlog():
                        await asyncio.sleep(0.2)
                result["index_s"] = round(time.perf_counter() - started, 2)
                started = time.perf_counter()
                if args.merge_above:  # the indexer looks for piled-up segments once idle
                    await asyncio.sleep(1.0)
                while store.merging() or store.index_backlog():
                    await asyncio.sleep(0.2)
                result["merge_s"] = round(time.perf_counter() - started, 2)
                result["segments"] = await store.segments("verbatim")
            if embedded:
                queries = embedded.random[: args.queries].tolist()
                spare = embedded.random[args.queries :].tolist() or queries
                warm = [spare[n % len(spare)] for n in range(args.warmup)]
            else:
                queries = _vectors(rng, args.queries, dim, data)
                # Their own generator: the near queries below stay the same with any warm-up.
                warm = _vectors(np.random.default_rng(size + 1), args.warmup, dim, data)
            cursor = iter(warm + queries)
            result["load"].append(_load())
            last_session = f"alice:s{(size - 1) // SESSION_LEN}"
            result["search"] = await _timed(
                lambda: store.search("verbatim", "alice", next(cursor), limit=5),
                len(queries),
                len(warm),
            )
            result["conversation"] = await _timed(
                lambda: store.conversation("alice", last_session, limit=50),
                args.queries,
                args.warmup,
            )
            result["recent_messages"] = await _timed(
                lambda: store.recent_messages("alice", last_session, max_chars=4000),
                args.queries,
                args.warmup,
            )
            if isinstance(store, EdgeStore):
                result["recall_random"] = await _quality(store, queries)
                near = (
                    embedded.near[: args.queries].tolist() if embedded else _near(rng, stored, dim)
                )
                result["recall_near"] = await _quality(store, near)
        finally:
            await store.close()
    return result


def _manifest(root: Path) -> Any:
    """What bench/embed_corpus.py says of the corpus it wrote (None without a manifest)."""
    path = root / "manifest.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| adapter | data | points/person | insert s | index s | merge s | segments "
        "| search p50/p95 ms (first) | found of top 5 (random / near) "
        "| conversation p50/p95 ms | recent p50/p95 ms | load (start / search) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if "skipped" in r:
            lines.append(
                f"| {r['adapter']} | {r['data']} | {r['points_per_person']} "
                f"| skipped: {r['skipped']} | | | | | | | | |"
            )
            continue

        def cell(name: str, r: dict[str, Any] = r) -> str:
            return f"{r[name]['p50_ms']} / {r[name]['p95_ms']}"

        lines.append(
            f"| {r['adapter']} | {r['data']} | {r['points_per_person']} | {r['insert_s']} "
            f"| {r.get('index_s', '')} | {r.get('merge_s', '')} | {r.get('segments', '')} "
            f"| {cell('search')} ({r['search'].get('first_ms', '')}) "
            f"| {r.get('recall_random', '')} / {r.get('recall_near', '')} "
            f"| {cell('conversation')} | {cell('recent_messages')} "
            f"| {' / '.join(str(x) for x in r['load'])} |"
        )
    return "\n".join(lines)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--adapters", default="edge,qdrant-local")
    parser.add_argument("--dim", type=int, default=768)
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument(
        "--warmup",
        type=int,
        default=20,
        help="untimed reads of each kind before the timed ones (the first read's time is "
        "reported on its own as first_ms)",
    )
    parser.add_argument("--budget-s", type=float, default=120.0)
    parser.add_argument(
        "--optimize", action="store_true", help="build Edge's index in one optimize() call"
    )
    parser.add_argument(
        "--merge-above",
        type=int,
        default=0,
        help="Edge merges a shard's segments once there are more than this many (0: never)",
    )
    parser.add_argument(
        "--search-ef",
        type=int,
        default=SEARCH_EF,
        help=f"candidates an Edge search visits per segment (default {SEARCH_EF}, the store's)",
    )
    parser.add_argument(
        "--data",
        default=",".join(DATA_SETS),
        help="the data sets, each on its own store: random (uniform), clustered (topics), "
        "embedded:DIR (a model's vectors of real sentences, from bench/embed_corpus.py)",
    )
    parser.add_argument(
        "--index-every",
        type=int,
        default=0,
        help="let Edge's indexer catch up after every N of the person's points, as steady "
        "writes do (segments of the store's cap); 0: one long write, whose forced builds "
        "leave fewer, larger segments",
    )
    parser.add_argument(
        "--json", type=Path, default=RESULTS, help=f"where the results go (default {RESULTS})"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    data_sets = [d for d in args.data.split(",") if d]
    corpora: dict[str, Embedded] = {}
    for data in data_sets:
        if data.startswith(EMBEDDED):
            try:
                corpora[data] = Embedded.load(Path(data.removeprefix(EMBEDDED)))
            except ValueError as error:
                parser.error(str(error))
    if unknown := set(data_sets) - set(DATA_SETS) - set(corpora):
        parser.error(
            f"unknown data sets {sorted(unknown)}; choose from {', '.join(DATA_SETS)} "
            f"or {EMBEDDED}DIR"
        )
    results = []
    for size in sizes:
        for data in data_sets:
            for adapter in args.adapters.split(","):
                result = await bench_one(adapter, size, args, data, corpora.get(data))
                print(json.dumps(result), flush=True)
                results.append(result)
    print()
    print(_table(results))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
        "dim": args.dim,
        "queries": args.queries,
        "warmup": args.warmup,
        "optimized": args.optimize,
        "merge_above": args.merge_above,
        "search_ef": args.search_ef,
        "index_every": args.index_every,
        "data": data_sets,
        "topics": TOPICS,
        "embedded": {data: _manifest(corpus.root) for data, corpus in corpora.items()},
        "results": results,
    }
    args.json.write_text(json.dumps(document, indent=2) + "\n")
    print(f"\nwritten to {args.json}")


if __name__ == "__main__":
    asyncio.run(main())
