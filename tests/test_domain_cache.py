"""Loaded domains live in one explicit, resettable cache; module-level tool tables are read-only.

``registry.clear_cache()`` gives fresh domains (tests no longer share one mutable Domain per process
without a way out); tau3-banking is keyed by its resolved data folder and retrieval setting, and a
cached domain does not see later changes of its files until the cache is cleared (documented).
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

import tau_env
from tau_env import registry
from tau_env.domains import harbor_bank
from tau_env.error import DomainError, ToolDefinitionError
from tau_env.registry import DomainCache, domain_cache
from tests.conftest import TAU3_DATA, needs_tau3_data


@pytest.fixture
def fresh():
    """Each test starts and ends with an empty cache (the next test file builds its own domains)."""
    registry.clear_cache()
    yield
    registry.clear_cache()


def test_clear_cache_gives_a_fresh_domain(fresh):
    a = tau_env.make("harbor-bank-v0")
    assert tau_env.make("harbor-bank-v0").domain is a.domain  # shared while cached ...
    assert harbor_bank.load() is a.domain  # ... by make and by the loader called directly
    box = a.domain.toolbox()
    registry.clear_cache()
    b = tau_env.make("harbor-bank-v0")
    assert b.domain is not a.domain and b.domain.toolbox() is not box  # nothing carried over
    assert tau_env.make("harbor-bank-v0").domain is b.domain
    assert a.domain.name == b.domain.name and [t.id for t in a.domain.tasks] == [t.id for t in b.domain.tasks]


def test_a_cache_is_bounded_and_least_recently_used_goes_first():
    cache = DomainCache(maxsize=2)
    built = []

    def build(key):
        built.append(key)
        return object()

    one = cache.get("one", lambda: build("one"))
    cache.get("two", lambda: build("two"))
    assert cache.get("one", lambda: build("one again")) is one  # a hit refreshes "one"
    cache.get("three", lambda: build("three"))  # evicts "two", the least recently used
    assert len(cache) == 2 and cache.get("one", lambda: build("x")) is one
    cache.get("two", lambda: build("two again"))
    assert built == ["one", "two", "three", "two again"]
    cache.clear()
    assert len(cache) == 0


def test_a_failed_build_is_not_cached():
    cache = DomainCache()

    def broken():
        raise DomainError("bad folder")

    with pytest.raises(DomainError, match="^bad folder$"):
        cache.get("k", broken)
    assert len(cache) == 0 and cache.get("k", lambda: "ok") == "ok"


def test_racing_builds_give_every_caller_the_same_domain():
    cache, barrier, got = DomainCache(), threading.Barrier(4), []

    def build():
        barrier.wait(timeout=30)  # all four threads miss, then build at once
        return object()

    threads = [threading.Thread(target=lambda: got.append(cache.get("k", build))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 4 and len({id(d) for d in got}) == 1


def test_module_level_tool_tables_are_read_only_definitions():
    from tau_env.domains.tau3_banking import toolkit
    from tau_env.domains.tau3_banking.prompts import RETRIEVAL
    from tau_env.knowledge import tools as knowledge_tools

    tables = [toolkit.AGENT_TOOLS, toolkit.USER_TOOLS, RETRIEVAL, knowledge_tools.RETRIEVAL_CONFIGS]
    for table in [*tables, knowledge_tools._ALL]:
        name = next(iter(table))
        with pytest.raises(TypeError, match="does not support item assignment"):
            table[name] = table[name]  # type: ignore[index]
    assert "get_user_information_by_id" in toolkit.AGENT_TOOLS and "KB_search" not in toolkit.AGENT_TOOLS

    def get_user_information_by_id(self, user_id):  # a second definition of an existing tool
        return ""

    before = dict(toolkit.AGENT_TOOLS)
    with pytest.raises(ToolDefinitionError, match=r"^tau3 tool 'get_user_information_by_id' is defined twice"):
        toolkit.agent_tool(get_user_information_by_id)
    assert dict(toolkit.AGENT_TOOLS) == before  # refused before anything changed


# --- tau3-banking: keyed by the resolved folder and the retrieval setting ---------------------------
def _trimmed_copy(root: Path) -> Path:
    """A small writable tau3 folder: the seed, every prompt, two tasks, a few documents."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(TAU3_DATA / "db.json", root / "db.json")
    shutil.copytree(TAU3_DATA / "prompts", root / "prompts")
    (root / "tasks").mkdir()
    for t in ("task_001", "task_002"):
        shutil.copyfile(TAU3_DATA / "tasks" / f"{t}.json", root / "tasks" / f"{t}.json")
    (root / "documents").mkdir()
    for p in sorted((TAU3_DATA / "documents").iterdir())[:5]:
        shutil.copyfile(p, root / "documents" / p.name)
    for p in root.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)  # the shared data is read-only
    return root


@needs_tau3_data
def test_tau3_is_keyed_by_resolved_folder_and_retrieval(fresh, tmp_path, monkeypatch):
    from tau_env.domains import tau3_banking

    root = _trimmed_copy(tmp_path / "data")
    (tmp_path / "link").symlink_to(root)
    a = tau3_banking.load(root)
    monkeypatch.chdir(tmp_path)
    assert tau3_banking.load("data") is a  # a relative path to the same folder
    assert tau3_banking.load(tmp_path / "link") is a  # a symlink to it
    monkeypatch.setenv("TAU3_BANKING_DATA", str(root))
    assert tau3_banking.load() is a and tau_env.make("tau3-banking").domain is a  # the variable, and make
    other = tau3_banking.load(root, retrieval="grep_only")
    assert other is not a and other.retrieval == "grep_only" and a.retrieval == "bm25"
    assert len(domain_cache) == 2


@needs_tau3_data
def test_tau3_cache_does_not_see_changed_files_until_cleared(fresh, tmp_path):
    """Documented: a cached domain is not rebuilt when its files change; clear_cache() reloads them."""
    from tau_env.domains import tau3_banking

    root = _trimmed_copy(tmp_path)
    a = tau3_banking.load(root)
    assert [t.id for t in a.tasks] == ["task_001", "task_002"]
    os.remove(root / "tasks" / "task_002.json")
    assert tau3_banking.load(root) is a and len(a.tasks) == 2  # stale on purpose: no file is re-read
    registry.clear_cache()
    b = tau3_banking.load(root)
    assert b is not a and [t.id for t in b.tasks] == ["task_001"]


def test_clear_cache_forgets_the_shared_embedding_model():
    from tau_env.knowledge import embed

    embed._DEFAULT = sentinel = object()
    assert embed.default_encoder() is sentinel
    tau_env.registry.clear_cache()
    assert embed._DEFAULT is None
