"""Harbor Bank: the small bank shipped with tau_env, the embedded default and the worked example
of a domain (see docs/writing_a_domain.md). Its data lives next to this file.
"""

from __future__ import annotations

import functools
from pathlib import Path

from tau_env.domain import Domain, load_domain_dir
from tau_env.domains.harbor_bank.tools import TOOLS

ROOT = Path(__file__).parent


@functools.cache
def _load() -> Domain:
    return load_domain_dir(ROOT, TOOLS)


def load() -> Domain:
    """The Harbor Bank domain (built once per process; its caches are shared by every env)."""
    return _load()
