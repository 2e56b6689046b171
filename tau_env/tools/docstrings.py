"""Google-style docstrings: a tool's description and its arguments' descriptions."""

from __future__ import annotations

import inspect
import re

_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Example|Examples|Note|Notes):\s*$")
_ARG = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into (description, {argument: description})."""
    lines = inspect.cleandoc(doc or "").splitlines()
    desc: list[str] = []
    args: dict[str, str] = {}
    section = None
    current = None
    arg_indent = None
    for line in lines:
        m = _SECTION.match(line)
        if m:
            section = m.group(1)
            current = None
            continue
        if section is None:
            desc.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            if not line.strip():
                continue
            indent = len(line) - len(line.lstrip())
            am = _ARG.match(line)
            if am and (arg_indent is None or indent <= arg_indent):
                arg_indent = indent
                current = am.group(1).lstrip("*")
                args[current] = am.group(2).strip()
            elif current is not None:
                args[current] = (args[current] + " " + line.strip()).strip()
    return "\n".join(desc).strip(), args
