"""The 6 user tools and the 4 discoverable user tools (TOOLS.md sections 5 and 6)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from tau_env.domains.tau3_banking import interface
from tau_env.domains.tau3_banking.toolkit import (
    TODAY,
    USER_TOOLS,
    H,
    Tau3Context,
    discoverable_user_tool,
    executed_block,
    listing,
    money,
    query_listing,
    seed,
    shown_name,
    user_tool,
)

CARD_TYPES = [
    "Bronze Rewards Card", "Business Bronze Rewards Card", "Business Gold Rewards Card",
    "Business Platinum Rewards Card", "Business Silver Rewards Card", "Crypto-Cash Back", "Diamond Elite Card",
    "EcoCard", "Gold Rewards Card", "Green Rewards Card", "Platinum Rewards Card", "Silver Rewards Card",
    "Silver Zoom Card",
]  # fmt: skip

#: Rewards rate in percent by card and category ("default" otherwise), in the benchmark's table order.
REWARDS: dict[str, dict[str, float]] = {
    "Bronze Rewards Card": {"default": 1},
    "Silver Rewards Card": {"Travel": 4, "Software": 4, "default": 1},
    "Gold Rewards Card": {"default": 2.5},
    "Platinum Rewards Card": {"default": 10},
    "Business Bronze Rewards Card": {"default": 1},
    "Business Silver Rewards Card": {"Travel": 10, "Software": 10, "default": 1},
    "Green Rewards Card": {"Sustainable": 3, "default": 1},
    "Business Gold Rewards Card": {"Operations": 2.5, "default": 1},
    "Business Platinum Rewards Card": {"Travel": 4, "Software": 4, "Media": 4, "default": 1.5},
    "Silver Zoom Card": {"Transportation": 3, "default": 1},
    "Diamond Elite Card": {"default": 5},
    "EcoCard": {"Green": 5, "default": 1},
    "Crypto-Cash Back": {"default": 2},
}


@user_tool
def apply_for_credit_card(
    self: Tau3Context, card_type: str, customer_name: str, annual_income: float, rho_bank_subscription: bool = False
) -> str:
    if card_type not in CARD_TYPES:
        return f"Error: Invalid card_type '{card_type}'. Must be one of: {CARD_TYPES}"
    try:
        income = float(annual_income)
    except (TypeError, ValueError):
        return "Error: Invalid annual_income. Must be a number."
    rid = H(f"credit_card:{card_type}:{customer_name}:{income}:{rho_bank_subscription}", 16)
    row = {
        "application_id": rid,
        "card_type": card_type,
        "customer_name": customer_name,
        "annual_income": income,
        "rho_bank_subscription": rho_bank_subscription,
        "status": "PENDING",
        "date": TODAY,
    }
    if not self.store.insert("credit_card_applications", rid, row):
        return f"Failed to submit application: Record ID '{rid}' may already exist."
    return (
        "Credit card application submitted:\nYour application has been successfully submitted. "
        "You will receive a decision within 5-7 business days via email."
    )


@user_tool
def submit_referral(self: Tau3Context, user_id: str, account_type: str) -> str:
    rid = H(seed("referral", user_id, account_type), 16)
    row = {
        "referral_id": rid,
        "referrer_id": user_id,
        "referred_account_type": account_type,
        "referral_status": "NO_PROGRESS",
        "date": TODAY,
    }
    if not self.store.insert("referrals", rid, row):
        return f"Failed to submit referral: Record ID '{rid}' may already exist."
    return (
        f"Referral request submitted successfully!\n  - Referral ID: {rid}\n  - Referrer ID: {user_id}\n"
        f"  - Account Type: {account_type}\n  - Status: NO_PROGRESS\n  - Date: {TODAY}\n\n"
        "Share your referral ID with the person you're referring. They will need to use this when applying "
        "for their account."
    )


@user_tool
def call_discoverable_user_tool(self: Tau3Context, discoverable_tool_name: str, arguments: str = "{}") -> str:
    spec = USER_TOOLS.get(discoverable_tool_name)
    if spec is None or not spec.discoverable:
        return f"Error: Unknown discoverable tool '{shown_name(discoverable_tool_name)}'."
    try:
        args = json.loads(arguments, parse_int=float)  # every integer literal becomes a float
    except json.JSONDecodeError as e:
        return f"Error: Invalid JSON in arguments: {e}"
    params = interface.DISCOVERABLE_USER[discoverable_tool_name]["params"]
    for name, required in params:
        if required and name not in args:
            return f"Error: Missing required parameter: {name}"
    names = [name for name, _ in params]
    for key in args:
        if key not in names:
            return f"Error: Unexpected parameter: {key}"
    try:
        return spec.fn(self, **args)
    except TypeError as e:
        return f"Error: Invalid arguments for tool '{discoverable_tool_name}': {e}"


@user_tool
def list_discoverable_user_tools(self: Tau3Context) -> str:
    return "Tools given to you by the agent:\n" + listing(
        "user_discoverable_tools", self.store.rows("user_discoverable_tools")
    )


@user_tool
def request_human_agent_transfer(self: Tau3Context) -> str:
    n = self.store.count("human_transfer_requests") + 1
    rid = f"transfer_request_{n}"
    self.store.insert(
        "human_transfer_requests",
        rid,
        {"request_id": rid, "request_number": n, "requested_at": TODAY, "status": "PENDING"},
    )
    return f"Transfer request #{n} submitted.\nThe agent will process your request."


@user_tool
def submit_transaction(
    self: Tau3Context, user_id: str, credit_card_type: str, merchant_name: str, amount: float, category: str
) -> str:
    if credit_card_type not in REWARDS:
        return f"Error: Unknown credit card type '{credit_card_type}'. Available types: {list(REWARDS)}"
    # The benchmark's order: the id (amount formatted, then the parts joined), then the rate and points.
    rid = "txn_" + H(seed("transaction", user_id, credit_card_type, merchant_name, f"{amount:.2f}", category), 12)
    rates = REWARDS[credit_card_type]
    rate = rates.get(category, rates["default"])
    points = int(amount * rate)
    row = {
        "transaction_id": rid,
        "user_id": user_id,
        "credit_card_type": credit_card_type,
        "merchant_name": merchant_name,
        "transaction_amount": f"${amount:.2f}",
        "transaction_date": TODAY,
        "category": category,
        "status": "COMPLETED",
        "rewards_earned": f"{points} points",
    }
    if not self.store.insert("credit_card_transaction_history", rid, row):
        return f"Failed to submit transaction: Record ID '{rid}' may already exist."
    return (
        f"Transaction submitted successfully!\n  - Transaction ID: {rid}\n  - User ID: {user_id}\n"
        f"  - Card Type: {credit_card_type}\n  - Merchant: {merchant_name}\n  - Amount: ${amount:.2f}\n"
        f"  - Category: {category}\n  - Date: {TODAY}\n"
        f"  - Rewards Earned: {points} points ({float(rate)}% cashback rate)\n"
    )


# --- discoverable user tools ---------------------------------------------------------------------
def _given_and_logged(self: Tau3Context, name: str, arguments: dict[str, Any]) -> str | None:
    """Check that the agent gave ``name``, then log the call; returns an error text if not given."""
    if not self.store.where("user_discoverable_tools", tool_name=name):
        return (
            f"Error: Tool '{name}' has not been given to you by the agent. The agent must first use "
            "`give_discoverable_user_tool` to give this tool to you."
        )
    key = json.dumps(arguments, sort_keys=True)
    self.store.insert(
        "user_discoverable_tool_calls",
        H(f"user_discoverable_tool_call:{name}:{key}", 16),
        {"tool_name": name, "arguments": arguments, "called_at": TODAY, "status": "CALLED"},
    )
    return None


@discoverable_user_tool
def submit_cash_back_dispute_0589(self: Tau3Context, user_id: str, transaction_id: str) -> str:
    name = "submit_cash_back_dispute_0589"
    args = {"user_id": user_id, "transaction_id": transaction_id}
    error = _given_and_logged(self, name, args)
    if error:
        return error
    settings = self.store.get("task_config", "dispute_settings") or {}
    resolve = bool(settings.get("auto_resolve_disputes"))
    rid = "dsp_" + H(f"dispute:{user_id}:{transaction_id}", 12)
    row = {
        "dispute_id": rid,
        "user_id": user_id,
        "transaction_id": transaction_id,
        "submitted_at": TODAY,
        "status": "RESOLVED" if resolve else "SUBMITTED",
    }
    if resolve:
        row["resolution"] = "APPROVED"
    head = "Cash back dispute submitted successfully. Your case has been queued for review.\n\n" + executed_block(
        name, args
    )
    if not self.store.insert("cash_back_disputes", rid, row):
        return head + "\nNote: Dispute may have already been submitted for this transaction."
    status = (
        "RESOLVED - The dispute has been reviewed and approved. The transaction rewards need to be updated."
        if resolve
        else "SUBMITTED - Your dispute has been queued for review."
    )
    return head + f"\nDispute ID: {rid}\nStatus: {status}"


@discoverable_user_tool
def get_referral_link(self: Tau3Context, user_id: str, card_name: str) -> str:
    name = "get_referral_link"
    args = {"user_id": user_id, "card_name": card_name}
    error = _given_and_logged(self, name, args)
    if error:
        return error
    rid = H(f"referral_link:{user_id}:{card_name}", 16)
    row = {
        "referral_id": rid,
        "referrer_id": user_id,
        "referred_account_type": card_name,
        "referral_status": "NO_PROGRESS",
        "date": TODAY,
    }
    head = (
        "Referral link generated successfully. Share this link with the person you want to refer.\n\n"
        + executed_block(name, args)
    )
    if not self.store.insert("referrals", rid, row):
        return head + "\nNote: A referral link for this card may have already been generated."
    return head + f"\nReferral ID: {rid}\nReferral link: https://rhobank.com/refer/{rid}"


def card_last4(cc_id: str) -> str:
    digits = [c for c in hashlib.sha256(f"card_last4:{cc_id}".encode()).hexdigest() if c.isdigit()][:4]
    return "".join(digits).ljust(4, "0")


@discoverable_user_tool
def get_card_last_4_digits(self: Tau3Context, credit_card_account_id: str) -> str:
    name = "get_card_last_4_digits"
    args = {"credit_card_account_id": credit_card_account_id}
    error = _given_and_logged(self, name, args)
    if error:
        return error
    # The benchmark looks the account up by its account_id field, with the id pasted into a JSON
    # filter: a filter that does not parse finds "no error", so the lookup passes.
    if "No records found" in query_listing(self, "credit_card_accounts", "account_id", credit_card_account_id):
        return f"Error: Credit card account '{credit_card_account_id}' not found."
    return (
        "Card information retrieved successfully.\n\n"
        + executed_block(name, args)
        + f"\nLast 4 digits of card: {card_last4(credit_card_account_id)}"
    )


@discoverable_user_tool
def deposit_check_3847(self: Tau3Context, account_id: str, check_amount: float) -> str:
    name = "deposit_check_3847"
    args = {"account_id": account_id, "check_amount": check_amount}
    error = _given_and_logged(self, name, args)
    if error:
        return error
    try:
        amount = float(check_amount)
    except (TypeError, ValueError):
        return f"Error: Invalid check amount '{check_amount}'. Must be a number."
    if amount <= 0:
        return "Error: Check amount must be positive."
    acct = self.store.get("accounts", account_id)
    if acct is None:
        return f"Error: Account '{account_id}' not found."
    if acct.get("status") not in ("ACTIVE", "OPEN"):
        return f"Error: Account '{account_id}' is not active."
    previous = money(acct.get("current_holdings", acct.get("balance", 0)))
    new = previous + amount
    self.store.update("accounts", account_id, {"current_holdings": f"${new:.2f}"})
    return (
        "Check deposited successfully. Funds will be available according to your account's deposit policy.\n\n"
        + executed_block(name, args)
        + f"\nCheck deposit processed!\n  - Account: {account_id}\n  - Check Amount: ${amount:.2f}\n"
        f"  - Previous Balance: ${previous:.2f}\n  - New Balance: ${new:.2f}"
    )
