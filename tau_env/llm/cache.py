"""A response cache keyed by the exact request: same conversation prefix, same reply.

Makes repeated evaluations reproducible (a simulated user answers identically) and cheaper.
Stored in one SQLite file, safe to share between processes.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any


class ResponseCache:
    """``key(request) -> reply`` in ``path`` (an SQLite file)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, timeout=30, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, reply TEXT NOT NULL)")
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __getstate__(self) -> dict[str, Any]:  # for Ray workers: reopen the file there
        return {"path": str(self.path)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"])  # type: ignore[misc]

    def __deepcopy__(self, memo: dict[int, Any]) -> ResponseCache:
        return self  # one cache file, shared by every copy of a policy

    @staticmethod
    def key(request: dict[str, Any]) -> str:
        """The request's digest (lone surrogates, which JSON text from a server may hold, included)."""
        text = json.dumps(request, sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()

    def get(self, request: dict[str, Any]) -> dict[str, Any] | None:
        return self.lookup(self.key(request))

    def put(self, request: dict[str, Any], reply: dict[str, Any]) -> None:
        self.store(self.key(request), reply)

    def lookup(self, key: str) -> dict[str, Any] | None:
        """The reply stored under ``key`` (from :meth:`key`), or None."""
        with self._lock:
            row = self._conn.execute("SELECT reply FROM replies WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return json.loads(row[0])

    def store(self, key: str, reply: dict[str, Any]) -> None:
        """Keep ``reply`` under ``key``; stored as ASCII JSON, so any string a reply holds fits."""
        with self._lock:
            self._conn.execute("INSERT OR REPLACE INTO replies VALUES (?, ?)", (key, json.dumps(reply)))

    def close(self) -> None:
        self._conn.close()
