"""Exceptions raised by tau_env.

Only programming errors of the caller raise. A model's mistakes (an unknown tool, bad arguments,
malformed JSON) never raise: they become tool-error observations and the episode goes on.
Every message says what was expected, what arrived, and how to fix it.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class Error(Exception):
    """Base class of every tau_env error."""


class InvalidActionError(Error, ValueError):
    """Raised by ``env.step`` when the action is not a chat message at all."""


class EpisodeOverError(Error, RuntimeError):
    """Raised when stepping an episode that has ended, or before ``reset()``."""


class ResetNeeded(EpisodeOverError):
    """Raised when a method that needs a live episode (``step``, ``last``, ``observe``, ...) runs before ``reset()``."""


class ClosedEnvError(Error, RuntimeError):
    """Raised when an env is used after ``close()``."""


class InvalidOptionError(Error, ValueError):
    """Raised when an argument or option given by the caller is invalid (reset options, make keywords, run settings)."""


class SnapshotError(Error, ValueError):
    """Raised by ``restore`` for a snapshot that this env did not take or that was altered."""


class ResultsFolderError(Error):
    """Raised when a results folder cannot be used: settings differ, another run holds it, or it cannot be written."""


class UnknownTaskError(Error, KeyError):
    """Raised when a task id is not in the domain."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else ""


class UnknownEnvError(Error, KeyError):
    """Raised by ``tau_env.make`` for an id that is not registered."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class RegistrationError(Error):
    """Raised when registering an env id that exists, or with a malformed id."""


class DomainError(Error):
    """Raised when a domain's definition (schema, seed data, tools, documents) is inconsistent."""


class ToolDefinitionError(DomainError):
    """Raised by ``@tool`` when a function cannot become a tool (missing docs, unsupported type)."""


class TaskError(Error, ValueError):
    """Raised when a task file or task object is malformed."""


class CheckError(Error):
    """Raised by ``check_domain`` / ``check_task`` when a domain or task breaks a contract."""


class InfrastructureError(Error):
    """Raised by model clients when a server fails (unreachable, 5xx, timeout) after every retry.

    The harness retries such an episode or reports it as an infrastructure error; it is never
    scored as a failure of the model.
    """


class DependencyNotInstalled(Error, ImportError):
    """Raised when an optional feature needs an extra that is not installed."""


class ToolError(Exception):
    """Raised inside a tool to report a business error to the model.

    It is not a tau_env ``Error``: it never reaches the caller of ``env.step``. The environment
    rolls the call's savepoint back and shows ``"Error: <message>"`` to the seat that called.
    """


def shown(value: object, limit: int = 80) -> str:
    """A caller's value in an error message: its ``repr``, clipped to ``limit`` characters; never raises
    (a repr that raises, or a value too deep or too long to print, shows as ``<type>``).
    """
    try:
        text = repr(value)
    except Exception:
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(text: object) -> str:
    """``text`` (an error's message) on one line: its lines stripped and joined by spaces (a task
    file's validation lists a problem per line), for a command's one ``error:`` line.
    """
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """Return ' Did you mean "x"?' for the closest choice, or '' if nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f' Did you mean "{close[0]}"?' if close else ""


class TaskFileError(TaskError, DomainError):
    """Raised when a task file or task entry is malformed (a TaskError, and a DomainError for domain folders)."""


class NotPicklableError(Error, TypeError):
    """Raised when pickling (or shallow-copying) an object that holds live in-process state, such as a TauEnv."""


class UsageError(Error, TypeError):
    """Raised when an object is used in a way it does not support (e.g. an asynchronous policy called synchronously)."""
