"""The interface of tau2-bench's banking_knowledge tools, as a model sees it.

Names, descriptions and parameters of the tools of the public tau3-banking benchmark
(sierra-research/tau2-bench, MIT licence), so that the schemas shown to an agent and the texts
of unlock/give match the benchmark's byte for byte. The behaviour is implemented in this package
from the public specification; nothing here is code: the texts are data, in ``interface.json``
next to this module (shipped as package data), read once at import.
"""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

__all__ = ["AGENT_SCHEMAS", "USER_SCHEMAS", "BASE_KINDS", "USER_KINDS", "DISCOVERABLE_AGENT", "DISCOVERABLE_USER"]

_DATA: dict[str, Any] = json.loads(files(__package__).joinpath("interface.json").read_text(encoding="utf-8"))

#: OpenAI schemas of the 14 base agent tools, in the benchmark's order.
AGENT_SCHEMAS: list[dict[str, Any]] = _DATA["AGENT_SCHEMAS"]

#: OpenAI schemas of the 6 base user tools, in the benchmark's order.
USER_SCHEMAS: list[dict[str, Any]] = _DATA["USER_SCHEMAS"]

#: Tool type of each base agent tool ("read", "write" or "generic").
BASE_KINDS: dict[str, str] = _DATA["BASE_KINDS"]

#: Tool type of each base user tool.
USER_KINDS: dict[str, str] = _DATA["USER_KINDS"]

#: The 44 discoverable agent tools: kind, description and ``(name, type, required, description)`` of each parameter.
DISCOVERABLE_AGENT: dict[str, dict[str, Any]] = {
    name: {**spec, "params": [tuple(p) for p in spec["params"]]} for name, spec in _DATA["DISCOVERABLE_AGENT"].items()
}

#: The 4 discoverable user tools: kind, description and ``(name, required)`` of each parameter.
DISCOVERABLE_USER: dict[str, dict[str, Any]] = {
    name: {**spec, "params": [tuple(p) for p in spec["params"]]} for name, spec in _DATA["DISCOVERABLE_USER"].items()
}

del _DATA
