"""The registry of environment ids and ``make``.

Ids look like ``"harbor-bank-v0"``. A spec names an entry point that returns a
:class:`~tau_env.domain.Domain`; ``make`` wraps it in a :class:`~tau_env.env.TauEnv`.
Tests can work on a copy: ``with registry.scoped(): register(...)``.

The shipped loaders keep the domains they build in :data:`domain_cache` (one per data folder and
setting), so every env of a process shares them; ``registry.clear_cache()`` forgets them all.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import re
import reprlib
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tau_env.error import Error, InvalidOptionError, RegistrationError, UnknownEnvError, did_you_mean
from tau_env.messages import clip, escape_surrogates

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
        """The domain the loader builds with ``kwargs`` (loader settings only, not env settings).

        Raises:
            InvalidOptionError: A keyword the loader does not take, or one it rejects with a
                ``TypeError``/``ValueError``; the message starts with the call, e.g.
                ``load_domain('tau3-banking', data_dir='x'): ``.
            tau_env.error.Error: Any tau_env error of the loader, the same type, the message
                prefixed the same way.
        """
        return self._load(kwargs, lambda: call_text("load_domain", self.id, kwargs))

    def _load(self, kwargs: dict[str, Any], call: Callable[[], str]) -> Domain:
        """``call()`` gives the call's text for an error message (built only when one is raised).

        ``tasks`` (a task file's path or a list of tasks) is not the loader's: the loaded domain
        plays those tasks instead of its own (:meth:`Domain.with_tasks`).
        """
        kwargs = dict(kwargs)
        tasks = kwargs.pop("tasks", None)
        fn = self.loader()
        _check_keywords(call, fn, kwargs)
        try:
            domain = fn(**kwargs)
            return domain if tasks is None else domain.with_tasks(tasks)
        except Error as e:
            raise _prefixed(e, call()) from e
        except (TypeError, ValueError) as e:  # a loader rejecting a setting's type or value
            raise InvalidOptionError(f"{call()}: {e}") from e


_REPR = reprlib.Repr()
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxlevel = 2


def _shown(value: Any) -> str:
    """A short ``repr`` of an argument (long strings and containers abridged)."""
    try:
        return _REPR.repr(value)
    except Exception:  # a repr that raises (or an int too long to print)
        return f"<{type(value).__name__}>"


def call_text(function: str, id: str, kwargs: Mapping[str, Any]) -> str:
    """The call as the caller wrote it, for an error message: ``make('id', key=value, ...)``, clipped."""
    args = [
        repr(clip(escape_surrogates(id), 80)),
        *(f"{clip(escape_surrogates(str(k)), 40)}={_shown(v)}" for k, v in kwargs.items()),
    ]
    return f"{function}({clip(', '.join(args), 300)})"


def _check_keywords(call: Callable[[], str], fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """Refuse keywords that neither the env nor the domain's loader takes, naming the ones that exist."""
    if not kwargs:  # nothing to refuse (reading the signature costs more than making an env)
        return
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
            f"{call()}: unknown keyword {clip(escape_surrogates(word), 80)!r}; env settings are {list(ENV_KWARGS)}, "
            f"the domain's loader takes {known}.{did_you_mean(word, [*ENV_KWARGS, *known]) if len(word) < 100 else ''}"
        )


def _prefixed(e: Error, call: str) -> Error:
    """``e`` with the call in front of its message (the same exception type)."""
    try:
        return type(e)(f"{call}: {e}")
    except Exception:  # pragma: no cover - an error type with another constructor
        return e


class DomainCache:
    """Domains built by loaders, one per key, shared by every env made with the same settings.

    The shipped loaders key their domain by what defines it (tau3-banking: the resolved data folder
    and the retrieval setting), so ``make`` is cheap after the first time. A cached domain is not
    rebuilt when its files change on disk: call ``registry.clear_cache()`` to load them again (tests
    do so for a fresh domain). At most ``maxsize`` domains are kept, the least recently used dropped.
    """

    def __init__(self, maxsize: int = 16) -> None:
        self.maxsize = maxsize
        self._domains: OrderedDict[Hashable, Domain] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, build: Callable[[], Domain]) -> Domain:
        """The domain cached under ``key``, else ``build()``'s (cached; errors are not)."""
        with self._lock:
            if key in self._domains:
                self._domains.move_to_end(key)
                return self._domains[key]
        domain = build()  # outside the lock: a slow build does not hold up other keys
        with self._lock:
            domain = self._domains.setdefault(key, domain)  # two racing builds: every caller gets one
            while len(self._domains) > self.maxsize:
                self._domains.popitem(last=False)
        return domain

    def clear(self) -> None:
        """Forget every domain: the next load builds a fresh one."""
        with self._lock:
            self._domains.clear()

    def __len__(self) -> int:
        return len(self._domains)


#: The cache of the shipped loaders (``harbor-bank-v0``, ``tau3-banking``).
domain_cache = DomainCache()


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
        """The domain of ``id`` (``kwargs`` as for ``make``; env settings are ignored).

        Raises what :meth:`make` raises for the loader, the message prefixed with
        ``load_domain('<id>', <arguments given>):``.
        """
        spec = self.spec(id)
        merged = {**spec.kwargs, **kwargs}
        call = lambda: call_text("load_domain", id, kwargs)  # noqa: E731
        return spec._load({k: v for k, v in merged.items() if k not in ENV_KWARGS}, call)

    def make(self, id: str, **kwargs: Any) -> TauEnv:
        """Build the env ``id``; env settings (``max_steps``, ``retrieval``, ...) and loader settings
        (e.g. ``data_dir``) may be mixed in ``kwargs``.

        Errors of the loader and of the env name the call, as Gymnasium's ``make`` does: their
        message starts with ``make('<id>', <the arguments given>): `` (values abridged).

        Raises:
            UnknownEnvError: ``id`` is not registered.
            InvalidOptionError: A keyword that neither the env nor the loader takes, or a bad value
                (a loader's own ``TypeError``/``ValueError`` becomes one).
            tau_env.error.Error: Any other tau_env error of the loader or the env, the same type.
        """
        from tau_env.env import TauEnv

        spec = self.spec(id)
        merged = {**spec.kwargs, **kwargs}
        call = lambda: call_text("make", id, kwargs)  # noqa: E731  (only an error needs the text)
        env_kw = {k: v for k, v in merged.items() if k in ENV_KWARGS}
        domain = spec._load({k: v for k, v in merged.items() if k not in ENV_KWARGS}, call)
        try:
            return TauEnv(domain, **env_kw)
        except Error as e:
            raise _prefixed(e, call()) from e

    def ids(self) -> list[str]:
        return sorted(self.specs)

    def clear_cache(self) -> None:
        """Forget the domains the shipped loaders cached: the next ``make`` builds fresh ones
        (reading their files again), and the shared embedding model.
        """
        domain_cache.clear()
        if "tau_env.knowledge.embed" in sys.modules:  # never import torch just to clear
            sys.modules["tau_env.knowledge.embed"].clear_default_encoder()

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
