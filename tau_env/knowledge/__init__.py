"""Knowledge: documents, BM25 / embedding / hybrid search, and a grep that cannot hang.

BM25 uses ``bm25s`` (chosen over rank-bm25 by ``benchmarks/bm25_libraries.py``: about 16x faster
per query), with Lucene's idf, which never drops a word to zero weight; its top-10 sets agree
95 % with rank-bm25's Okapi, though orderings differ. Ties are broken by document order, so
results are deterministic. Embedding search needs the ``embed`` extra.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tau_env.error import DomainError, ToolError

__all__ = ["Document", "KnowledgeBase", "BM25Index", "SearchHit", "tokenize", "grep", "rrf_fuse", "load_documents"]

_TOKEN = re.compile(r"[a-z0-9]+(?:[_'][a-z0-9]+)*")
STOPWORDS = frozenset(
    "a an and are as at be but by can do does for from has have how i if in into is it its me my of on or "
    "our so than that the their them then there these they this to was we were what when where which who "
    "will with you your".split()
)


def tokenize(text: str, stopwords: frozenset[str] = STOPWORDS) -> list[str]:
    """Lower-case word tokens (tool names such as ``close_account_4821`` stay whole), minus stopwords."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in stopwords]


@dataclass(frozen=True)
class Document:
    """One knowledge-base document."""

    id: str
    title: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def text(self) -> str:
        return f"{self.title}\n\n{self.content}"


@dataclass(frozen=True)
class SearchHit:
    doc_id: str
    score: float


def load_documents(path: str | Path) -> list[Document]:
    """Load documents from a folder of ``*.md`` (title = first ``# `` line, id = file stem) and
    ``*.json`` (``{"id", "title", "content"}``) files, sorted by file name.
    """
    root = Path(path)
    if not root.is_dir():
        raise DomainError(f"Expected a folder of documents at {root}, found none.")
    docs = []
    for p in sorted(root.iterdir()):
        if p.suffix == ".md":
            text = p.read_text(encoding="utf-8")
            first, _, rest = text.partition("\n")
            if not first.startswith("# "):
                raise DomainError(f"{p.name}: a markdown document must start with '# Title'.")
            docs.append(Document(p.stem, first[2:].strip(), rest.strip()))
        elif p.suffix == ".json":
            d = json.loads(p.read_text(encoding="utf-8"))
            try:
                docs.append(Document(str(d["id"]), str(d["title"]), str(d["content"])))
            except KeyError as e:
                raise DomainError(f"{p.name}: a JSON document needs 'id', 'title' and 'content'; missing {e}.") from e
    return docs


class BM25Index:
    """BM25 (Okapi) over a list of token lists, with deterministic top-k."""

    def __init__(
        self, corpus_tokens: Sequence[Sequence[str]], k1: float = 1.5, b: float = 0.75, method: str = "lucene"
    ):
        import bm25s  # light: numpy only; imported here so `import tau_env` stays fast

        self.n = len(corpus_tokens)
        self._bm25 = bm25s.BM25(k1=k1, b=b, method=method)
        # bm25s rejects an empty vocabulary; a placeholder token keeps empty corpora valid.
        self._bm25.index([list(t) or ["\x00"] for t in corpus_tokens], show_progress=False)
        self._vocab = self._bm25.vocab_dict

    def scores(self, query_tokens: Sequence[str]) -> np.ndarray:
        known = [t for t in query_tokens if t in self._vocab]
        if not known or self.n == 0:
            return np.zeros(self.n, dtype=np.float32)
        return self._bm25.get_scores(known)

    def top_k(self, query_tokens: Sequence[str], k: int) -> list[tuple[int, float]]:
        s = self.scores(query_tokens)
        k = max(0, min(k, self.n))
        if k == 0:
            return []
        if k < self.n:
            cand = np.argpartition(-s, k - 1)[:k]
            kth = s[cand].min()
            cand = np.flatnonzero(s >= kth)  # every doc tied with the k-th, so ties break by order
        else:
            cand = np.arange(self.n)
        order = cand[np.lexsort((cand, -s[cand]))][:k]
        return [(int(i), float(s[i])) for i in order if s[i] > 0]


def rrf_fuse(rankings: Iterable[Sequence[str]], k: int = 60) -> list[tuple[str, float]]:
    """Reciprocal-rank fusion of several rankings of ids; ties broken by first appearance."""
    scores: dict[str, float] = {}
    first: dict[str, int] = {}
    pos = 0
    for ranking in rankings:
        for rank, doc_id in enumerate(ranking):
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (k + rank + 1)
            if doc_id not in first:
                first[doc_id] = pos
                pos += 1
    return sorted(scores.items(), key=lambda kv: (-kv[1], first[kv[0]]))


#: Patterns longer than this are refused by grep.
MAX_PATTERN = 300
#: Wall-clock budget of one grep over the whole knowledge base, in seconds.
GREP_TIMEOUT = 0.2


def grep(
    docs: Sequence[Document],
    pattern: str,
    *,
    ignore_case: bool = True,
    max_matches: int = 50,
    timeout: float = GREP_TIMEOUT,
) -> list[tuple[str, int, str]]:
    """Regex search line by line; returns ``(doc_id, line_number, line)``.

    Uses the ``regex`` engine with a time budget, so a pathological pattern such as ``(a+)+$``
    ends in a :class:`ToolError` instead of hanging the process.
    """
    import regex

    if len(pattern) > MAX_PATTERN:
        raise ToolError(f"Pattern too long ({len(pattern)} characters; at most {MAX_PATTERN}).")
    try:
        rx = regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)
    except (regex.error, ValueError, OverflowError, RecursionError) as e:
        raise ToolError(f"Invalid regular expression {pattern[:80]!r}: {e}.") from None
    deadline = time.perf_counter() + timeout
    out = []
    for d in docs:
        for n, line in enumerate(d.text.splitlines(), 1):
            left = deadline - time.perf_counter()
            if left <= 0:
                raise ToolError("The pattern took too long to search; use a simpler pattern.")
            try:
                hit = rx.search(line, timeout=left)
            except TimeoutError:
                raise ToolError("The pattern took too long to search; use a simpler pattern.") from None
            if hit:
                out.append((d.id, n, line))
                if len(out) >= max_matches:
                    return out
    return out


class KnowledgeBase:
    """A domain's documents with lazily built search indexes.

    Args:
        documents: The documents, in a stable order (ties in ranking break by this order).
        embedder: Optional encoder for dense search (see :mod:`tau_env.knowledge.embed`).
    """

    def __init__(self, documents: Sequence[Document], embedder: Any = None):
        self.documents = list(documents)
        self.by_id = {d.id: d for d in self.documents}
        if len(self.by_id) != len(self.documents):
            seen: set[str] = set()
            dup = next(d.id for d in self.documents if d.id in seen or seen.add(d.id))  # type: ignore[func-returns-value]
            raise DomainError(f"Two documents share the id {dup!r}.")
        self._bm25: BM25Index | None = None
        self._dense: Any = None
        self._embedder = embedder

    def __len__(self) -> int:
        return len(self.documents)

    def get(self, doc_id: str) -> Document | None:
        return self.by_id.get(doc_id)

    @property
    def bm25(self) -> BM25Index:
        if self._bm25 is None:
            self._bm25 = BM25Index([tokenize(d.text) for d in self.documents])
        return self._bm25

    def search_bm25(self, query: str, k: int = 5) -> list[SearchHit]:
        return [SearchHit(self.documents[i].id, s) for i, s in self.bm25.top_k(tokenize(query), k)]

    def dense(self) -> Any:
        if self._dense is None:
            from tau_env.knowledge.embed import DenseIndex, default_encoder

            self._dense = DenseIndex(self.documents, self._embedder or default_encoder())
        return self._dense

    def search_dense(self, query: str, k: int = 5) -> list[SearchHit]:
        return self.dense().search(query, k)

    def search_hybrid(self, query: str, k: int = 5, depth: int = 50) -> list[SearchHit]:
        lists = [
            [h.doc_id for h in self.search_bm25(query, depth)],
            [h.doc_id for h in self.search_dense(query, depth)],
        ]
        return [SearchHit(d, s) for d, s in rrf_fuse(lists)[:k]]

    def search(self, query: str, k: int = 5, method: str = "bm25") -> list[SearchHit]:
        """Top-``k`` documents for ``query`` by ``method``: ``bm25``, ``dense`` or ``hybrid``."""
        if method == "bm25":
            return self.search_bm25(query, k)
        if method == "dense":
            return self.search_dense(query, k)
        if method == "hybrid":
            return self.search_hybrid(query, k)
        raise ValueError(f"Unknown search method {method!r}; expected 'bm25', 'dense' or 'hybrid'.")

    def grep(self, pattern: str, **kw: Any) -> list[tuple[str, int, str]]:
        return grep(self.documents, pattern, **kw)
