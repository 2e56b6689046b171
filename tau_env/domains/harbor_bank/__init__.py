"""Harbor Bank: the small bank shipped with tau_env, the embedded default and the worked example
of a domain (see docs/writing_a_domain.md). Its data lives next to this file.
"""

from __future__ import annotations

from pathlib import Path

from tau_env.domain import Domain, load_domain_dir
from tau_env.domains.harbor_bank.tools import TOOLS
from tau_env.registry import domain_cache

ROOT = Path(__file__).parent


def load() -> Domain:
    """The Harbor Bank domain, built once and kept in :data:`tau_env.registry.domain_cache`: every env
    of the process shares it (and the caches it fills) until ``tau_env.registry.clear_cache()``.
    """
    return domain_cache.get(("harbor-bank", str(ROOT)), lambda: load_domain_dir(ROOT, TOOLS))
