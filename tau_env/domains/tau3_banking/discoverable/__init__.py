"""The 44 discoverable agent tools (TOOLS.md section 4), one module per area."""

from tau_env.domains.tau3_banking.discoverable import (  # noqa: F401  (each module registers its tools)
    bank_accounts,
    credit_cards,
    debit_cards,
    payments,
)
