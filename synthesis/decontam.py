"""Decontamination: drop synthesized tasks that leak an evaluation set's tasks.

Detectors (each reason names the detector, the evaluation task and a score in [0, 1]):

- ``chain``: the same reference chain (:func:`~tau_env.synthesis.records.chain_signature`);
- ``chain_abstract``: the same chain with ids and personal values abstracted (tool names, argument
  keys and the other values), so a copy with renamed ids or customer is caught;
- ``ids``: record ids, customer ids or customer names that appear in both (initial states,
  actions, facts);
- ``state_change``: the same change from s0 to the target state, per table, ids abstracted (needs
  both domains to replay the chains: ``domain`` and ``against_domain``);
- ``ngram``: word n-gram Jaccard or containment of the scenarios (persona, requests, instructions);
- ``embedding``: cosine similarity of the scenarios' embeddings: TF-IDF with numpy by default (no
  model), ``embedder="minilm"`` for MiniLM (the ``embed`` extra), or any object with
  ``encode(texts) -> array``.

Chains made only of identity and unlock calls (or none) are not compared: every refusal looks alike.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tau_env import Task
from tau_env.error import InvalidOptionError

from .records import chain_signature

DETECTORS = ("chain", "chain_abstract", "ids", "state_change", "ngram", "embedding")
#: Calls that every task of a domain shares; a chain of only these is not compared.
ROUTINE_TOOLS = frozenset(
    {
        "find_customer",
        "verify_identity",
        "get_customer",
        "log_verification",
        "get_user_details",
        "unlock_tool",
        "hand_over_tool",
        "unlock_discoverable_agent_tool",
        "give_discoverable_user_tool",
        "get_current_time",
    }
)
_ID_KEY = re.compile(r"(^|_)(id|ids)$|_id_|^id_", re.I)
_PERSONAL_KEY = re.compile(
    r"(^|_)(name|full_name|address|email|phone|phone_number|date_of_birth|dob|last4|phone_last4|time_verified)$", re.I
)
_NAME_KEY = re.compile(r"^(full_name|name|customer_name|user_name|full name)$", re.I)
_ID_VALUE = re.compile(r"^(?=.*\d)(?=.*[A-Za-z_-])[A-Za-z0-9][A-Za-z0-9_.:/-]{3,}$")
_WORD = re.compile(r"[a-z0-9]+")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[A-Za-z]{2,}$")


def _tool_key(key: str) -> bool:
    return "tool" in key.lower()


def _id_like(key: str, value: Any) -> bool:
    if not isinstance(value, str) or _tool_key(key):
        return False
    return bool(_ID_KEY.search(key) or _PERSONAL_KEY.search(key) or _ID_VALUE.match(value) or "@" in value)


def _parsed(value: Any) -> Any:
    """A JSON text argument (tau3 passes a discoverable tool's arguments as one) as its value."""
    if isinstance(value, str) and value[:1] in "{[":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _abstract(value: Any, key: str = "") -> Any:
    """``value`` with ids and personal values replaced by ``"<id>"``."""
    value = _parsed(value)
    if isinstance(value, dict):
        return {k: _abstract(v, str(k)) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_abstract(v, key) for v in value]
    return "<id>" if _id_like(key, value) else value


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, ensure_ascii=False, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _substantive(task: Task) -> bool:
    return any(a.name not in ROUTINE_TOOLS for a in task.actions)


def abstract_chain(task: Task) -> str:
    """A digest of the chain with ids and personal values abstracted."""
    return _digest([[a.requestor, a.name, _abstract(a.arguments)] for a in task.actions])


_PERSON_KEYS = frozenset({"date_of_birth", "dob", "email", "phone", "phone_number", "address"})


def _walk_ids(value: Any, key: str, out: set[str], names: set[str], person: bool = False) -> None:
    """Ids into ``out``; people's names (a ``full_name``-like key, or ``name`` in a record that also
    holds a birth date, e-mail, phone or address: not a merchant's) into ``names``.
    """
    value = _parsed(value)
    if isinstance(value, dict):
        here = bool(_PERSON_KEYS & {str(k).lower() for k in value})
        for k, v in value.items():
            _walk_ids(v, str(k), out, names, here)
    elif isinstance(value, list):
        for v in value:
            _walk_ids(v, key, out, names, person)
    elif isinstance(value, str) and not _tool_key(key):
        if _NAME_KEY.search(key) and " " in value.strip() and (person or key.lower() != "name"):
            names.add("name:" + " ".join(value.lower().split()))
        elif (_ID_KEY.search(key) and len(value) >= 4) or _ID_VALUE.match(value) or _EMAIL.match(value):
            out.add(value)


def identifiers(task: Task) -> set[str]:
    """Record ids, customer ids and customer names a task names (initial state and tau3's
    ``metadata["agent_data"]``, actions, facts).
    """
    ids: set[str] = set()
    names: set[str] = set()
    _walk_ids(task.initial_state, "", ids, names)
    _walk_ids(task.metadata.get("agent_data") or {}, "", ids, names)  # tau3's state patch
    _walk_ids([a.arguments for a in task.actions], "", ids, names)
    _walk_ids({k.replace(" ", "_"): v for k, v in task.scenario.facts.items()}, "", ids, names)
    return ids | names


def scenario_text(task: Task) -> str:
    s = task.scenario
    return " ".join([s.persona, *s.requests, s.instructions])


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _change_items(domain: Any, task: Task) -> Counter[str]:
    """The rows the chain inserts, deletes or updates (the changed columns), ids abstracted."""
    before = domain.start_db(task)
    after, _ = domain.replay(task)
    try:
        b, a = before.dump(), after.dump()
    finally:
        before.close()
        after.close()
    change: Counter[str] = Counter()
    for table in sorted(set(a) | set(b)):
        info = domain.schema.tables.get(table)
        pk = info.primary_key if info is not None and info.primary_key else None

        def key(row: dict[str, Any], pk: tuple[str, ...] | None = pk) -> str:
            return _digest([row.get(c) for c in pk] if pk else row)

        old = {key(r): r for r in b.get(table, [])}
        new = {key(r): r for r in a.get(table, [])}
        for k in sorted(set(old) | set(new)):
            o, n = old.get(k), new.get(k)
            if o == n:
                continue
            if o is None or n is None:
                item = [table, "insert" if o is None else "delete", _abstract(n or o)]
            else:
                item = [table, "update", _abstract({c: n.get(c) for c in sorted(n) if n.get(c) != o.get(c)})]
            change[json.dumps(item, sort_keys=True, ensure_ascii=False, default=str)] += 1
    return change


def state_change(domain: Any, task: Task) -> str | None:
    """A digest of the change s0 -> target, per table, ids abstracted, less what the routine calls
    (identity checks, unlocks) change alone; None when nothing else changes.
    """
    full = _change_items(domain, task)
    routine = task.model_copy(update={"actions": [a for a in task.actions if a.name in ROUTINE_TOOLS]})
    rest = full - _change_items(domain, routine) if routine.actions else full
    if not rest:
        return None
    return _digest(sorted(rest.elements()))


# --- embeddings ----------------------------------------------------------------------------------
def _tfidf(texts: Sequence[str]) -> np.ndarray:
    """L2-normalised TF-IDF vectors (words and word pairs) of ``texts``."""
    docs = []
    for t in texts:
        words = _WORD.findall(t.lower())
        docs.append(Counter(words + [f"{x} {y}" for x, y in zip(words, words[1:], strict=False)]))
    df: Counter[str] = Counter()
    for d in docs:
        df.update(d.keys())
    vocab = {w: i for i, w in enumerate(sorted(df))}
    m = np.zeros((len(docs), max(1, len(vocab))), dtype=np.float32)
    n = len(docs)
    for r, d in enumerate(docs):
        for w, c in d.items():
            m[r, vocab[w]] = (1 + math.log(c)) * (math.log((1 + n) / (1 + df[w])) + 1)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    return m / np.where(norms == 0, 1, norms)


def _embed(embedder: Any, texts: list[str]) -> np.ndarray:
    if embedder is None or embedder == "tfidf":
        return _tfidf(texts)
    if embedder == "minilm":
        from tau_env.knowledge.embed import default_encoder, require_embed

        require_embed("MiniLM decontamination")
        embedder = default_encoder()
    if isinstance(embedder, str):
        raise InvalidOptionError(
            f"decontaminate: embedder must be None, 'tfidf', 'minilm', or an object with encode(texts), "
            f"got {embedder!r}."
        )
    encode = getattr(embedder, "encode", embedder)
    vec = np.asarray(encode(texts), dtype=np.float32)
    norms = np.linalg.norm(vec, axis=1, keepdims=True)
    return vec / np.where(norms == 0, 1, norms)


# --- the report ----------------------------------------------------------------------------------
@dataclass
class DecontamReport:
    """What :func:`decontaminate` kept and removed, and why.

    Attributes:
        kept: The tasks no detector flagged, in input order.
        removed: ``[{"id", "reasons": [{"detector", "against_id", "score"}]}]``, in input order.
        by_detector: How many removed tasks each detector flagged (a task may count under several).
        settings: The thresholds and detectors used.
    """

    kept: list[Task]
    removed: list[dict[str, Any]] = field(default_factory=list)
    by_detector: dict[str, int] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def removed_ids(self) -> list[str]:
        return [r["id"] for r in self.removed]

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (``decontamination.json``)."""
        total = len(self.kept) + len(self.removed)
        return {
            "total": total,
            "kept": len(self.kept),
            "removed_count": len(self.removed),
            "contamination_rate": len(self.removed) / total if total else 0.0,
            "by_detector": dict(self.by_detector),
            "settings": dict(self.settings),
            "kept_ids": [t.id for t in self.kept],
            "removed": self.removed,
        }

    def text(self, limit: int = 20) -> str:
        """A short readable summary: counts per detector, then the first ``limit`` removals."""
        total = len(self.kept) + len(self.removed)
        lines = [f"decontamination: {len(self.removed)} of {total} tasks removed, {len(self.kept)} kept"]
        for d in DETECTORS:
            if self.by_detector.get(d):
                lines.append(f"  {d:<15} {self.by_detector[d]}")
        for r in self.removed[:limit]:
            why = ", ".join(f"{x['detector']} ~ {x['against_id']} ({x['score']:.2f})" for x in r["reasons"][:3])
            more = f" (+{len(r['reasons']) - 3})" if len(r["reasons"]) > 3 else ""
            lines.append(f"  - {r['id']}: {why}{more}")
        if len(self.removed) > limit:
            lines.append(f"  ... and {len(self.removed) - limit} more")
        return "\n".join(lines)


# --- the detectors -------------------------------------------------------------------------------
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}([ T].*)?$")


def _id_set(task: Task) -> set[str]:
    return {x for x in identifiers(task) if not _DATE.match(x)}


def _vocabulary(domain: Any) -> set[str]:
    """Every value a tool argument's schema lists (enum members such as product codes and reasons):
    words of the domain that any two tasks may share, never a record's identity.
    """
    if domain is None:
        return set()
    out: set[str] = set()
    stack: list[Any] = [t.schema for t in domain.toolbox("all").tools.values()]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            out.update(str(v) for v in node.get("enum") or () if isinstance(v, str))
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return out


def _safe_change(domain: Any, task: Task) -> str | None:
    try:
        return state_change(domain, task)
    except Exception:  # noqa: BLE001  (a task another domain cannot replay has no comparable change)
        return None


def _exact(keys: list[str | None], against: list[str | None]) -> list[list[tuple[int, float]]]:
    index: dict[str, list[int]] = {}
    for j, k in enumerate(against):
        if k is not None:
            index.setdefault(k, []).append(j)
    return [[(j, 1.0) for j in index.get(k, [])] if k is not None else [] for k in keys]


def _overlap(sets: list[set[str]], against: list[set[str]]) -> list[list[tuple[int, float]]]:
    index: dict[str, list[int]] = {}
    for j, s in enumerate(against):
        for x in s:
            index.setdefault(x, []).append(j)
    out = []
    for s in sets:
        hits: Counter[int] = Counter(j for x in s for j in index.get(x, ()))
        out.append([(j, c / len(s)) for j, c in hits.items()])
    return out


def _ngram_scores(
    texts: list[str], against: list[str], n: int, threshold: float, min_grams: int = 10
) -> list[list[tuple[int, float]]]:
    grams = [_ngrams(t, n) for t in texts]
    agrams = [_ngrams(t, n) for t in against]
    index: dict[tuple[str, ...], list[int]] = {}
    for j, g in enumerate(agrams):
        for x in g:
            index.setdefault(x, []).append(j)
    out = []
    for g in grams:
        inter: Counter[int] = Counter(j for x in g for j in index.get(x, ()))
        row = []
        for j, c in inter.items():
            b = agrams[j]
            score = c / (len(g) + len(b) - c)
            if len(g) >= min_grams:
                score = max(score, c / len(g))
            if len(b) >= min_grams:
                score = max(score, c / len(b))
            if score >= threshold:
                row.append((j, score))
        out.append(row)
    return out


def _embedding_scores(
    texts: list[str], against: list[str], threshold: float, embedder: Any
) -> list[list[tuple[int, float]]]:
    if not texts or not against:
        return [[] for _ in texts]
    vec = _embed(embedder, texts + against)
    sim = vec[: len(texts)] @ vec[len(texts) :].T
    return [[(int(j), float(sim[i, j])) for j in np.nonzero(sim[i] >= threshold)[0]] for i in range(len(texts))]


def _check(name: str, value: Any, low: float, high: float) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise InvalidOptionError(f"decontaminate: {name} must be a number in [{low}, {high}], got {value!r}.")


def decontaminate(
    tasks: Sequence[Task],
    against: Sequence[Task],
    *,
    domain: Any = None,
    against_domain: Any = None,
    ngram: int = 5,
    ngram_threshold: float = 0.5,
    embed_threshold: float = 0.9,
    embedder: Any = None,
    detectors: Iterable[str] = DETECTORS,
    progress: Callable[[str], None] | None = None,
) -> DecontamReport:
    """Split ``tasks`` into those to keep and those that leak one of ``against`` (an evaluation set).

    Args:
        tasks: The synthesized tasks.
        against: The evaluation tasks (e.g. ``load_domain("tau3-banking", data_dir=...).tasks``).
        domain: The domain that plays ``tasks``; with it the ``state_change`` detector runs.
        against_domain: The domain that plays ``against`` (default: ``domain``).
        ngram: Word n-gram length of the ``ngram`` detector.
        ngram_threshold: Jaccard (or containment) at or above which scenarios are near-duplicates.
        embed_threshold: Cosine similarity at or above which scenarios are near-duplicates.
        embedder: None or ``"tfidf"`` (TF-IDF with numpy), ``"minilm"`` (sentence-transformers),
            or an object with ``encode(texts) -> array`` (or such a function).
        detectors: The detectors to run (default: all of :data:`DETECTORS`).
        progress: Called with each detector's name before it runs.
    """
    if isinstance(ngram, bool) or not isinstance(ngram, int) or ngram < 1:
        raise InvalidOptionError(f"decontaminate: ngram must be an integer >= 1, got {ngram!r}.")
    _check("ngram_threshold", ngram_threshold, 0.0, 1.0)
    _check("embed_threshold", embed_threshold, -1.0, 1.0)
    chosen = list(dict.fromkeys(detectors))
    unknown = [d for d in chosen if d not in DETECTORS]
    if unknown:
        raise InvalidOptionError(f"decontaminate: unknown detectors {unknown}; choose from {list(DETECTORS)}.")
    tasks, against = list(tasks), list(against)
    against_domain = against_domain if against_domain is not None else domain
    texts, atexts = [scenario_text(t) for t in tasks], [scenario_text(t) for t in against]
    found: dict[str, list[list[tuple[int, float]]]] = {}
    for det in chosen:
        if progress is not None:
            progress(det)
        if det == "chain":
            found[det] = _exact(
                [chain_signature(t) if _substantive(t) else None for t in tasks],
                [chain_signature(t) if _substantive(t) else None for t in against],
            )
        elif det == "chain_abstract":
            found[det] = _exact(
                [abstract_chain(t) if _substantive(t) else None for t in tasks],
                [abstract_chain(t) if _substantive(t) else None for t in against],
            )
        elif det == "ids":
            vocab = _vocabulary(domain) | _vocabulary(against_domain)  # product codes are not record ids
            found[det] = _overlap([_id_set(t) - vocab for t in tasks], [_id_set(t) - vocab for t in against])
        elif det == "state_change":
            if domain is None or against_domain is None:
                continue
            found[det] = _exact(
                [_safe_change(domain, t) for t in tasks], [_safe_change(against_domain, t) for t in against]
            )
        elif det == "ngram":
            found[det] = _ngram_scores(texts, atexts, ngram, ngram_threshold)
        elif det == "embedding":
            found[det] = _embedding_scores(texts, atexts, embed_threshold, embedder)
    kept: list[Task] = []
    removed: list[dict[str, Any]] = []
    by_detector: Counter[str] = Counter()
    for i, t in enumerate(tasks):
        reasons = []
        for det, rows in found.items():
            best = sorted(rows[i], key=lambda x: (-x[1], x[0]))[:3]
            reasons += [{"detector": det, "against_id": against[j].id, "score": round(s, 4)} for j, s in best]
        if reasons:
            removed.append({"id": t.id, "reasons": reasons})
            by_detector.update({r["detector"] for r in reasons})
        else:
            kept.append(t)
    settings = {
        "detectors": list(found),
        "ngram": ngram,
        "ngram_threshold": ngram_threshold,
        "embed_threshold": embed_threshold,
        "embedder": embedder if embedder is None or isinstance(embedder, str) else type(embedder).__name__,
        "against": len(against),
    }
    return DecontamReport(kept, removed, dict(by_detector), settings)
