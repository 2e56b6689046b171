"""Tools: typed, documented functions that the seats call.

One module per job, every public name re-exported here:

- :mod:`~tau_env.tools.docstrings`: Google-style docstrings (:func:`parse_docstring`);
- :mod:`~tau_env.tools.schema`: type hints to JSON schemas and argument validators
  (:class:`ArgumentError`, :data:`MAX_STRING`);
- :mod:`~tau_env.tools.definition`: the :class:`Tool` type and its decorators :func:`tool` and
  :func:`raw_tool`;
- :mod:`~tau_env.tools.runtime`: running calls (:class:`ToolContext`, :class:`ToolResult`,
  :class:`Toolbox`) and the meta tools ``unlock_tool`` and ``hand_over_tool``.
"""

from tau_env.tools.definition import KINDS, SEATS, Tool, raw_tool, tool
from tau_env.tools.docstrings import parse_docstring
from tau_env.tools.runtime import (
    MAX_ECHOED_NAME,
    Toolbox,
    ToolContext,
    ToolResult,
    hand_over_tool,
    unlock_tool,
)
from tau_env.tools.schema import MAX_STRING, ArgumentError, Validator

__all__ = [
    "KINDS",
    "MAX_ECHOED_NAME",
    "MAX_STRING",
    "SEATS",
    "ArgumentError",
    "Tool",
    "ToolContext",
    "ToolResult",
    "Toolbox",
    "Validator",
    "hand_over_tool",
    "parse_docstring",
    "raw_tool",
    "tool",
    "unlock_tool",
]
