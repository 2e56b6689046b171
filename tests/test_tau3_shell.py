"""The tau3-banking ``shell`` tool: the benchmark's recorded outputs, its filter and layout, and the sandbox.

Replays ``../shared/data/tau3_banking_golden/shell/commands.jsonl`` (and the shell calls of the
recorded ``terminal_use`` requests) through our sandbox and compares the agent's text exactly,
except the records the golden README marks machine-dependent and the escapes we block on purpose
(for those: nothing outside the knowledge base shows). Tests that run commands skip without
``bwrap`` (and fail under ``CI``, whose ``.ci/run`` installs it).
"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import os
import secrets
import shutil
import sqlite3
import threading
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tau_env.domains.tau3_banking import shell as sh
from tau_env.error import DependencyNotInstalled, DomainError
from tau_env.knowledge import Document
from tau_env.tools import Toolbox, ToolContext
from tests.conftest import TAU3_DATA, TAU3_GOLDEN, needs_shared

SHELL_DIR = TAU3_GOLDEN / "shell"
pytestmark = needs_shared(TAU3_DATA, SHELL_DIR)


def _bwrap_missing() -> str | None:
    if shutil.which("bwrap"):
        return None
    if os.environ.get("CI"):
        pytest.fail("bwrap is missing and CI is set: .ci/run must install bubblewrap", pytrace=False)
    return "needs bubblewrap (apt-get install bubblewrap)"


@pytest.fixture
def bwrap():
    why = _bwrap_missing()
    if why:
        pytest.skip(why)


def _records() -> list[dict]:
    path = SHELL_DIR / "commands.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


RECORDS = _records()
#: Reads outside the knowledge base that the benchmark's sandbox allowed (or answered from the host):
#: ours shows nothing outside it. Listed in docs/tau3_banking.md.
DELIBERATE = {
    "esc_cd_root": "Error (exit code 1): head: cannot open 'etc/os-release' for reading: No such file or directory\n",
    "esc_quoted_abs": (
        "Error (exit code 1): head: cannot open '/etc/os-release' for reading: No such file or directory\n"
    ),
    "esc_quoted_passwd": "Error (exit code 1): cat: /etc/passwd: No such file or directory\n",
    "esc_quoted_dotdot": "Error (exit code 1): cat: ../srt-settings.json: No such file or directory\n",
    "esc_dirname_pwd": "knowledge_base\n",
    "esc_backticks": "8\n",  # the sandbox's own / (bin dev etc lib lib64 sbin tmp usr)
    "esc_quoted_home": "/home/kb_user\n",
    "esc_home_config": "0\n",
    "esc_srt_option": "Error (exit code 127): /usr/bin/bash: line 1: --version: command not found\n",
}
SANDBOX_ROOT = {"bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "sbin", "tmp", "usr"}


@pytest.fixture(scope="module")
def documents() -> list[Document]:
    from tau_env.domains.tau3_banking.data import load

    return load(TAU3_DATA).documents


@pytest.fixture(scope="module")
def domain(documents):
    return SimpleNamespace(documents=documents)


def _ctx() -> ToolContext:
    return ToolContext(conn=sqlite3.connect(":memory:"), now=datetime(2025, 11, 14))


@pytest.fixture(scope="module")
def ro(domain):
    if _bwrap_missing():
        pytest.skip("needs bubblewrap")
    return sh.shell_tools(domain, write=False)[0]


def run(tool, command, ctx=None):
    return tool.fn(ctx or _ctx(), command=command)


# --- no sandbox needed ---------------------------------------------------------------------------
def test_layout_is_the_benchmarks_byte_for_byte(documents):
    manifest = json.loads((SHELL_DIR / "layout_manifest.json").read_text())
    files = sh.kb_files(documents)
    assert {n: hashlib.sha256(b).hexdigest() for n, b in files.items()} == {
        f["name"]: f["sha256"] for f in manifest["files"]
    }
    assert sum(map(len, files.values())) == manifest["total_bytes"]


def test_cache_is_the_layout_with_the_benchmarks_modes(documents):
    path = sh.kb_cache(documents)
    assert {p.name: p.read_bytes() for p in path.iterdir()} == sh.kb_files(documents)
    assert {oct(p.stat().st_mode & 0o777) for p in path.iterdir()} == {"0o644"}
    assert oct(path.stat().st_mode & 0o777) == "0o755"


def test_concurrent_builders_agree_and_leave_no_partial_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("TAU_ENV_CACHE", str(tmp_path))
    docs = [Document(f"d/{i}", f"T{i}", secrets.token_hex(8)) for i in range(50)]
    paths, errors = [], []

    def build():
        try:
            paths.append(sh.kb_cache(docs))
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(paths)) == 1
    assert {p.name: p.read_bytes() for p in paths[0].iterdir()} == sh.kb_files(docs)
    assert [p.name for p in paths[0].parent.iterdir()] == ["knowledge_base"]  # no .build- leftovers


@pytest.mark.parametrize("rec", RECORDS, ids=[r["id"] for r in RECORDS])
def test_filter_verdicts_are_the_benchmarks(rec):
    assert sh.escape_pattern(rec["command"]) == rec["filter_block"]


def test_format_and_sanitize_follow_the_benchmark():
    assert sh.format_result("grep -q x f && false", 1, "", "") == "No matches found."
    assert sh.format_result("false", 1, "out", "") == "Command failed with exit code 1"
    assert sh.format_result("ls x", 2, "out", "err\n") == "Error (exit code 2): err\n"
    assert sh.format_result("true", 0, "", "ignored") == "(no output)"
    line = "-rw-r--r--  1 alice  staff   1746 Nov 30 23:29 a.md"
    assert sh.sanitize(line, "alice") == "-rw-r--r--  1 kb_user  kb_group  1746 Jan  1 00:00 a.md"
    assert sh.sanitize("/home/alice/x /home/alicex", "alice") == "/home/kb_user/x /home/alicex"


def test_without_bwrap_the_configurations_refuse_to_start(domain, monkeypatch):
    monkeypatch.setattr(sh.shutil, "which", lambda name: None)
    with pytest.raises(
        DependencyNotInstalled, match=r"^The tau3-banking shell configurations .*apt-get install bubblewrap"
    ):
        sh.shell_tools(domain, write=False)


# --- the recorded calls --------------------------------------------------------------------------
@pytest.mark.parametrize("rec", [r for r in RECORDS if r["variant"] == "terminal_use"], ids=lambda r: r["id"])
def test_recorded_read_only_calls(rec, ro, domain):
    if rec["id"] in ("slow_sleep", "huge_yes_head"):
        pytest.skip("checked with a short limit below (30 s / 50 MB)")
    out = run(ro, rec["command"])
    want = rec["tool_output"]
    if rec["id"] in DELIBERATE:
        assert out == DELIBERATE[rec["id"]]
    elif rec["id"] == "pwd":
        assert out == f"/tmp/agentic_search_{sh.kb_digest(domain.documents)[:8]}/knowledge_base\n"
    elif rec["id"].startswith("ls_la"):  # the `total` line and `..`'s size depend on the file system
        strip = lambda s: [ln for ln in s.splitlines()[1:] if not ln.endswith(" ..")]  # noqa: E731
        assert strip(out) == strip(want)
    elif rec["id"] in ("grep_r_unsorted", "find_unsorted"):  # directory order: compare sorted lines
        assert sorted(out.splitlines()) == sorted(want.splitlines())
    elif rec["id"] in ("esc_ls_root_bare", "esc_printf_slash"):
        assert out == "etc\nusr\n"  # the sandbox's own root, no host folder
    else:
        assert out == want


def test_recorded_write_calls_in_order(domain, bwrap):
    tool, ctx = sh.shell_tools(domain, write=True)[0], _ctx()
    for rec in [r for r in RECORDS if r["variant"] == "terminal_use_write"]:
        assert run(tool, rec["command"], ctx) == rec["tool_output"], rec["id"]


def _request_calls() -> list[tuple[str, str]]:
    calls = []
    for f in sorted((TAU3_GOLDEN / "requests" / "terminal_use").glob("*.jsonl")):
        last = [json.loads(x) for x in f.read_text().splitlines() if json.loads(x)["seat"] == "agent"][-1]
        names = {}
        for m in last["body"]["messages"]:
            for tc in m.get("tool_calls") or []:
                names[tc["id"]] = tc["function"]
            fn = names.get(m.get("tool_call_id"))
            if m["role"] == "tool" and fn and fn["name"] == "shell":
                calls.append((json.loads(fn["arguments"])["command"], m["content"]))
    return calls


@pytest.mark.parametrize("call", _request_calls())
def test_recorded_request_shell_calls(call, ro):
    assert run(ro, call[0]) == call[1]


def test_schema_is_the_recorded_one(ro):
    f = TAU3_GOLDEN / "requests" / "terminal_use" / "task_001.jsonl"
    body = json.loads(f.read_text().splitlines()[1])["body"]
    body = body if "tools" in body else json.loads(f.read_text().splitlines()[0])["body"]
    assert ro.schema == next(t for t in body["tools"] if t["function"]["name"] == "shell")


def test_bad_arguments_give_the_benchmarks_errors(ro):
    box, ctx = Toolbox([ro]), _ctx()
    ctx.active = box.initial_active()
    assert box.call(ctx, "agent", "shell", {"command": 3}).content == (
        "Error: expected string or bytes-like object, got 'int'"
    )
    assert box.call(ctx, "agent", "shell", {}).content == (
        "Error: ShellMixin.shell() missing 1 required positional argument: 'command'"
    )
    assert run(ro, "echo a\x00b") == "Error (exit code 1): Command failed: embedded null byte"
    assert run(ro, "printf 'a\\r\\nb\\rc'") == "a\nb\nc"  # universal newlines, as text=True decodes
    assert run(ro, "printf '\\xe2'").startswith("Error (exit code 1): Command failed: 'utf-8' codec can't decode")


# --- containment ---------------------------------------------------------------------------------
def _alive(marker: str) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        try:
            if p.name.isdigit() and marker.encode() in (p / "cmdline").read_bytes():
                pids.append(int(p.name))
        except OSError:
            pass
    return pids


def test_timeout_kills_everything(ro, domain, monkeypatch):
    assert sh.format_result("sleep 100", 124, "", "Command timed out after 30 seconds") == (
        "Error (exit code 124): Command timed out after 30 seconds"
    )
    sandbox = sh.Sandbox(shutil.which("bwrap"), "/tmp/agentic_search_test/knowledge_base")
    kb = sh.kb_cache(domain.documents)
    rc, out, err = sandbox.run(kb, False, "echo partial; sleep 987.5 & sleep 986.5", timeout=1)
    assert (rc, out, err) == (124, b"", b"Command timed out after 1 seconds")
    assert _alive("987.5") == [] and _alive("986.5") == []


def test_background_processes_do_not_outlive_the_call(ro):
    assert run(ro, "sleep 985.5 & echo started") == "started\n"
    assert _alive("985.5") == []


def test_fork_bomb_is_contained(domain):
    if _bwrap_missing():
        pytest.skip("needs bubblewrap")
    sandbox = sh.Sandbox(shutil.which("bwrap"), "/tmp/agentic_search_test/knowledge_base")
    rc, _, _ = sandbox.run(
        sh.kb_cache(domain.documents), False, "exec -a bomb_984 bash -c 'f(){ f|f& }; f; sleep 5'", 3
    )
    assert rc in (0, 124, 125)
    assert _alive("bomb_984") == []


def test_endless_output_is_capped(ro):
    assert run(ro, "yes 0123456789") == (
        f"Error (exit code 125): Command output exceeded {sh.OUTPUT_CAP} bytes; it was stopped"
    )
    assert (
        run(ro, "yes 1>&2") == f"Error (exit code 125): Command output exceeded {sh.OUTPUT_CAP} bytes; it was stopped"
    )


@pytest.fixture(scope="module")
def canary():
    """A secret on the host, outside the knowledge base; no command may show it."""
    folder = Path(os.environ.get("TMPDIR", "/tmp")) / f"tau_shell_canary_{secrets.token_hex(4)}"
    folder.mkdir()
    token = f"CANARY{secrets.token_hex(8)}"
    (folder / "secret.txt").write_text(token)
    os.chmod(folder, 0o755)
    yield folder, token
    shutil.rmtree(folder)


ESCAPES = [
    'cat "{f}/secret.txt"',
    "cat '{f}/secret.txt'",
    "cat $(printf '\\x2f')tmp/*/secret.txt",
    'cd "$(printf "\\x2f")" && ls',
    'ls "/" "/tmp" "/root" "/home" "/work" "/proc"',
    'ln -s "{f}" link; cat link/secret.txt',
    'grep -r CANARY "/tmp" "/home" "/root" "/work" "/etc" 2>/dev/null; echo done',
    'find "/" -name secret.txt 2>/dev/null',
    'cat "/proc/1/environ" "/proc/self/mounts"',
    'cd "$(dirname "$PWD")"; cd "$(dirname "$PWD")"; cd "$(dirname "$PWD")"; ls -R | head -50',
    'echo x > "{f}/written"; echo x > "/tmp/written"; echo x > newfile',
    "python3 -c \"print(open('{f}/secret.txt').read())\"",
]


@pytest.mark.parametrize("write", [False, True])
@pytest.mark.parametrize("template", ESCAPES)
def test_escapes_are_contained(template, write, domain, canary):
    if _bwrap_missing():
        pytest.skip("needs bubblewrap")
    folder, token = canary
    tool, ctx = sh.shell_tools(domain, write=write)[0], _ctx()
    out = run(tool, template.format(f=folder), ctx)
    assert token not in out
    assert not (folder / "written").exists() and not (folder.parent / "written").exists()
    listing = run(tool, 'ls "/"', ctx)
    assert set(listing.split()) <= SANDBOX_ROOT
    if not write:
        assert run(tool, "ls newfile link", ctx).startswith("Error (exit code 2): ls: cannot access")


def test_write_outside_scratch_fails_and_scratch_is_per_episode(domain, bwrap):
    tool = sh.shell_tools(domain, write=True)[0]
    ctx = _ctx()
    assert (
        run(tool, 'echo x > "/tmp/f"', ctx)
        == "Error (exit code 1): /usr/bin/bash: line 1: /tmp/f: Read-only file system\n"
    )
    assert run(tool, "echo kept > note.txt && ln -s / up && cat note.txt", ctx) == "kept\n"
    scratch = ctx.state["shell_scratch"]
    root = scratch.root
    assert run(tool, "cat note.txt", _ctx()).startswith("Error (exit code 1): cat: note.txt")  # another episode
    snap = copy.deepcopy(ctx.state)  # as snapshots copy the tool state: an image of the files
    del ctx, scratch
    gc.collect()
    assert not root.exists()  # the episode's copy went with its state
    restored = _ctx()
    restored.state = snap
    assert run(tool, "cat note.txt", restored) == "kept\n"


def test_read_only_mode_refuses_every_write(ro):
    for cmd in (
        "touch INDEX.md",
        "rm INDEX.md",
        "echo x >> INDEX.md",
        "echo x > n",
        "mkdir d",
        "sed -i s/a/b/ INDEX.md",
        "chmod 777 .",
    ):
        assert "Read-only file system" in run(ro, cmd), cmd


# Nothing recursive over "/" here (it would walk /usr for seconds): the fixed ESCAPES cover that.
WORDS = ["ls", "cat", "head -c 50", "grep -s CANARY", "find -maxdepth 2", "wc -c", "readlink -f", "echo", "ls -la"]
ARGS = [".", "..", "/", "~", "$(printf '\\x2f')", "'/tmp'", '"/proc/self"', "*", "INDEX.md", '"$PWD/.."', "/tmp/*"]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(WORDS), st.lists(st.sampled_from(ARGS), max_size=3), st.sampled_from([";", "|", "&&"])
        ),
        min_size=1,
        max_size=4,
    )
)
def test_random_commands_never_escape(ro, canary, parts):
    folder, token = canary
    command = " ".join(f"{w} {' '.join(a)} {sep}" for w, a, sep in parts).rstrip(";|& ")
    command = command.replace("CANARY", token[:10])
    out = run(ro, command)
    assert token not in out and str(folder) not in out
    assert "/work" not in out and "/root" not in out


def test_a_cache_folder_others_can_write_is_refused(tmp_path, monkeypatch):
    shared = tmp_path / "shared"
    (shared / "tau3_shell").mkdir(parents=True)
    os.chmod(shared / "tau3_shell", 0o777)
    monkeypatch.setenv("TAU_ENV_CACHE", str(shared))
    monkeypatch.setattr(sh, "_sandbox_uid", lambda: None)
    with pytest.raises(DomainError, match=r"^The shell's cache folder .* must be a folder owned by this user"):
        sh.kb_cache([Document("a", "A", "x")])
