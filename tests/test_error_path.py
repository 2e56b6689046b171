"""One error path: every caller error is a ``tau_env.error`` class, and ``make`` names the call.

The named errors also inherit the builtin they replace (``InvalidOptionError`` is a ``ValueError``),
so ``except ValueError`` code written against older versions keeps working.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tau_env
from tau_env import registry
from tau_env.error import DomainError, Error, InvalidOptionError

PACKAGE = Path(tau_env.__file__).parent

#: Builtin exceptions still raised inside tau_env on purpose: none reaches a caller as a caller error.
INTERNAL_RAISES = {
    ("domains/tau3_banking/store.py", "ValueError"): "its only caller names the task and raises DomainError",
    ("knowledge/__init__.py", "RuntimeError"): "the grep worker cannot start: the calling tool's internal error",
    ("knowledge/__init__.py", "TimeoutError"): "caught by the grep worker's client",
    ("knowledge/__init__.py", "EOFError"): "caught by the grep worker's client",
    ("llm/__init__.py", "AttributeError"): "a module __getattr__ must raise it",
    ("llm/http.py", "ValueError"): "a server's malformed reply, turned into ServerConnectionError",
}
#: ``assert`` statements left in tau_env: internal invariants only (``python -O`` drops them).
INTERNAL_ASSERTS = {"llm/http.py": 1, "testing.py": 1}


def _builtin_raises() -> list[tuple[str, str, int]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                cls = getattr(builtins, exc.id, None) if isinstance(exc, ast.Name) else None
                if isinstance(cls, type) and issubclass(cls, BaseException):
                    found.append((rel, exc.id, node.lineno))
    return found


def test_no_caller_error_is_a_bare_builtin():
    unexpected = [
        f"{f}:{line}: raise {name}" for f, name, line in _builtin_raises() if (f, name) not in INTERNAL_RAISES
    ]
    assert not unexpected, "raise a tau_env.error class (or list an internal one here, with why):\n" + "\n".join(
        unexpected
    )


def test_asserts_are_internal_invariants_only():
    counts: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        n = sum(isinstance(node, ast.Assert) for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))))
        if n:
            counts[path.relative_to(PACKAGE).as_posix()] = n
    assert counts == INTERNAL_ASSERTS


def test_the_error_module_is_exported():
    assert tau_env.error is importlib.import_module("tau_env.error")
    assert issubclass(tau_env.error.InvalidOptionError, (tau_env.error.Error, ValueError))


# --- make names the call ----------------------------------------------------------------------------
def test_make_wraps_a_loader_error_with_the_id_and_the_arguments():
    with pytest.raises(
        DomainError,
        match=r"^make\('tau3-banking', data_dir='x', retrieval='bm52'\): x is not a tau3-banking data folder",
    ):
        tau_env.make("tau3-banking", data_dir="x", retrieval="bm52")
    with pytest.raises(InvalidOptionError, match=r"^load_domain\('harbor-bank-v0', data_dri=1\): unknown keyword"):
        registry.load_domain("harbor-bank-v0", data_dri=1)
    with pytest.raises(InvalidOptionError, match=r"^make\('harbor-bank-v0', max_steps=0\): max_steps must be"):
        tau_env.make("harbor-bank-v0", max_steps=0)


class _BadRepr:
    def __repr__(self):
        raise RuntimeError("no repr")


def test_the_arguments_shown_are_abridged_and_safe():
    cases = {
        "long": ("y" * 10_000, r"'y{20,}\.\.\.y+'"),
        "list": (list(range(10_000)), r"\[0, 1, 2, 3, 4, 5, \.\.\.\]"),
        "huge-int": (10**5000, r"<int>"),
        "bad-repr": (_BadRepr(), r"<_BadRepr( instance at 0x[0-9a-f]+)?>"),
        "surrogate": ("\ud800", r"'\\ud800'"),
    }
    for value, shown in cases.values():
        with pytest.raises(InvalidOptionError, match=rf"^make\('harbor-bank-v0', size={shown}\): unknown keyword") as e:
            tau_env.make("harbor-bank-v0", size=value)
        str(e.value).encode("utf-8")  # printable, loggable
        assert len(str(e.value).partition("): ")[0]) < 400


@settings(max_examples=60, deadline=None)
@given(
    kwargs=st.dictionaries(
        st.sampled_from(["retrieval", "max_steps", "task_ids", "render_mode", "strict_tools", "data_dir", "x"]),
        st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=300), st.lists(st.text(max_size=5))),
        max_size=3,
    )
)
def test_make_raises_only_named_errors_that_start_with_the_call(kwargs):
    try:
        tau_env.make("harbor-bank-v0", **kwargs)
    except Error as e:
        assert str(e).startswith("make('harbor-bank-v0'" + ("" if not kwargs else ", "))
        assert re.match(r"^make\(.{0,400}?\): ", str(e), re.S)


# --- the same unknown retrieval setting, the same error, on every path -----------------------------------
@pytest.mark.parametrize(
    "path",
    [
        lambda d, k: tau_env.knowledge.tools.knowledge_tools(k),
        lambda d, k: d.toolbox(k),
        lambda d, k: d.system_prompt(k),
    ],
    ids=["knowledge_tools", "toolbox", "system_prompt"],
)
def test_unknown_retrieval_is_invalid_option_on_harbor_paths(path):
    domain = registry.load_domain("harbor-bank-v0")
    with pytest.raises(InvalidOptionError, match=r"^Unknown retrieval configuration 'bm52'; expected one of \[.*\]\."):
        path(domain, "bm52")


def test_other_caller_errors_are_named_and_keep_their_builtin_type():
    from tau_env.knowledge import KnowledgeBase
    from tau_env.llm import http

    kb = KnowledgeBase(registry.load_domain("harbor-bank-v0").documents)
    with pytest.raises(InvalidOptionError, match=r"^Unknown search method 'bm52'; expected 'bm25', 'dense' or"):
        kb.search("x", method="bm52")
    with pytest.raises(ValueError, match=r"^Expected an http:// or https:// base URL, got 'ftp://x'\.$") as e:
        http.ConnectionPool("ftp://x")
    assert isinstance(e.value, InvalidOptionError)


def test_local_client_needs_the_tokenizer_of_a_loaded_model():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tau_env.llm.local import TransformersClient

    with pytest.raises(InvalidOptionError, match=r"^A loaded model \(object\) needs its tokenizer: pass tokenizer="):
        TransformersClient(object())


@pytest.mark.parametrize("bad", [["bm25"], {"a": 1}, 7])
def test_a_non_string_retrieval_on_the_domain_is_invalid_option(bad):
    domain = tau_env.registry.load_domain("harbor-bank-v0")
    for call in (domain.toolbox, domain.system_prompt):
        with pytest.raises(InvalidOptionError, match=r"retrieval"):
            call(bad)


class _NoRepr:
    """A value whose repr and str raise: an error message about it must not raise in turn."""

    def __repr__(self):
        raise RuntimeError("repr of a hostile value")

    __str__ = __repr__


def _chat_client(*args, **kwargs):
    from tau_env.llm import ChatClient

    return ChatClient(*args, **kwargs)


def test_shown_never_raises():
    from tau_env.error import shown

    assert shown(_NoRepr()) == "<_NoRepr>"
    assert shown("x" * 500, 20) == repr("x" * 500)[:17] + "..."
    assert shown(10**5000) == "<int>"


@pytest.mark.parametrize(
    "call",
    [
        lambda v: tau_env.evaluate("harbor-bank-v0", tau_env.NoopAgent, tau_env.ScriptedUser, trials=v),
        lambda v: tau_env.evaluate("harbor-bank-v0", tau_env.NoopAgent, tau_env.ScriptedUser, config=v),
        lambda v: tau_env.evaluate(v, tau_env.NoopAgent, tau_env.ScriptedUser),
        lambda v: _chat_client("m", v),
        lambda v: _chat_client("m", "http://127.0.0.1:1/v1", backend=v),
        lambda v: tau_env.make("harbor-bank-v0", max_steps=v),
    ],
)
def test_a_value_whose_repr_raises_still_gets_a_named_error(call):
    """Caller-facing error messages format values with tau_env.error.shown, which cannot raise."""
    with pytest.raises(tau_env.error.Error):
        call(_NoRepr())
