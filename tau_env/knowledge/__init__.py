"""Knowledge: documents, BM25 / embedding / hybrid search, and a grep that cannot hang.

BM25 uses ``bm25s`` (chosen over rank-bm25 by ``benchmarks/bm25_libraries.py``: about 16x faster
per query), with Lucene's idf, which never drops a word to zero weight; its top-10 sets agree
95 % with rank-bm25's Okapi, though orderings differ. Ties are broken by document order, so
results are deterministic. Embedding search needs the ``embed`` extra.
"""

from __future__ import annotations

import atexit
import os
import pickle
import re
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tau_env.error import DomainError, InvalidOptionError, ToolError

__all__ = [
    "Document",
    "KnowledgeBase",
    "BM25Index",
    "SearchHit",
    "tokenize",
    "grep",
    "grep_counts",
    "rrf_fuse",
    "load_documents",
]

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
    """The documents of a folder, sorted by file name, each checked.

    ``*.md``: ``# Title`` on the first line, the file stem as id; ``*.json``: ``{"id", "title",
    "content"}``. Any problem (not a folder, unreadable, not UTF-8, not JSON, a missing or
    mistyped field, two documents with one id) raises a :class:`DomainError` naming the file.
    """
    from tau_env.tasks import read_json_file, read_text_file, type_name

    folder = Path(path)
    if not folder.is_dir():
        raise DomainError(f"{folder}: expected a folder of *.md or *.json documents, found none.")
    docs: list[Document] = []
    origin: dict[str, Path] = {}
    for p in sorted(folder.iterdir()):
        if p.suffix == ".md":
            first, _, rest = read_text_file(p).partition("\n")
            if not first.startswith("# "):
                raise DomainError(f"{p}: a markdown document must start with '# Title' on its first line.")
            doc = Document(p.stem, first[2:].strip(), rest.strip())
        elif p.suffix == ".json":
            d = read_json_file(p)
            if not isinstance(d, dict):
                raise DomainError(f"{p}: expected an object with 'id', 'title' and 'content', got {type_name(d)}.")
            for key in ("id", "title", "content"):
                if not isinstance(d.get(key), str):
                    got = "nothing" if key not in d else type_name(d[key])
                    raise DomainError(f"{p}: {key}: expected a string, got {got}.")
            doc = Document(d["id"], d["title"], d["content"])
        else:
            continue
        if doc.id in origin:
            raise DomainError(f"{p}: document id {doc.id!r} is also the id of {origin[doc.id]}.")
        origin[doc.id] = p
        docs.append(doc)
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


#: Patterns longer than this are refused by Harbor Bank's ``grep_documents``.
MAX_PATTERN = 300
#: Queries longer than this (in characters) are refused by every search tool, in both domains
#: (the longest string argument a validated tool takes, ``tau_env.tools.MAX_STRING``).
MAX_QUERY = 8192
#: CPU seconds one grep call may use, compiling the pattern included.
GREP_TIMEOUT = 1.0
#: Wall-clock seconds one grep call may take, whatever the machine's load.
GREP_WALL_TIMEOUT = 5.0
#: Memory (MB) one grep call may add to its worker process (enforced on Linux).
GREP_MEMORY_MB = 256


def budget_message(timeout: float, memory_mb: int) -> str:
    """The text of the :class:`ToolError` for a pattern that exceeded the grep budget.

    The same whichever limit was reached (which one comes first can depend on the machine), so
    that the model sees the same observation everywhere; :attr:`GrepWorker.last_breach` tells which.
    """
    return (
        f"The pattern exceeded the grep budget ({timeout:g} s of CPU time, {memory_mb} MB of memory); "
        "use a simpler pattern."
    )


def check_query(query: str) -> None:
    """Refuse a search query over :data:`MAX_QUERY` characters, as validated tools refuse any longer
    string argument (BM25 over a 10 MB query would take seconds and hundreds of MB).
    """
    if len(query) > MAX_QUERY:
        raise ToolError(f"Argument 'query' is too long ({len(query)} characters; at most {MAX_QUERY}).")


class GrepWorker:
    """Runs the model's regular expressions in a child process, under a budget of time and memory.

    No regex engine can be stopped from outside while it compiles or backtracks (``re`` has no
    timeout; ``regex`` has none for compiling, and ``(?:(?:a{300}){300}){300}`` takes it seconds
    and gigabytes), so the pattern runs in a worker process (``_grep_worker.py``) with a CPU-time
    timer and an address-space limit; past either the worker ends, as it does when the parent's
    wall-clock limit passes (it is killed). The call then raises :class:`ToolError` with
    :func:`budget_message`, and the next call starts a fresh worker (tens of milliseconds).

    One worker per process (a Ray worker or a forked process gets its own), started on the first
    grep and again after a breach; it keeps the last 8 document sets it was sent, so a call sends
    only the pattern (the round trip costs well under a millisecond). Calls from several threads
    take turns. The worker exits when its parent closes the pipe or exits.
    """

    CORPORA = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._pid = 0
        self._corpora: OrderedDict[tuple[str, ...], int] = OrderedDict()
        self._next_id = 0
        #: Which limit the last breach reached: ``"cpu"``, ``"memory"``, ``"wall"`` (or ``"exit N"``).
        self.last_breach: str | None = None

    def run(self, op: str, texts: tuple[str, ...], *args: Any, timeout: float, memory_mb: int) -> Any:
        """Run ``op`` (``"count"`` or ``"lines"``, see ``_grep_worker``) on ``texts``; the worker's value."""
        with self._lock:
            try:
                cid = self._corpus(texts)
                self._send(op, cid, timeout, memory_mb << 20, *args)
                kind, value = self._receive(time.monotonic() + GREP_WALL_TIMEOUT)
            except (OSError, EOFError) as e:  # the worker ended (a budget), or is stuck (TimeoutError)
                self.last_breach = "wall" if isinstance(e, TimeoutError) else self._exit_reason()
                self.close()
                raise ToolError(budget_message(timeout, memory_mb)) from None
        if kind == "invalid":
            raise ToolError(f"Invalid regular expression {args[0][:80]!r}: {value}.")
        if kind == "raise":
            raise ToolError(value)
        return value

    def close(self) -> None:
        """End the worker (the next call starts another)."""
        proc, self._proc = self._proc, None
        self._corpora.clear()
        if proc is None:
            return
        if self._pid == os.getpid():  # in a forked child the worker is the parent's: leave it be
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout):
            try:
                stream.close()  # type: ignore[union-attr]
            except OSError:  # a broken pipe while flushing: nothing left to say to it
                pass

    def _exit_reason(self) -> str:
        try:
            code = self._proc.wait(timeout=5)  # type: ignore[union-attr]
        except subprocess.TimeoutExpired:
            return "wall"
        if code == -signal.SIGPROF:
            return "cpu"
        # 3: a MemoryError; a C library that cannot allocate may abort (SIGABRT) or crash instead
        return "memory" if code in (3, -signal.SIGABRT, -signal.SIGSEGV, -signal.SIGKILL) else f"exit {code}"

    def _start(self) -> None:
        self.close()
        worker = Path(__file__).with_name("_grep_worker.py")
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-P", str(worker)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # a terminal's Ctrl-C goes to the parent only
            )
            self._pid = os.getpid()
            self._poll = select.poll()  # not select(): no limit on the descriptor's number
            self._poll.register(self._proc.stdout.fileno(), select.POLLIN)  # type: ignore[union-attr]
            self._receive(time.monotonic() + 60)
        except (OSError, EOFError) as e:  # not the pattern's fault: not a budget message
            self.close()
            # Not a caller error: the machine's; the tool calling grep reports it as an internal error.
            raise RuntimeError(f"The grep worker ({worker}) did not start: {e!r}.") from e

    def _corpus(self, texts: tuple[str, ...]) -> int:
        if self._proc is None or self._pid != os.getpid() or self._proc.poll() is not None:
            self._start()  # RuntimeError if it cannot start
        cid = self._corpora.get(texts)
        if cid is not None:
            self._corpora.move_to_end(texts)
            return cid
        if len(self._corpora) >= self.CORPORA:
            _, old = self._corpora.popitem(last=False)
            self._send("load", old, None)
            self._receive(time.monotonic() + 60)
        cid = self._corpora[texts] = self._next_id
        self._next_id += 1
        self._send("load", cid, list(texts))
        self._receive(time.monotonic() + 60)
        return cid

    def _send(self, *message: Any) -> None:
        body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        stdin = self._proc.stdin  # type: ignore[union-attr]
        stdin.write(struct.pack("!Q", len(body)) + body)  # type: ignore[union-attr]
        stdin.flush()  # type: ignore[union-attr]

    def _receive(self, deadline: float) -> Any:
        fd = self._proc.stdout.fileno()  # type: ignore[union-attr]

        def read(n: int) -> bytes:
            chunks, left = [], n
            while left:
                wait = deadline - time.monotonic()
                if wait <= 0 or not self._poll.poll(wait * 1000):
                    raise TimeoutError("no reply in time")
                chunk = os.read(fd, left)
                if not chunk:
                    raise EOFError("the worker ended")
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)

        return pickle.loads(read(struct.unpack("!Q", read(8))[0]))


_WORKER = GrepWorker()
atexit.register(_WORKER.close)


def grep_counts(
    texts: Sequence[str], pattern: str, *, timeout: float | None = None, memory_mb: int | None = None
) -> list[int]:
    """tau3-banking's grep count: non-overlapping matches of ``pattern`` in each text, as the
    benchmark computes them (``re``, case-insensitive; a pattern that is not a valid regex is
    matched literally).

    Budget (compiling included): ``timeout`` s of CPU time (default :data:`GREP_TIMEOUT`, 1 s),
    :data:`GREP_WALL_TIMEOUT` (5 s) of wall-clock time and ``memory_mb`` MB (default
    :data:`GREP_MEMORY_MB`, 256) of memory; past it :class:`ToolError` with :func:`budget_message`.
    """
    timeout = GREP_TIMEOUT if timeout is None else timeout
    memory_mb = GREP_MEMORY_MB if memory_mb is None else memory_mb
    return _WORKER.run("count", tuple(texts), pattern, timeout=timeout, memory_mb=memory_mb)


def grep(
    docs: Sequence[Document],
    pattern: str,
    *,
    ignore_case: bool = True,
    max_matches: int = 50,
    timeout: float | None = None,
    memory_mb: int | None = None,
) -> list[tuple[str, int, str]]:
    """Regex search line by line (the ``regex`` engine); returns ``(doc_id, line_number, line)``.

    Budget: a pattern of at most :data:`MAX_PATTERN` characters; compiling and searching take at
    most ``timeout`` s of CPU time (:data:`GREP_TIMEOUT`, 1 s), :data:`GREP_WALL_TIMEOUT` (5 s)
    of wall-clock time and ``memory_mb`` MB (:data:`GREP_MEMORY_MB`, 256) of memory, or the call
    raises :class:`ToolError` with :func:`budget_message` (see :class:`GrepWorker`).
    """
    if len(pattern) > MAX_PATTERN:
        raise ToolError(f"Pattern too long ({len(pattern)} characters; at most {MAX_PATTERN}).")
    timeout = GREP_TIMEOUT if timeout is None else timeout
    memory_mb = GREP_MEMORY_MB if memory_mb is None else memory_mb
    texts = tuple(d.text for d in docs)
    found = _WORKER.run("lines", texts, pattern, ignore_case, max_matches, timeout=timeout, memory_mb=memory_mb)
    return [(docs[i].id, n, line) for i, n, line in found]


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
        raise InvalidOptionError(f"Unknown search method {method!r}; expected 'bm25', 'dense' or 'hybrid'.")

    def grep(self, pattern: str, **kw: Any) -> list[tuple[str, int, str]]:
        return grep(self.documents, pattern, **kw)
