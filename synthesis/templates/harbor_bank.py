"""Harbor Bank's task templates (accounts, transfers, contact details, overdraft, wires, deposits, refunds)."""

from __future__ import annotations

from . import Template

TEMPLATES: dict[str, Template] = {}
