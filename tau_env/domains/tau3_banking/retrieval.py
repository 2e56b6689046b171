"""The benchmark's knowledge tools: their schemas, its BM25 ``KB_search`` and ``grep``, reproduced exactly.

BM25 follows Okapi BM25 as the benchmark computes it (k1 = 1.5, b = 0.75, content only,
lower-cased whitespace tokens, negative idf floored to 0.25 x the mean idf, summed in query-token
order, stable descending sort, the first 10 documents whatever their score). Per-term frequency
vectors are prepared once, so a query costs a few numpy operations per token.

The schemas below are what the benchmark's model sees for ``KB_search`` and ``grep`` (tau2-bench
builds them from the tools' docstrings with docstring-parser and pydantic: the description is the
summary, plus a blank line and the long description where there is one; each parameter carries a
``title``; the object is titled ``parameters``). They are data, kept byte for byte.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tau_env.knowledge import Document, check_query, grep_counts

K1, B, EPSILON, TOP_K = 1.5, 0.75, 0.25, 10

#: ``KB_search`` as the model sees it in every classic variant (BM25 or embeddings behind it).
KB_SEARCH_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "KB_search",
        "description": "Search the knowledge base for relevant documents.",
        "parameters": {
            "properties": {
                "query": {
                    "description": "The search query to find relevant documents",
                    "title": "Query",
                    "type": "string",
                }
            },
            "required": ["query"],
            "title": "parameters",
            "type": "object",
        },
    },
}

#: ``grep`` as the model sees it (``bm25_grep``, ``grep_only`` and the ``*_grep`` variants).
GREP_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "grep",
        "description": "Search for a regex pattern in all knowledge base documents.\n\n"
        "Returns documents ranked by number of matches, with full content.",
        "parameters": {
            "properties": {
                "pattern": {
                    "description": "The regex pattern to search for (e.g., 'credit.*card', 'fee|charge')",
                    "title": "Pattern",
                    "type": "string",
                }
            },
            "required": ["pattern"],
            "title": "parameters",
            "type": "object",
        },
    },
}

#: The classes that define the two tools in the benchmark; Python's TypeError texts name them.
QUALNAMES = {"KB_search": "KBSearchMixin.KB_search", "grep": "GrepMixin.grep"}


class BenchmarkBM25:
    """Okapi BM25 with the benchmark's tokenization, idf floor, float operations and ordering."""

    def __init__(self, documents: Sequence[Document]):
        self.documents = list(documents)
        corpus = [d.content.lower().split() for d in self.documents]
        self.n = len(corpus)
        self.doc_len = np.array([len(toks) for toks in corpus])
        self.avgdl = sum(len(toks) for toks in corpus) / self.n
        postings: dict[str, dict[int, int]] = {}  # word -> {doc: tf}, words in first-seen order
        for i, toks in enumerate(corpus):
            for w in toks:
                postings.setdefault(w, {})
                postings[w][i] = postings[w].get(i, 0) + 1
        idf_sum = 0.0
        self.idf: dict[str, float] = {}
        negative = []
        for w, docs in postings.items():
            value = math.log(self.n - len(docs) + 0.5) - math.log(len(docs) + 0.5)
            self.idf[w] = value
            idf_sum += value
            if value < 0:
                negative.append(w)
        eps = EPSILON * (idf_sum / len(self.idf))
        for w in negative:
            self.idf[w] = eps
        self._tf = {
            w: (np.fromiter(d.keys(), int, len(d)), np.fromiter(d.values(), int, len(d))) for w, d in postings.items()
        }
        self._norm = K1 * (1 - B + B * self.doc_len / self.avgdl)

    def scores(self, query: str) -> np.ndarray:
        score = np.zeros(self.n)
        for q in query.lower().split():
            idf = self.idf.get(q) or 0
            tf = np.zeros(self.n, dtype=int)
            if q in self._tf:
                idx, counts = self._tf[q]
                tf[idx] = counts
            score += idf * (tf * (K1 + 1) / (tf + self._norm))
        return score

    def search(self, query: str, k: int = TOP_K) -> list[tuple[Document, float]]:
        if not query or not query.strip():  # the benchmark's test; a non-string raises as there
            return []
        s = self.scores(query)
        order = np.argsort(-s, kind="stable")[: min(k, TOP_K)]
        return [(self.documents[i], float(s[i])) for i in order]


def format_hits(hits: Sequence[tuple[Document, float]]) -> str:
    """One block per hit: title (``Untitled`` if empty), id, score to 4 decimals and the full content."""
    return "\n".join(
        f"{i}. {d.title or 'Untitled'}\n   ID: {d.id}\n   Score: {score:.4f}\n   Content: {d.content}\n"
        for i, (d, score) in enumerate(hits, 1)
    )


def timing_suffix(retrieval_ms: float, total_ms: float, reranking_ms: float = 0.0) -> str:
    """The benchmark's timing line. Its ``reranking=`` part shows whenever the measured
    post-processing time is above zero, which is always (the empty post-processing loop is timed).
    """
    return f"\n\n[Timing: retrieval={retrieval_ms:.0f}ms, reranking={reranking_ms:.0f}ms, total={total_ms:.0f}ms]"


def timed_search_output(search: Callable[[str], Sequence[tuple[Document, float]]], query: str) -> str:
    """KB_search's text for any backend: the hit blocks (or ``No relevant documents found.``) and
    the timing suffix, with wall-clock milliseconds. A query over
    :data:`~tau_env.knowledge.MAX_QUERY` (8192) characters is refused with a :class:`ToolError`
    (the benchmark has no limit; BM25 over 10 MB would take seconds and hundreds of MB).
    """
    if isinstance(query, str):  # a non-string fails in ``search`` as in the benchmark
        check_query(query)
    started = time.perf_counter()
    hits = search(query)
    ms = (time.perf_counter() - started) * 1000
    body = format_hits(hits) if hits else "No relevant documents found."
    return body + timing_suffix(ms, ms)


def kb_search_output(index: BenchmarkBM25, query: str, k: int = TOP_K) -> str:
    """KB_search's text with BM25 behind it, timing suffix included."""
    return timed_search_output(lambda q: index.search(q, k), query)


def grep_hits(documents: Sequence[Document], pattern: str, k: int = TOP_K) -> list[tuple[Document, float]]:
    """The benchmark's grep ranking: non-overlapping matches counted in each document's content
    (case-insensitive; a pattern that is not a valid regex is matched literally), documents with
    a match sorted by count (ties in load order), the first ``k``; a blank pattern finds nothing.

    The pattern is compiled and matched by :func:`tau_env.knowledge.grep_counts`, in a worker
    process under the grep budget (1 s of CPU time, 5 s of wall-clock time, 256 MB of memory);
    past it a :class:`ToolError` says so (the benchmark itself has no budget and can hang).
    """
    if not pattern.strip():
        return []
    counts = grep_counts([d.content for d in documents], pattern)
    scored = [(d, float(n)) for d, n in zip(documents, counts, strict=True)]
    return sorted((h for h in scored if h[1] > 0), key=lambda h: -h[1])[:k]


def grep_output(documents: Sequence[Document], pattern: str) -> str:
    """The text of ``grep``: the hit blocks, without a timing suffix, or ``No matches found for pattern: ...``."""
    hits = grep_hits(documents, pattern)
    return format_hits(hits) if hits else f"No matches found for pattern: {pattern}"


def strip_timing(text: str) -> str:
    """KB_search's output without its wall-clock timing suffix (for comparisons)."""
    return re.sub(r"\n\n\[Timing: [^\]]*\]$", "", text)
