"""A small on-disk cache for data that tau_env derives from a domain's files (e.g. grading targets).

Files live in ``cache_dir()/<namespace>/<key>/<name>``. The key is a hash of everything the cached
data depends on (see :func:`code_fingerprint` and the caller's own inputs), so changed inputs give
a new folder and stale files are never looked up. The most recently written :data:`KEEP` folders
of a namespace are kept; older ones are removed.

Each file is ``MAGIC``, the SHA-256 of the payload in hex, a newline, then the payload. A reader
checks all three and treats any mismatch (a truncated, corrupt or foreign file) as a miss; the
caller then computes the data again and :meth:`DiskCache.put` overwrites the file. Writers write
a temporary file in the same folder and ``os.replace`` it into place, so concurrent writers never
interleave and a reader sees a whole old file, a whole new file, or none.

The cache is an optimisation only: a folder that cannot be created or written (read-only,
missing parent, a file in the way) gives one :class:`RuntimeWarning` per folder and process, and
everything works as without a cache.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sqlite3
import sys
import tempfile
import warnings
from pathlib import Path

__all__ = ["MAGIC", "KEEP", "DiskCache", "cache_dir", "cache_key", "code_fingerprint"]

#: First bytes of every cache file (the format's version is in it).
MAGIC = b"tau_env-cache 1\n"
#: Key folders kept per namespace (the most recently written).
KEEP = 8
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
_warned: set[str] = set()
_code_fingerprint: list[str] = []


def cache_dir() -> Path:
    """``$TAU_ENV_CACHE`` or ``~/.cache/tau_env`` (the same rule as the embeddings cache)."""
    return Path(os.environ.get("TAU_ENV_CACHE") or Path.home() / ".cache" / "tau_env")


def cache_key(*parts: str) -> str:
    """A folder name for the inputs ``parts``: 32 hex digits of their SHA-256."""
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def code_fingerprint() -> str:
    """The code that derived data depends on: tau_env's version, Python's and SQLite's versions, and
    the names and contents of tau_env's source files (about 1 ms, once per process).

    The source files count because an editable install keeps its version while its code changes.
    """
    if not _code_fingerprint:
        from tau_env import __version__

        h = hashlib.sha256(f"{__version__}\0{sys.version_info[:2]}\0{sqlite3.sqlite_version}\0".encode())
        package = Path(__file__).resolve().parent
        for path in sorted(package.rglob("*.py")):
            h.update(f"{path.relative_to(package).as_posix()}\0".encode("utf-8", "surrogatepass"))
            try:
                h.update(path.read_bytes())
            except OSError:  # unreadable source: its name alone is in the key
                pass
            h.update(b"\0")
        _code_fingerprint.append(h.hexdigest())
    return _code_fingerprint[0]


def _file_name(name: str) -> str:
    """``name`` itself when it is a plain file name, else the SHA-256 of it."""
    return name if _SAFE_NAME.fullmatch(name) else hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


class DiskCache:
    """Checked, atomically written files under ``cache_dir()/namespace/key`` (see the module docstring)."""

    def __init__(self, namespace: str, key: str, root: Path | None = None) -> None:
        self.folder = (root if root is not None else cache_dir()) / namespace / key
        self._pruned = False

    def get(self, name: str) -> bytes | None:
        """The payload stored under ``name``, or None if it is missing, unreadable, truncated or corrupt."""
        try:
            data = (self.folder / _file_name(name)).read_bytes()
        except (OSError, ValueError):  # missing, a folder, no permission, a name the OS refuses
            return None
        head = len(MAGIC) + 65
        if len(data) < head or not data.startswith(MAGIC) or data[head - 1 : head] != b"\n":
            return None
        payload = data[head:]
        if hashlib.sha256(payload).hexdigest().encode() != data[len(MAGIC) : head - 1]:
            return None
        return payload

    def put(self, name: str, payload: bytes) -> bool:
        """Store ``payload`` under ``name`` (atomically); False, with one warning per folder, if it cannot."""
        tmp = None
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload)
            os.replace(tmp, self.folder / _file_name(name))
        except (OSError, ValueError) as e:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            if str(self.folder) not in _warned:
                _warned.add(str(self.folder))
                warnings.warn(
                    f"tau_env: cannot write the cache folder {self.folder} ({e}); working without an "
                    "on-disk cache. Set TAU_ENV_CACHE to a writable folder to keep derived data between runs.",
                    RuntimeWarning,
                    stacklevel=3,
                )
            return False
        if not self._pruned:
            self._pruned = True
            self._prune()
        return True

    def _prune(self) -> None:
        """Remove the namespace's key folders beyond the :data:`KEEP` most recently written."""
        try:
            folders = [p for p in self.folder.parent.iterdir() if p.is_dir() and p != self.folder]
            folders.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        except OSError:  # another process removed one meanwhile: prune next time
            return
        for old in folders[KEEP - 1 :]:
            shutil.rmtree(old, ignore_errors=True)
