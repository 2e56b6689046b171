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
    """The first module of ``imports`` that cannot be imported, as a list (empty: all can be); the
    rest are not tried (transformers warns on import when torch is missing).
    """
    for name in imports:
        try:
            importlib.import_module(name)
        except ImportError:
            return [name]
    return []


def require(extra: str, *imports: str) -> None:
    """Import ``imports``; when one is missing, say which extra installs it (see the module's docstring)."""
    gone = missing(*imports)
    if not gone:
        return
    said = f"needs the '{extra}' extra ({', '.join(gone)} not installed): pip install 'tau-env[{extra}]'"
    running = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None) or ""
    if running.startswith(PACKAGE + "."):
        print(f"python -m {running}: error: {said}", file=sys.stderr)
        raise SystemExit(2)
    raise DependencyNotInstalled(f"{PACKAGE} {said}")
