"""Discoverable agent tools: bank_accounts (TOOLS.md section 4)."""
