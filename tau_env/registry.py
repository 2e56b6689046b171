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

from tau_env.error import Error, InvalidOptionError, RegistrationError, UnknownEnvError, did_you_mean

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

    def loader(self) -> Callable[..., Domain]:
        fn = self.entry_point
        if isinstance(fn, str):
            module, _, attr = fn.partition(":")
            fn = getattr(importlib.import_module(module), attr)
        return fn

    def load_domain(self, **kwargs: Any) -> Domain:
        fn = self.loader()
        _check_keywords(self.id, fn, kwargs)
        try:
            return fn(**kwargs)
        except Error as e:
            raise _with_id(e, self.id) from e
        except (TypeError, ValueError) as e:  # a loader rejecting a setting's type or value
            raise InvalidOptionError(f"make({self.id!r}): {e}") from e


def _check_keywords(id: str, fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """Refuse keywords that neither the env nor the domain's loader takes, naming the ones that exist."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # pragma: no cover - a builtin without a signature
        return
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    known = [n for n, p in params.items() if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)]
    unknown = [k for k in kwargs if k not in known]
    if unknown:
        word = str(unknown[0])
        raise InvalidOptionError(
            f"make({id!r}) got an unknown keyword {word[:80]!r}; env settings are {list(ENV_KWARGS)}, "
            f"the domain's loader takes {known}.{did_you_mean(word, [*ENV_KWARGS, *known]) if len(word) < 100 else ''}"
        )


def _with_id(e: Error, id: str) -> Error:
    """``e`` with the env id in front of its message (the same exception type)."""
    try:
        return type(e)(f"make({id!r}): {e}")
    except Exception:  # pragma: no cover - an error type with another constructor
        return e


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
        if not isinstance(id, str):
            raise UnknownEnvError(f"Env ids are strings such as 'harbor-bank-v0', got {type(id).__name__}.")
        try:
            return self.specs[id]
        except KeyError:
            raise UnknownEnvError(
                f"No environment {id[:80]!r} is registered; registered ids: {sorted(self.specs)}."
                + (did_you_mean(id, self.specs) if len(id) < 100 else "")
            ) from None

    def load_domain(self, id: str, **kwargs: Any) -> Domain:
        spec = self.spec(id)
        merged = {**spec.kwargs, **kwargs}
        return spec.load_domain(**{k: v for k, v in merged.items() if k not in ENV_KWARGS})

    def make(self, id: str, **kwargs: Any) -> TauEnv:
        """Build the env ``id``; env settings (``max_steps``, ``retrieval``, ...) and loader settings
        (e.g. ``data_dir``) may be mixed in ``kwargs``.

        Raises:
            UnknownEnvError: ``id`` is not registered.
            InvalidOptionError: A keyword that neither the env nor the loader takes, or a bad value.
            tau_env.error.Error: Any other tau_env error of the loader or the env, its message
                prefixed with ``make('<id>'):``.
        """
        from tau_env.env import TauEnv

        spec = self.spec(id)
        merged = {**spec.kwargs, **kwargs}
        env_kw = {k: v for k, v in merged.items() if k in ENV_KWARGS}
        domain = spec.load_domain(**{k: v for k, v in merged.items() if k not in ENV_KWARGS})
        try:
            return TauEnv(domain, **env_kw)
        except Error as e:
            raise _with_id(e, id) from e

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
