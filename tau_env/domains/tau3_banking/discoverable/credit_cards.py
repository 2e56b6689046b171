"""Discoverable agent tools: credit_cards (TOOLS.md section 4)."""
