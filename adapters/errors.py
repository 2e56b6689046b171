"""The adapters' exception, and the lazy import of a framework with an error naming its extra."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from tau_env.error import Error


class AdapterError(Error):
    """A framework adapter cannot run (its framework is missing or too old)."""


def require(module: str, extra: str, what: str, min_python: tuple[int, int] | None = None) -> ModuleType:
    """Import ``module`` (a framework an adapter needs), or raise :class:`AdapterError` naming the extra.

    Args:
        module: The import name, e.g. ``"fastapi"``.
        extra: The tau-env extra that installs it, e.g. ``"openenv"``.
        what: What needs it, for the message, e.g. ``"tau-env serve"``.
        min_python: The oldest Python the framework installs on (the extra's ``python_version``
            marker): on an older one the message says so, since the extra installs nothing there.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if min_python is not None and sys.version_info[:2] < min_python:
            need, have = ".".join(map(str, min_python)), ".".join(map(str, sys.version_info[:2]))
            raise AdapterError(
                f"{what} needs the {module!r} package, which needs Python >= {need}; this is Python {have}, "
                f"where pip install 'tau-env[{extra}]' installs nothing. Use a Python {need}+ environment "
                f"and run pip install 'tau-env[{extra}]' there."
            ) from e
        raise AdapterError(
            f"{what} needs the {module!r} package, which is not installed ({e}); "
            f"install it with: pip install 'tau-env[{extra}]'"
        ) from e
