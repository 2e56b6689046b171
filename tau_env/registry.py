"""The registry of environment ids and ``make``.

Ids look like ``"harbor-bank-v0"``. A spec names an entry point that returns a
:class:`~tau_env.domain.Domain`; ``make`` wraps it in a :class:`~tau_env.env.TauEnv`.
Tests can work on a copy: ``with registry.scoped(): register(...)``.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tau_env.error import RegistrationError, UnknownEnvError, did_you_mean

if TYPE_CHECKING:
    from tau_env.domain import Domain
    from tau_env.env import TauEnv

_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")
#: Keyword arguments of ``make`` that go to the env; all others go to the domain's loader.
ENV_KWARGS = ("max_steps", "retrieval", "task_ids", "strict_tools", "render_mode")


@dataclass
class EnvSpec:
    """How to build one registered environment."""

    id: str
    entry_point: str | Callable[..., Domain]
    kwargs: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    def load_domain(self, **kwargs: Any) -> Domain:
        fn = self.entry_point
        if isinstance(fn, str):
            module, _, attr = fn.partition(":")
            fn = getattr(importlib.import_module(module), attr)
        return fn(**kwargs)


class Registry:
    def __init__(self) -> None:
        self.specs: dict[str, EnvSpec] = {}

    def register(
        self, id: str, entry_point: str | Callable[..., Domain], *, description: str = "", **kwargs: Any
    ) -> EnvSpec:
        """Register ``id``; ``kwargs`` are defaults passed to ``make``."""
        if not _ID.match(id):
            raise RegistrationError(
                f"Env id {id!r} must be lower-case letters, digits, '-', '_' or '.', e.g. 'my-bank-v0'."
            )
        if id in self.specs:
            raise RegistrationError(f"Env id {id!r} is already registered; pick another id or use registry.scoped().")
        spec = self.specs[id] = EnvSpec(id, entry_point, dict(kwargs), description)
        return spec

    def spec(self, id: str) -> EnvSpec:
        try:
            return self.specs[id]
        except KeyError:
            raise UnknownEnvError(
                f"No environment {id!r} is registered; registered ids: {sorted(self.specs)}."
                + did_you_mean(id, self.specs)
            ) from None

    def load_domain(self, id: str, **kwargs: Any) -> Domain:
        spec = self.spec(id)
        merged = {**spec.kwargs, **kwargs}
        return spec.load_domain(**{k: v for k, v in merged.items() if k not in ENV_KWARGS})

    def make(self, id: str, **kwargs: Any) -> TauEnv:
        """Build the env ``id``; env settings (``max_steps``, ``retrieval``, ...) and loader settings
        (e.g. ``data_dir``) may be mixed in ``kwargs``.
        """
        from tau_env.env import TauEnv

        spec = self.spec(id)
        merged = {**spec.kwargs, **kwargs}
        env_kw = {k: v for k, v in merged.items() if k in ENV_KWARGS}
        unknown = [k for k in env_kw if k not in inspect.signature(TauEnv).parameters]
        if unknown:  # pragma: no cover - ENV_KWARGS mirrors TauEnv's signature
            raise TypeError(f"Unknown env settings {unknown}.")
        domain = spec.load_domain(**{k: v for k, v in merged.items() if k not in ENV_KWARGS})
        return TauEnv(domain, **env_kw)

    def ids(self) -> list[str]:
        return sorted(self.specs)

    @contextmanager
    def scoped(self) -> Iterator[Registry]:
        """Changes made inside the block are undone when it exits (for tests)."""
        saved = copy.copy(self.specs)
        try:
            yield self
        finally:
            self.specs = saved


registry = Registry()
register = registry.register
make = registry.make
spec = registry.spec
