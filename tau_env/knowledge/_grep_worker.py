"""The grep worker: a child process that compiles and runs the model's regular expressions under a budget.

:class:`tau_env.knowledge.GrepWorker` starts it as ``python -P <this file>``. It imports only the
standard library and ``regex`` (never ``tau_env``), so it starts in a few tens of milliseconds.
Requests and replies are length-prefixed pickles on stdin and stdout, from and to the parent that
started it.

Each search runs under two limits, set here just before the pattern is compiled:

- CPU time: an ``ITIMER_PROF`` timer; its signal, ``SIGPROF``, has no handler here, so when the
  timer fires the kernel ends the process, even in the middle of a regex engine's C loop.
- Memory: ``RLIMIT_AS`` (where ``/proc/self/statm`` tells the current size, i.e. Linux): the
  process may grow by the budget; past it allocations fail, and a ``MemoryError`` ends the process.

Either way the parent sees the process end, reports the budget to the model and starts a fresh
worker on the next call. Replies: ``("ok", value)``, ``("invalid", message)`` for a pattern that
does not compile (Harbor Bank's ``grep``), ``("raise", message)`` for any other exception.
"""

import os
import pickle
import re
import signal
import struct
import sys
import warnings

_HEADER = struct.Struct("!Q")


def _read_exact(stream, n):
    data = stream.read(n)
    return data if data is not None and len(data) == n else None


def _receive(stream):
    head = _read_exact(stream, _HEADER.size)
    if head is None:
        return None
    body = _read_exact(stream, _HEADER.unpack(head)[0])
    return None if body is None else pickle.loads(body)


def _send(stream, message):
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


def _size():
    """The process's virtual size in bytes, or None where /proc is not there."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def count_matches(texts, pattern):
    """tau3-banking's grep: non-overlapping matches per text, case-insensitive, with ``re``;
    a pattern that is not a valid regex is matched literally (exactly as the benchmark does).
    """
    try:
        rx = re.compile(pattern, re.IGNORECASE)
    except re.error:
        rx = re.compile(re.escape(pattern), re.IGNORECASE)
    return [len(rx.findall(t)) for t in texts]


def matching_lines(texts, pattern, ignore_case, max_matches):
    """Harbor Bank's grep: ``(text index, line number, line)`` of lines that match, with ``regex``."""
    import regex

    try:
        rx = regex.compile(pattern, regex.IGNORECASE if ignore_case else 0)
    except MemoryError:
        raise
    except Exception as e:  # regex.error, OverflowError, RecursionError, ...: not a usable pattern
        return ("invalid", str(e))
    out = []
    for i, text in enumerate(texts):
        for n, line in enumerate(text.splitlines(), 1):
            if rx.search(line):
                out.append((i, n, line))
                if len(out) >= max_matches:
                    return ("ok", out)
    return ("ok", out)


def _run(op, texts, args):
    if op == "count":
        return ("ok", count_matches(texts, *args))
    return matching_lines(texts, *args)


def main():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent, which ends us
    signal.signal(signal.SIGPROF, signal.SIG_DFL)  # even if the parent ignored it: the timer must kill
    warnings.simplefilter("ignore")  # e.g. re's FutureWarning about possible nested sets
    import regex  # noqa: F401  (loaded before any budget applies)

    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    except ImportError:  # pragma: no cover - not a POSIX system
        resource = None
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    corpora = {}
    _send(stdout, ("ready", os.getpid()))
    while True:
        message = _receive(stdin)
        if message is None:  # the parent closed the pipe or is gone
            return
        op, cid = message[0], message[1]
        if op == "load":
            if message[2] is None:
                corpora.pop(cid, None)
            else:
                corpora[cid] = message[2]
            _send(stdout, ("ok", None))
            continue
        cpu_seconds, memory_bytes, args = message[2], message[3], message[4:]
        size = _size()
        if resource is not None and size is not None:
            limit = size + memory_bytes if hard == resource.RLIM_INFINITY else min(size + memory_bytes, hard)
            resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
        signal.setitimer(signal.ITIMER_PROF, cpu_seconds)
        try:
            reply = _run(op, corpora[cid], args)
        except MemoryError:
            os._exit(3)
        except Exception as e:  # the benchmark's tool would raise it: its text is the tool's error
            reply = ("raise", str(e))
        signal.setitimer(signal.ITIMER_PROF, 0)
        if resource is not None and size is not None:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        _send(stdout, reply)


if __name__ == "__main__":
    main()
