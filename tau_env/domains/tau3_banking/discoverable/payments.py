"""Discoverable agent tools: payments and credit limit (TOOLS.md section 4.4)."""

from __future__ import annotations

from typing import Any

from tau_env.domains.tau3_banking.toolkit import (
    TODAY,
    H,
    Tau3Context,
    discoverable_agent_tool,
    has_rows,
    missing,
    money,
    query_listing,
)

DENIAL_REASONS = [
    "insufficient_account_age", "cooldown_period_active", "pending_disputes", "pending_replacement_card",
    "past_due_balance", "high_utilization", "insufficient_payment_history", "requested_amount_exceeds_limit",
    "other",
]  # fmt: skip

#: Statuses that block a credit limit increase.
BLOCKING_DISPUTE_STATUSES = ("SUBMITTED", "UNDER_REVIEW", "PENDING")
BLOCKING_ORDER_STATUSES = ("PENDING", "PROCESSING", "SHIPPED")  # ORDERED does not block
BLOCKING_ACCOUNT_STATUSES = ("PAST_DUE", "DELINQUENT", "COLLECTIONS", "CLOSED")


def cli_id(cc_id: str, user_id: str, amount: float) -> str:
    """Id of a credit limit increase row; submit, approve and deny share it (so ids can collide)."""
    return "cli_" + H(f"cli_request:{cc_id}:{user_id}:{amount:.2f}", 12)


def _not_owned(cc_id: str, user_id: str) -> str:
    return f"Error: Credit card account '{cc_id}' does not belong to user '{user_id}'."


@discoverable_agent_tool
def pay_credit_card_from_checking_9182(
    self: Tau3Context, user_id: str, checking_account_id: str, credit_card_account_id: str, amount: float
) -> str:
    if not user_id or not checking_account_id or not credit_card_account_id or amount is None:  # 0 goes on
        return "Error: Missing required parameters (user_id, checking_account_id, credit_card_account_id, amount)."
    try:
        amount = float(amount)
    except (TypeError, ValueError):
        return "Error: Invalid payment amount. Must be a positive number."
    if amount <= 0:
        return "Error: Payment amount must be a positive number."
    checking = self.store.get("accounts", checking_account_id)
    if checking is None:
        return f"Error: Checking account '{checking_account_id}' not found."
    if checking.get("user_id") != user_id:
        return f"Error: Checking account '{checking_account_id}' does not belong to user '{user_id}'."
    if checking.get("class") != "checking":
        return f"Error: Account '{checking_account_id}' is not a checking account."
    balance = money(checking.get("current_holdings", checking.get("balance", 0)))
    if amount > balance:
        return (
            f"Error: Insufficient funds in checking account. Available balance: ${balance:.2f}, "
            f"requested payment: ${amount:.2f}."
        )
    card = self.store.get("credit_card_accounts", credit_card_account_id)
    if card is None:
        return f"Error: Credit card account '{credit_card_account_id}' not found."
    if card.get("user_id") != user_id:
        return _not_owned(credit_card_account_id, user_id)
    card_balance = _limit(card.get("current_balance", "$0.00"))
    if amount > card_balance:
        return (
            f"Error: Payment amount (${amount:.2f}) exceeds credit card balance (${card_balance:.2f}). "
            "Please specify an amount up to the outstanding balance."
        )
    new_balance = balance - amount
    new_card_balance = card_balance - amount
    # The checking balance is written without "$", the card balance with it (TOOLS.md 1.6).
    self.store.update("accounts", checking_account_id, {"current_holdings": f"{new_balance:.2f}"})
    self.store.update("credit_card_accounts", credit_card_account_id, {"current_balance": f"${new_card_balance:.2f}"})
    return (
        f"Payment processed successfully!\n  - Payment Amount: ${amount:.2f}\n"
        f"  - From Checking Account: {checking_account_id}\n  - To Credit Card Account: {credit_card_account_id}\n"
        f"  - New Checking Balance: ${new_balance:.2f}\n  - New Credit Card Balance: ${new_card_balance:.2f}\n"
        "The payment has been applied immediately."
    )


@discoverable_agent_tool
def submit_credit_limit_increase_request_7392(
    self: Tau3Context, credit_card_account_id: str, user_id: str, requested_increase_amount: int
) -> str:
    if not credit_card_account_id or not user_id or requested_increase_amount is None:
        return "Error: Missing required parameters."
    try:
        number = float(requested_increase_amount)
    except (TypeError, ValueError):
        return "Error: Invalid requested_increase_amount. Must be a whole number."
    if not number.is_integer():
        return "Error: Invalid requested_increase_amount. Must be a whole number of dollars."
    amount = int(number)
    if amount <= 0:
        return "Error: Requested increase amount must be positive."
    card = self.store.get("credit_card_accounts", credit_card_account_id)
    if card is None:
        return f"Error: Credit card account '{credit_card_account_id}' not found."
    if card.get("user_id") != user_id:
        return _not_owned(credit_card_account_id, user_id)
    rid = cli_id(credit_card_account_id, user_id, amount)
    row = {
        "request_id": rid,
        "credit_card_account_id": credit_card_account_id,
        "user_id": user_id,
        "requested_increase_amount": amount,
        "submitted_at": TODAY,
        "status": "PENDING",
    }
    if not self.store.insert("credit_limit_increase_requests", rid, row):
        return "Error: A similar request may already exist."
    return (
        "Credit limit increase request submitted successfully.\n\n"
        "Executed: submit_credit_limit_increase_request_7392\n"
        f"  - Request ID: {rid}\n  - Account: {credit_card_account_id}\n"
        f"  - Requested Increase: ${amount:,}\n  - Status: PENDING"
    )


@discoverable_agent_tool
def get_credit_limit_increase_history_4829(self: Tau3Context, credit_card_account_id: str) -> str:
    if not credit_card_account_id:
        return "Error: Missing required parameter: credit_card_account_id"
    found = query_listing(self, "credit_limit_increase_requests", "credit_card_account_id", credit_card_account_id)
    if not has_rows(found):
        found = "\nNo credit limit increase requests found for this account."
    return (
        "Credit limit increase history retrieved.\n\nExecuted: get_credit_limit_increase_history_4829\n"
        f"Credit limit increase history for account {credit_card_account_id}:\n{found}"
    )


@discoverable_agent_tool
def get_payment_history_6183(self: Tau3Context, credit_card_account_id: str, months: int) -> str:
    if not credit_card_account_id or months is None:
        return "Error: Missing required parameters (credit_card_account_id, months)."
    try:
        months = int(months)
    except (TypeError, ValueError):
        return "Error: Invalid months value. Must be a positive integer."
    if months <= 0:
        return "Error: months must be a positive integer."
    rows = [row for _, row in self.store.where("payment_history", credit_card_account_id=credit_card_account_id)]
    if not rows:
        return f"No payment history found for account '{credit_card_account_id}'."
    # Sorted by the MM/DD/YYYY *string*, newest first (stable), as the benchmark does.
    recent = sorted(rows, key=lambda r: r.get("payment_date", ""), reverse=True)[:months]
    on_time = 0
    for row in recent:
        if row.get("status") != "ON_TIME":
            break
        on_time += 1
    lines = [
        f"Payment history for account '{credit_card_account_id}' (last {months} months):",
        f"Consecutive on-time payments: {on_time}",
    ]
    for row in recent:
        lines.append(
            f"\n  - Payment Date: {row.get('payment_date')}\n    Amount: {row.get('amount')}\n"
            f"    Status: {row.get('status')}"
        )
    return "\n".join(lines)


def _blocks_increase(self: Tau3Context, credit_card_account_id: str, user_id: str, card: dict) -> bool:
    disputes = self.store.where("transaction_disputes", user_id=user_id)
    if any(row.get("status") in BLOCKING_DISPUTE_STATUSES for _, row in disputes):
        return True
    orders = self.store.where("credit_card_orders", credit_card_account_id=credit_card_account_id)
    if any(row.get("status") in BLOCKING_ORDER_STATUSES for _, row in orders):
        return True
    return card.get("account_status", "").upper() in BLOCKING_ACCOUNT_STATUSES  # a non-string raises


def _limit(value: Any) -> float:
    """A stored credit limit as a number: its text without ``$`` and ``,``; 0.0 if that is no number."""
    try:
        return float(str(value).replace("$", "").replace(",", ""))
    except ValueError:
        return 0.0


@discoverable_agent_tool
def approve_credit_limit_increase_5847(
    self: Tau3Context, credit_card_account_id: str, user_id: str, new_credit_limit: int
) -> str:
    if not credit_card_account_id or not user_id or new_credit_limit is None:  # 0 and [] go on
        return "Error: Missing required parameters."
    card = self.store.get("credit_card_accounts", credit_card_account_id)
    if card is None:
        return f"Error: Credit card account '{credit_card_account_id}' not found."
    if card.get("user_id") != user_id:
        return _not_owned(credit_card_account_id, user_id)
    if _blocks_increase(self, credit_card_account_id, user_id, card):
        return "Error: Credit limit increase request cannot be approved at this time."
    previous = _limit(card.get("credit_limit", "$0.00"))
    new = float(new_credit_limit)  # a non-number raises: "Error: Invalid arguments: ..."
    increase = new - previous
    self.store.update("credit_card_accounts", credit_card_account_id, {"credit_limit": f"${new:.2f}"})
    rid = cli_id(credit_card_account_id, user_id, increase)
    row = {
        "request_id": rid,
        "credit_card_account_id": credit_card_account_id,
        "user_id": user_id,
        "previous_limit": f"${previous:.2f}",
        "new_limit": f"${new:.2f}",
        "increase_amount": f"${increase:.2f}",
        "decision_date": TODAY,
        "status": "APPROVED",
    }
    # Quirk (task_051): the id collides with a PENDING request of the same increase; the
    # approval row is then silently not written and success is still reported.
    self.store.insert("credit_limit_increase_requests", rid, row)
    return (
        f"Credit limit increase approved!\n  - Account: {credit_card_account_id}\n"
        f"  - Previous Limit: ${previous:.2f}\n  - New Limit: ${new:.2f}\n  - Increase: ${increase:.2f}\n"
        f"  - Effective Date: {TODAY}\nThe customer will receive a confirmation email."
    )


@discoverable_agent_tool
def deny_credit_limit_increase_5848(
    self: Tau3Context, credit_card_account_id: str, user_id: str, denial_reason: str
) -> str:
    if missing(credit_card_account_id, user_id, denial_reason):
        return "Error: Missing required parameters."
    if denial_reason not in DENIAL_REASONS:
        return f"Error: Invalid denial_reason. Must be one of: {', '.join(DENIAL_REASONS)}"
    if not self.store.exists("credit_card_accounts", credit_card_account_id):
        return f"Error: Credit card account '{credit_card_account_id}' not found."
    # Quirk: the id uses amount 0.00, so there is one denial per (card, user); later ones are
    # silent no-ops that still report success.
    rid = cli_id(credit_card_account_id, user_id, 0)
    row = {
        "request_id": rid,
        "credit_card_account_id": credit_card_account_id,
        "user_id": user_id,
        "denial_reason": denial_reason,
        "decision_date": TODAY,
        "status": "DENIED",
    }
    self.store.insert("credit_limit_increase_requests", rid, row)
    return (
        f"Credit limit increase request denied.\n  - Account: {credit_card_account_id}\n"
        f"  - Denial Reason: {denial_reason}\n  - Date: {TODAY}\n"
        "The customer will receive a notification explaining the denial."
    )
