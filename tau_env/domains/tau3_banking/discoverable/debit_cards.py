"""Discoverable agent tools: debit_cards (TOOLS.md section 4)."""
