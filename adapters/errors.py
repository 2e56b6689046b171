"""The adapters' exception, and the lazy import of a framework with an error naming its extra."""

from __future__ import annotations

import importlib
from types import ModuleType

from tau_env.error import Error


class AdapterError(Error):
    """A framework adapter cannot run (its framework is missing or too old)."""


def require(module: str, extra: str, what: str) -> ModuleType:
    """Import ``module`` (a framework an adapter needs), or raise :class:`AdapterError` naming the extra.

    Args:
        module: The import name, e.g. ``"fastapi"``.
        extra: The tau-env extra that installs it, e.g. ``"openenv"``.
        what: What needs it, for the message, e.g. ``"tau-env serve"``.
    """
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise AdapterError(
            f"{what} needs the {module!r} package, which is not installed ({e}); "
            f"install it with: pip install 'tau-env[{extra}]'"
        ) from e
