r"""The benchmark's own prompts and chat layout for tau3-banking (``prompt_style="benchmark"``, the default).

What tau2-bench's runner sends its two models (commit a2c0247; checked request by request against
recorded transcripts in ``tests/test_tau3_requests.py``):

* **Agent system message**: its LLM agent's ``SYSTEM_PROMPT`` around the retrieval configuration's
  policy text: ``<instructions>\n{AGENT_INSTRUCTION}\n</instructions>\n<policy>\n{policy}\n</policy>``.
* **User system message**: the simulator guidelines, then the scenario:
  ``f"{guidelines}\n\n<scenario>\n{scenario}\n</scenario>"``, where ``guidelines`` is
  ``simulation_guidelines_tools.md`` when the user has at least one tool, else
  ``simulation_guidelines.md`` (``<PERSONA_GUIDELINES>`` replaced by nothing), and ``scenario`` is
  ``Persona:`` and the tab-indented persona (when there is one), then ``Instructions:`` and the
  tab-indented instructions, joined by newlines.
* **Chat layout**: a seat's own tool-call message is ``{"role", "tool_calls": [{"id", "name",
  "function": {"name", "arguments"}, "type"}]}`` (no ``content`` key when it has none; the
  arguments re-serialised with ``json.dumps``); a tool result is ``{"role": "tool", "content",
  "tool_call_id"}``. Greeting (``Hi! How can I help you today?``), role flipping and the end
  markers are tau_env's, which are the benchmark's.

The guideline files are **not** shipped: they are read from the user's copy of tau2-bench, by
default ``data/tau2/user_simulator/`` (``<data_dir>/../../user_simulator``, beside the domain's
data folder in the repository's layout), or from the folder given as ``user_guidelines_dir=PATH``.
"""

from __future__ import annotations

import hashlib
import json
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tau_env.error import DomainError, InvalidOptionError, shown
from tau_env.tasks import read_text_file

#: The prompt styles of tau3-banking: the benchmark's (default) and tau_env's own.
PROMPT_STYLES = ("benchmark", "tau_env")

#: The benchmark's agent instructions (``AGENT_INSTRUCTION`` of ``src/tau2/agent/llm_agent.py``).
AGENT_INSTRUCTION = (
    "You are a customer service agent that helps the user according to the <policy> provided below.\n"
    "In each turn you can either:\n- Send a message to the user.\n- Make a tool call.\n"
    "You cannot do both at the same time.\n\n"
    "Try to be helpful and always follow the policy. Always make sure you generate valid JSON only."
)

#: The guideline files of the benchmark's user simulator, in ``data/tau2/user_simulator/``.
GUIDELINES_WITH_TOOLS = "simulation_guidelines_tools.md"
GUIDELINES_WITHOUT_TOOLS = "simulation_guidelines.md"
GUIDELINE_FILES = (GUIDELINES_WITHOUT_TOOLS, GUIDELINES_WITH_TOOLS)
#: Where the guidelines live relative to the domain's data folder in tau2-bench's layout
#: (``data/tau2/domains/banking_knowledge`` -> ``data/tau2/user_simulator``).
DEFAULT_GUIDELINES_DIR = Path("..") / ".." / "user_simulator"
_PERSONA_MARKER = "<PERSONA_GUIDELINES>"


def agent_system_prompt(policy: str) -> str:
    """The agent's system message as the benchmark's LLM agent builds it around ``policy``."""
    return f"<instructions>\n{AGENT_INSTRUCTION}\n</instructions>\n<policy>\n{policy}\n</policy>"


@dataclass(frozen=True)
class UserGuidelines:
    """The benchmark's user-simulator guidelines, read from the user's copy of tau2-bench.

    Attributes:
        folder: The folder they were read from.
        with_tools: ``simulation_guidelines_tools.md`` (for a user with at least one tool).
        without_tools: ``simulation_guidelines.md``.
    """

    folder: Path
    with_tools: str
    without_tools: str

    def sha256(self) -> dict[str, str]:
        """Each file's SHA-256 (of its UTF-8 text), for the run record."""
        texts = {GUIDELINES_WITHOUT_TOOLS: self.without_tools, GUIDELINES_WITH_TOOLS: self.with_tools}
        return {name: hashlib.sha256(text.encode("utf-8")).hexdigest() for name, text in texts.items()}


def find_guidelines(data_root: Path, given: str | os.PathLike[str] | None) -> UserGuidelines | None:
    """The guidelines from ``given`` (a folder holding both files), else from beside ``data_root``.

    Returns None when ``given`` is None and tau2-bench's ``user_simulator`` folder is not beside
    the data folder.

    Raises:
        InvalidOptionError: ``given`` is not a path.
        DomainError: ``given`` (or the default folder, when it exists) lacks a file, or one cannot be read.
    """
    if given is None:
        folder = (data_root / DEFAULT_GUIDELINES_DIR).resolve()
        if not folder.is_dir():
            return None
    elif isinstance(given, (str, os.PathLike)):
        folder = Path(given).expanduser()
        if not folder.is_dir():
            raise DomainError(
                f"user_guidelines_dir={str(given)!r}: expected the folder of tau2-bench's user-simulator guidelines "
                f"(data/tau2/user_simulator, holding {' and '.join(GUIDELINE_FILES)}), found no folder there."
            )
    else:
        raise InvalidOptionError(
            f"user_guidelines_dir must be a folder path (str or os.PathLike) or None, got {type(given).__name__}."
        )
    missing = [name for name in GUIDELINE_FILES if not (folder / name).is_file()]
    if missing:
        raise DomainError(
            f"{folder}: expected tau2-bench's user-simulator guidelines {' and '.join(GUIDELINE_FILES)}; "
            f"missing {', '.join(missing)}. Point user_guidelines_dir at your copy's data/tau2/user_simulator."
        )
    return UserGuidelines(
        folder,
        with_tools=read_text_file(folder / GUIDELINES_WITH_TOOLS),
        without_tools=read_text_file(folder / GUIDELINES_WITHOUT_TOOLS),
    )


def scenario_text(persona: str | None, instructions: str) -> str:
    """``str(task.user_scenario)`` as the benchmark prints it (for text instructions)."""
    lines = []
    if persona:
        lines += ["Persona:", textwrap.indent(persona, "\t")]
    lines += ["Instructions:", textwrap.indent(instructions, "\t")]
    return "\n".join(lines)


def user_system_prompt(guidelines: UserGuidelines, scenario: str, has_tools: bool) -> str:
    """The user simulator's system message for a scenario text."""
    text = guidelines.with_tools if has_tools else guidelines.without_tools
    return f"{text.replace(_PERSONA_MARKER, '')}\n\n<scenario>\n{scenario}\n</scenario>"


# --- the chat layout ------------------------------------------------------------------------------
def _arguments(raw: str) -> str:
    """Arguments as the benchmark sends them back: ``json.dumps`` of the parsed object (raw text if it is not one)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return raw
    return json.dumps(value) if isinstance(value, dict) else raw


def own_message(message: dict[str, Any]) -> dict[str, Any]:
    """A seat's own action as the benchmark puts it in that seat's history."""
    out: dict[str, Any] = {"role": "assistant"}
    if message.get("content") is not None:
        out["content"] = message["content"]
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [
            {
                "id": c["id"],
                "name": c["function"]["name"],
                "function": {"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])},
                "type": "function",
            }
            for c in calls
        ]
    return out


def tool_message(call_id: str, name: str, content: str) -> dict[str, Any]:
    """A tool result as the benchmark puts it in the caller's history (no ``name``)."""
    return {"role": "tool", "content": content, "tool_call_id": call_id}


def check_style(style: object) -> str:
    """``style`` if it is one of :data:`PROMPT_STYLES`, else InvalidOptionError."""
    if not (isinstance(style, str) and style in PROMPT_STYLES):
        raise InvalidOptionError(f"prompt_style must be one of {list(PROMPT_STYLES)}, got {shown(style)}.")
    return style
