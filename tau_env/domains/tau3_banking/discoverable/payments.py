"""Discoverable agent tools: payments (TOOLS.md section 4)."""
