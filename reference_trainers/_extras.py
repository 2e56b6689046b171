"""What a trainer's command says when its extra is missing: one line, not an import traceback.

The commands of the ``train`` extra (``sft``, ``grpo``, ``dagger``) import :mod:`._train_extra`
before torch. Run as ``python -m tau_env.reference_trainers.X`` (``--help`` included), a missing
package is one ``python -m ...: error: ...`` line and exit status 2; imported from Python it is a
:class:`tau_env.error.DependencyNotInstalled` (an ``ImportError``).
"""

from __future__ import annotations

import importlib
import sys

from tau_env.error import DependencyNotInstalled

PACKAGE = "tau_env.reference_trainers"


def missing(*imports: str) -> list[str]:
    """The first module of ``imports`` that is not installed, as a list (empty: all import); the rest
    are not tried (transformers warns on import when torch is missing).

    Raises:
        DependencyNotInstalled: One is installed but does not import (a version clash among its own
            dependencies): the import's own message, which installing the extra again would not fix.
    """
    for name in imports:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] != name:  # the package is there; something it needs is not
                raise DependencyNotInstalled(f"{name} is installed but does not import: {e}") from e
            return [name]
        except ImportError as e:
            raise DependencyNotInstalled(f"{name} is installed but does not import: {e}") from e
    return []


def _running() -> str:
    """The ``tau_env.reference_trainers`` command run as ``python -m`` (``""`` when imported)."""
    name = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None) or ""
    return name if name.startswith(PACKAGE + ".") else ""


def require(extra: str, *imports: str) -> None:
    """Import ``imports``; when one is missing, say which extra installs it (see the module's docstring)."""
    try:
        gone = missing(*imports)
    except DependencyNotInstalled as e:
        if _running():
            print(f"python -m {_running()}: error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        raise
    if not gone:
        return
    said = f"needs the '{extra}' extra ({', '.join(gone)} not installed): pip install 'tau-env[{extra}]'"
    if _running():
        print(f"python -m {_running()}: error: {said}", file=sys.stderr)
        raise SystemExit(2)
    raise DependencyNotInstalled(f"{PACKAGE} {said}")
