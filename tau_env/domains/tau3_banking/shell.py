r"""The benchmark's ``shell`` tool (``terminal_use``, ``terminal_use_write``, ``alltools``), in a real sandbox.

The benchmark runs the agent's command as ``bash -c CMD`` in its knowledge-base directory through
``srt``, a best-effort sandbox that lets a command read most of the host. Here the same command
runs in real bash and coreutils under bubblewrap (``bwrap``), with:

- the knowledge base laid out exactly as the benchmark lays it out (:func:`kb_files`: one
  ``<safe_id>.md`` per document and ``INDEX.md``), built once per document set into a cache
  folder keyed by a hash of the documents (:func:`kb_cache`), and mounted **read-only** at the
  benchmark's path, ``/tmp/agentic_search_<8 hex>/knowledge_base``, which is also the cwd;
  ``terminal_use_write`` mounts a per-episode scratch copy instead (made on the episode's first
  call, removed when the episode's tool state goes, i.e. at the next reset);
- nothing else of the host but read-only ``/usr`` (and the ``/bin``, ``/lib*`` links), a minimal
  ``/dev``, ``/etc/ld.so.cache`` and ``/etc/alternatives``: no ``/proc``, ``/home``, ``/root``, ``/tmp``, ``/work``; no
  network, no IPC, its own PID namespace; a clean environment (``HOME``, ``LANG``, ``PATH``,
  ``SHELL``);
- limits: 30 s of wall time (the benchmark's), 1 GiB of address space and 64 MiB per written file
  per process, a process cap, and 1 MiB of output per stream (the benchmark has none: a
  deliberate difference); on a timeout or past the output cap the whole sandbox is killed (its
  PID namespace dies with it; no process survives a call, background ones included).

The text the agent gets is the benchmark's, byte for byte: its command filter
(:func:`escape_pattern`), its ``ls -l`` and home-path sanitising (:func:`sanitize`), its text
decoding (strict UTF-8, universal newlines; a decoding error is ``Command failed: ...``) and its
formatting (:func:`format_result`: ``No matches found.``, ``Error (exit code N): ...``,
``(no output)``). Where the benchmark's sandbox lets a command read outside the knowledge base,
this one shows nothing outside it (see docs/tau3_banking.md).

When tau_env runs as root, the sandbox runs as the unprivileged uid :data:`SANDBOX_UID` (so that
the kernel enforces the process cap, which root ignores), and the cached knowledge base is owned
by it. Without ``bwrap`` the shell configurations refuse to start (:func:`require_bwrap`); there
is no unsandboxed fallback.
"""

from __future__ import annotations

import copy
import getpass
import hashlib
import io
import json
import os
import re
import resource
import selectors
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tau_env.error import DependencyNotInstalled, DomainError
from tau_env.tools import Tool, raw_tool

if TYPE_CHECKING:
    from tau_env.knowledge import Document

#: ``shell`` as the model sees it (the benchmark's schema, from its recorded requests).
SHELL_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "shell",
        "description": "Execute a shell command in the knowledge base directory.\n\n"
        "Use standard Unix utilities to explore and search the knowledge base files.\n"
        "Common commands: ls, cat, grep, head, tail, find, wc, awk, sed, etc.",
        "parameters": {
            "properties": {
                "command": {
                    "description": 'The shell command to execute (e.g., "ls -la", '
                    '"grep -r \'credit card\' .", "cat INDEX.txt")',
                    "title": "Command",
                    "type": "string",
                }
            },
            "required": ["command"],
            "title": "parameters",
            "type": "object",
        },
    },
}

TIMEOUT_S = 30  #: the benchmark's time limit per command
OUTPUT_CAP = 1 << 20  #: bytes per stream (ours; the benchmark has no cap)
MEMORY_LIMIT = 1 << 30  #: address space per process
FILE_SIZE_LIMIT = 64 << 20  #: largest file a command may write
PROCESS_HEADROOM = 256  #: processes a call may start
SANDBOX_UID = SANDBOX_GID = 913_470_000  #: the sandbox's uid when tau_env runs as root
BASH = "/usr/bin/bash"  #: the benchmark's bash, whose path prefixes bash's own error texts
ENVIRONMENT = {"HOME": "/home/kb_user", "LANG": "C.UTF-8", "PATH": "/usr/local/bin:/usr/bin:/bin", "SHELL": BASH}
INSTALL_HINT = "install bubblewrap: apt-get install bubblewrap (dnf/pacman/apk: bubblewrap)"


# --- the knowledge base on disk ------------------------------------------------------------------
def safe_name(doc_id: str) -> str:
    """The benchmark's file name stem for a document id."""
    s = doc_id.replace("/", "_").replace("\\", "_").replace("..", "_")
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in s)[:255]


def kb_files(documents: Sequence[Document]) -> dict[str, bytes]:
    r"""The benchmark's ``knowledge_base`` folder: ``{file name: bytes}`` (``md`` format).

    Each document is ``# <title>\n\n<content>`` (no newline added); ``INDEX.md`` lists them
    sorted by id in code-point order. A later document with the same file name overwrites an
    earlier one, as the benchmark's writes do.
    """
    files = {f"{safe_name(d.id)}.md": f"# {d.title}\n\n{d.content}".encode() for d in documents}
    lines = ["# Knowledge Base Index\n\n", f"**Total documents:** {len(documents)}\n\n", "## Documents\n\n"]
    lines += [f"- **{safe_name(d.id)}.md** - {d.title}\n" for d in sorted(documents, key=lambda d: d.id)]
    files["INDEX.md"] = "".join(lines).encode()
    return files


def kb_digest(documents: Sequence[Document]) -> str:
    """A hash of the documents (ids, titles, contents, in order), keying the cache."""
    h = hashlib.sha256(b"tau3-shell-kb-v1")
    for d in documents:
        h.update(json.dumps([d.id, d.title, d.content]).encode())
    return h.hexdigest()


def _sandbox_uid() -> tuple[int, int] | None:
    """The (uid, gid) to drop to before starting bwrap, or None to run as ourselves."""
    return (SANDBOX_UID, SANDBOX_GID) if os.geteuid() == 0 else None


def _cache_root() -> Path:
    """Where knowledge bases are cached: ``$TAU_ENV_CACHE`` or ``~/.cache/tau_env``, under
    ``tau3_shell``. As root, the sandbox's uid must traverse it, so it is
    ``<tmp>/tau_env-shell-root`` (a root-owned folder nobody else can write).
    """
    if _sandbox_uid() is not None:
        root = Path(tempfile.gettempdir()) / "tau_env-shell-root"
    else:
        base = os.environ.get("TAU_ENV_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "tau_env")
        root = Path(base) / "tau3_shell"
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    st = os.lstat(root)
    if st.st_uid != os.geteuid() or st.st_mode & 0o022 or not os.path.isdir(root) or os.path.islink(root):
        raise DomainError(
            f"The shell's cache folder {root} must be a folder owned by this user and writable only by it; "
            "remove it or set TAU_ENV_CACHE."
        )
    os.chmod(root, 0o755)
    return root


def kb_cache(documents: Sequence[Document]) -> Path:
    """The cached ``knowledge_base`` folder of ``documents``, built on first use.

    Built in a temporary folder beside it and renamed into place, so concurrent builders never see
    a half-written folder (the loser's copy is discarded). Files are 0644, the folder 0755.
    """
    target = _cache_root() / kb_digest(documents) / "knowledge_base"
    if target.is_dir():
        return target
    target.parent.mkdir(mode=0o755, exist_ok=True)
    os.chmod(target.parent, 0o755)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        owner = _sandbox_uid()
        for name, data in kb_files(documents).items():
            path = tmp / name
            path.write_bytes(data)
            os.chmod(path, 0o644)
            if owner:
                os.chown(path, *owner)
        os.chmod(tmp, 0o755)
        if owner:
            os.chown(tmp, *owner)
        try:
            os.rename(tmp, target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


# --- the benchmark's filter, sanitising and formatting -------------------------------------------
_SINGLE, _DOUBLE = re.compile(r"'[^']*'"), re.compile(r'"[^"]*"')
_ABS, _ABS_FULL = re.compile(r"(?:^|[\s;|&])(/[a-zA-Z])"), re.compile(r"(?:^|[\s;|&])(/[a-zA-Z][^\s;|&]*)")
_LS_LINE = re.compile(r"^([d\-lrwxst@]+\s+\d+\s+)(\S+)\s+(\S+)\s+(\d+)\s+(\w{3}\s+\d+\s+[\d:]+)\s+(.*)$", re.MULTILINE)


def escape_pattern(command: str) -> str | None:
    """What the benchmark's filter blocks ``command`` for (None: it passes). Quoted text is ignored;
    then ``..``, an absolute path after a separator, a leading ``/``, ``~``, ``$HOME`` block.
    A non-string raises the benchmark's ``TypeError``.
    """
    stripped = _DOUBLE.sub('""', _SINGLE.sub('""', command))
    if ".." in stripped:
        return ".."
    if _ABS.search(stripped):
        full = _ABS_FULL.search(stripped)
        if full:
            return f"absolute path: {full.group(1)}"
    if stripped.strip().startswith("/"):
        return "absolute path at start"
    if "~" in stripped:
        return "~"
    if "$HOME" in stripped or "${HOME}" in stripped:
        return "$HOME"
    return None


def sanitize(text: str, user: str | None) -> str:
    """The benchmark's rewriting of every output: ``ls -l`` lines get ``kb_user  kb_group`` and
    ``Jan  1 00:00``; ``/home/<user>`` and ``/Users/<user>`` become ``/home/kb_user``.
    """
    if not text:
        return text
    text = _LS_LINE.sub(lambda m: f"{m.group(1)}kb_user  kb_group  {m.group(4)} Jan  1 00:00 {m.group(6)}", text)
    if user:
        text = re.sub(rf"/(?:Users|home)/{re.escape(user)}(?=/|$)", "/home/kb_user", text)
    return text


def format_result(command: str, rc: int, stdout: str, stderr: str) -> str:
    """The text the benchmark's ``shell`` returns for a ``(rc, stdout, stderr)``."""
    if rc != 0:
        if rc == 1 and "grep" in command and not stderr:
            return "No matches found."
        if stderr:
            return f"Error (exit code {rc}): {stderr}"
        return f"Command failed with exit code {rc}"
    return stdout if stdout else "(no output)"


def _decode(data: bytes) -> str:
    # subprocess.run(text=True) under a UTF-8 locale: strict decoding, universal newlines
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


# --- the sandbox ---------------------------------------------------------------------------------
def require_bwrap(what: str = "the shell tool") -> str:
    """The path of ``bwrap``; DependencyNotInstalled (saying how to install it) without it."""
    path = shutil.which("bwrap")
    if path is None:
        raise DependencyNotInstalled(
            f"{what} runs commands under bubblewrap, and 'bwrap' is not on PATH; {INSTALL_HINT}. "
            "There is no unsandboxed fallback."
        )
    return path


def _system_binds() -> list[str]:
    """Read-only /usr, the /bin, /sbin, /lib* links (or folders) and the loader cache."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for path in ("/etc/ld.so.cache", "/etc/alternatives"):  # the loader's cache; awk -> mawk/gawk links
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def _count_processes(uid: int) -> int:
    n = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                n += entry.stat(follow_symlinks=False).st_uid == uid
            except OSError:
                pass
    return n


class Sandbox:
    """Runs commands under bwrap with one knowledge-base folder mounted at ``mount`` (the cwd)."""

    def __init__(self, bwrap: str, mount: str):
        self.bwrap, self.mount = bwrap, mount
        self.bash = BASH if os.path.exists(BASH) else shutil.which("bash") or BASH
        self._base = [
            bwrap,
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            *_system_binds(),
            "--dev",
            "/dev",
        ]

    def argv(self, source: Path, writable: bool, command: str) -> list[str]:
        bind = "--bind" if writable else "--ro-bind"
        tail = ["--remount-ro", "/", "--chdir", self.mount, "--", self.bash, "-c", "--", command]
        dirs = ["--perms", "1777", "--dir", "/tmp", "--perms", "0755", "--dir", os.path.dirname(self.mount)]
        return [*self._base, *dirs, bind, str(source), self.mount, *tail]

    def run(self, source: Path, writable: bool, command: str, timeout: float = TIMEOUT_S) -> tuple[int, bytes, bytes]:
        """``(rc, stdout, stderr)`` of ``command``: 124 (the benchmark's text) on a timeout, 125 past the cap."""
        owner = _sandbox_uid()
        uid = owner[0] if owner else os.getuid()
        nproc = _count_processes(uid) + PROCESS_HEADROOM

        def limits() -> None:  # in the child, before exec'ing bwrap
            for res, value in (
                (resource.RLIMIT_AS, MEMORY_LIMIT),
                (resource.RLIMIT_FSIZE, FILE_SIZE_LIMIT),
                (resource.RLIMIT_NPROC, nproc),
                (resource.RLIMIT_CORE, 0),
            ):
                resource.setrlimit(res, (value, value))
            if owner:
                os.setgroups([])
                os.setgid(owner[1])
                os.setuid(owner[0])

        info_r, info_w = os.pipe()  # bwrap reports the sandbox's PID 1 there
        argv = self.argv(source, writable, command)
        argv[1:1] = ["--info-fd", str(info_w)]
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=ENVIRONMENT,
                cwd="/",
                start_new_session=True,
                pass_fds=(info_w,),
                preexec_fn=limits,  # noqa: PLW1509 - sets limits and drops root in the child
            )
        except BaseException:
            os.close(info_r)
            raise
        finally:
            os.close(info_w)
        out, err, info, status = bytearray(), bytearray(), bytearray(), None
        info_file = os.fdopen(info_r, "rb", buffering=0)
        deadline = time.monotonic() + timeout
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(proc.stdout, selectors.EVENT_READ, out)
                sel.register(proc.stderr, selectors.EVENT_READ, err)
                sel.register(info_file, selectors.EVENT_READ, info)
                while sel.get_map():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        status = "timeout"
                        break
                    for key, _ in sel.select(left):
                        chunk = os.read(key.fd, 65536)
                        if not chunk:
                            sel.unregister(key.fileobj)
                            continue
                        key.data.extend(chunk)
                        if len(key.data) > OUTPUT_CAP and key.data is not info:
                            status = "cap"
                    if status:
                        break
        finally:
            if status:
                _kill(proc, info)
            try:
                rc = proc.wait(5 if status else max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:  # the streams closed, the sandbox did not end in time
                _kill(proc, info)
                rc, status = proc.wait(), status or "timeout"
            proc.stdout.close()
            proc.stderr.close()
            info_file.close()
        if status == "timeout":
            return 124, b"", f"Command timed out after {timeout:g} seconds".encode()
        if status == "cap":
            return 125, b"", f"Command output exceeded {OUTPUT_CAP} bytes; it was stopped".encode()
        return rc, bytes(out), bytes(err)


def _kill(proc: subprocess.Popen, info: bytes) -> None:
    """Kill bwrap's process group, and wait (up to 5 s) until the sandbox's PID 1 has exited: the
    kernel kills and reaps every process of its PID namespace before that, so none survives.
    """
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        pid = int(json.loads(bytes(info))["child-pid"])
    except (ValueError, KeyError, TypeError):
        return
    until = time.monotonic() + 5
    while time.monotonic() < until:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    return
        except OSError:
            return
        time.sleep(0.002)


# --- per-episode scratch copies (terminal_use_write) ---------------------------------------------
class Scratch:
    """An episode's writable copy of the knowledge base, removed when this object goes.

    Copying it (``copy.deepcopy``, as snapshots copy the tool state) gives a :class:`ScratchImage`
    of its files, which a restored episode unpacks into a fresh copy on its next call.
    """

    def __init__(self, files: dict[str, bytes] | None = None, image: bytes | None = None):
        self.root = Path(tempfile.mkdtemp(prefix="tau_env_shell_"))
        self.path = self.root / "knowledge_base"
        self._finalizer = weakref.finalize(self, shutil.rmtree, str(self.root), True)
        os.chmod(self.root, 0o755)  # the sandbox's uid must traverse it
        owner = _sandbox_uid()
        if image is None:
            self.path.mkdir(mode=0o755)
            os.chmod(self.path, 0o755)
            for name, data in (files or {}).items():
                with open(os.open(self.path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as f:
                    f.write(data)
                    os.fchmod(f.fileno(), 0o644)  # whatever the umask
                    if owner:
                        os.fchown(f.fileno(), *owner)
        else:
            with tarfile.open(fileobj=io.BytesIO(image)) as tar:
                tar.extractall(self.root, filter="tar")
            if owner:
                for dirpath, dirnames, filenames in os.walk(self.path):
                    for name in [*dirnames, *filenames]:
                        os.chown(os.path.join(dirpath, name), *owner, follow_symlinks=False)
        if owner:
            os.chown(self.path, *owner)

    def remove(self) -> None:
        self._finalizer()

    def __deepcopy__(self, memo: dict[int, Any]) -> ScratchImage:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(self.path, arcname="knowledge_base")
        return ScratchImage(buf.getvalue())


class ScratchImage:
    """A scratch copy's files as a tar archive (picklable; copies share the bytes)."""

    def __init__(self, data: bytes):
        self.data = data

    def __deepcopy__(self, memo: dict[int, Any]) -> ScratchImage:
        return self


# --- the tool ------------------------------------------------------------------------------------
def shell_tools(domain: Any, *, write: bool) -> list[Tool]:
    """The benchmark's ``shell`` tool over ``domain.documents`` (read-only, or with a per-episode
    scratch copy when ``write``).

    Raises:
        DependencyNotInstalled: ``bwrap`` is not installed (no unsandboxed fallback).
        DomainError: the cache folder is not this user's own (see :func:`kb_cache`).
    """
    sandbox_bwrap = require_bwrap("The tau3-banking shell configurations")
    documents = list(domain.documents)
    digest = kb_digest(documents)
    sandbox = Sandbox(sandbox_bwrap, f"/tmp/agentic_search_{digest[:8]}/knowledge_base")
    kb = kb_cache(documents)  # now, so that a cache problem fails the env's construction, not a call
    files: dict[str, bytes] = {}  # the layout in memory, for scratch copies (write mode)
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - the benchmark skips the home rewrite then
        user = None

    def source(ctx: Any) -> Path:
        if not write:
            return kb
        scratch = ctx.state.get("shell_scratch")
        if isinstance(scratch, ScratchImage):
            scratch = ctx.state["shell_scratch"] = Scratch(image=scratch.data)
        elif scratch is None:
            if not files:
                files.update(kb_files(documents))
            scratch = ctx.state["shell_scratch"] = Scratch(files)
        return scratch.path

    def shell(self: Any, command: str) -> str:
        blocked = escape_pattern(command)  # raises the benchmark's TypeError for a non-string
        if blocked:
            why = f"Error: Command blocked - contains '{blocked}' which could escape the sandbox"
            return format_result(command, 1, "", why)
        try:
            rc, out, err = sandbox.run(source(self), write, command)
            stdout, stderr = sanitize(_decode(out), user), sanitize(_decode(err), user)
        except (ValueError, UnicodeError) as e:  # a NUL byte or a lone surrogate; undecodable output
            rc, stdout, stderr = 1, "", f"Command failed: {e}"
        return format_result(command, rc, stdout, stderr)

    shell.__qualname__ = "ShellMixin.shell"  # Python's TypeError texts name the benchmark's method
    return [raw_tool(shell, copy.deepcopy(SHELL_SCHEMA), kind="read")]
