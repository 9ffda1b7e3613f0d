"""Merging a copy of a Qdrant Edge shard into few large segments, in a child process.

``qdrant_edge`` holds the GIL while it optimizes, so the server's own indexer keeps each build
small (segments capped, core/memory/edge_shard.py) and a person's points end up spread over
many indexed segments, each of which a search visits. Merging them into one is a long build:
the store runs it here, in another process, on a copy of the shard (``python -m
core.memory.edge_merge COPY VECTOR_SIZE``), and swaps the merged copy in when it is done. The
child lowers its own priority, so turns keep the CPU they need.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import qdrant_edge as qe

from core.memory.edge_shard import shard_config


def merge(path: Path, vector_size: int) -> int:
    """Optimize the shard at ``path`` without the segment cap; returns its segment count."""
    shard = qe.EdgeShard.load(str(path), shard_config(vector_size, merged=True))
    try:
        shard.optimize()
        shard.flush()
        return int(shard.info().segments_count)
    finally:
        shard.close()


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or not args[1].isdigit():
        print("usage: python -m core.memory.edge_merge SHARD_COPY VECTOR_SIZE", file=sys.stderr)
        return 2
    os.nice(10)
    print(merge(Path(args[0]), int(args[1])), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
