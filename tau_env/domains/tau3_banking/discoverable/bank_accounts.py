"""Discoverable agent tools: bank accounts (TOOLS.md section 4.5)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tau_env.domains.tau3_banking.toolkit import (
    TODAY,
    H,
    Tau3Context,
    age_days,
    discoverable_agent_tool,
    has_rows,
    listing,
    missing,
    money,
    query_listing,
)

ACCOUNT_TYPES = ["checking", "savings", "business_checking", "business_savings"]
PERSONAL_CHECKING = ("checking", "personal_checking")
LIVE = ("OPEN", "ACTIVE")

#: Early-closure fee and window in days by (class, level). Seed savings rows use class
#: "saving", so the "savings" entries never match them (TOOLS.md 9.6), on purpose.
EARLY_CLOSURE: dict[tuple[str, str], tuple[float, int]] = {
    **{("checking", lv): (15, 30) for lv in ("Light Blue", "Light Green", "Green Fee-Free")},
    **{("checking", lv): (25, 60) for lv in ("Blue", "Green")},
    ("checking", "Evergreen"): (50, 90),
    ("checking", "Bluest"): (100, 180),
    ("savings", "Bronze"): (20, 60),
    **{("savings", lv): (35, 90) for lv in ("Silver", "Silver Plus")},
    **{("savings", lv): (75, 180) for lv in ("Gold", "Gold Plus", "Gold Years")},
    **{("savings", lv): (150, 270) for lv in ("Platinum", "Platinum Plus", "Diamond Elite")},
}

CHECKING_CREDITS = {
    "rebate_credit": "REBATE CREDIT - CUSTOMER SERVICE",
    "fee_refund": "FEE REFUND - CUSTOMER SERVICE",
}
SAVINGS_CREDITS = {
    "interest_correction": "INTEREST CORRECTION - CUSTOMER SERVICE",
    "fee_refund": "FEE REFUND - CUSTOMER SERVICE",
    "goodwill_credit": "GOODWILL CREDIT - CUSTOMER SERVICE",
}


def balance_of(account: dict[str, Any]) -> float:
    """An account's balance: ``current_holdings``, else ``balance``, else 0 (TOOLS.md 1.6)."""
    return money(account.get("current_holdings", account.get("balance", 0)))


def is_live(account: dict[str, Any]) -> bool:
    """OPEN or ACTIVE, compared as stored (the benchmark does not fold case)."""
    return account.get("status", "") in LIVE


def _account_type(account: dict[str, Any]) -> Any:
    # New rows carry account_type, seed rows only class.
    return account.get("account_type", account.get("class", ""))


def _eligible(accounts: list[dict[str, Any]], account_type: str) -> bool:
    def checking_live(min_age: int) -> bool:
        return any(
            _account_type(a) in PERSONAL_CHECKING and is_live(a) and (age_days(a.get("date_opened")) or 0) >= min_age
            for a in accounts
        )

    if account_type == "savings":
        return checking_live(14)
    if account_type == "business_checking":
        if any(a.get("status") == "CLOSED" for a in accounts):
            return False
        return checking_live(0)
    if account_type == "business_savings":
        if any(balance_of(a) < 0 for a in accounts):
            return False
        return any(
            _account_type(a) == "business_checking" and is_live(a) and (age_days(a.get("date_opened")) or 0) >= 30
            for a in accounts
        )
    return True


@discoverable_agent_tool
def open_bank_account_4821(self: Tau3Context, user_id: str, account_type: str, account_class: str) -> str:
    if missing(user_id, account_type, account_class):
        return "Error: Missing required parameters."
    if account_type not in ACCOUNT_TYPES:
        return f"Error: Invalid account_type. Must be one of: {ACCOUNT_TYPES}"
    accounts = [row for _, row in self.store.where("accounts", user_id=user_id)]
    if not _eligible(accounts, account_type):
        return "Error: Account eligibility requirements not met."
    rid = H(f"account:{user_id}:{account_type}:{account_class}", 16)
    # Quirk (TOOLS.md 9.6): new rows use account_type / account_class, never class / level.
    row = {
        "account_id": rid,
        "user_id": user_id,
        "account_type": account_type,
        "account_class": account_class,
        "current_holdings": "0.00",
        "status": "OPEN",
        "date_opened": TODAY,
    }
    if not self.store.insert("accounts", rid, row):
        return f"Failed to open account: Account ID '{rid}' may already exist."
    return (
        f"Bank account opened successfully!\n  - Account ID: {rid}\n  - User ID: {user_id}\n"
        f"  - Account Type: {account_type}\n  - Account Class: {account_class}\n  - Status: OPEN\n"
        f"  - Initial Balance: $0.00\n  - Date Opened: {TODAY}"
    )


@discoverable_agent_tool
def close_bank_account_7392(
    self: Tau3Context,
    account_id: str,
    reason: str = "Customer requested closure",
    waive_early_closure_fee: bool = False,
) -> str:
    if not account_id:
        return "Error: Missing required parameter (account_id)."
    account = self.store.get("accounts", account_id)
    if account is None:
        return f"Error: Account '{account_id}' not found."
    if str(account.get("status", "")).upper() == "CLOSED":
        return f"Error: Account '{account_id}' is already closed."
    balance = balance_of(account)
    fee = 0
    if not waive_early_closure_fee:
        level = str(account.get("level", "")).removesuffix(" Account")
        rule = EARLY_CLOSURE.get((account.get("class"), level))
        age = age_days(account.get("date_opened"))
        if rule is not None and age is not None and age < rule[1]:
            if balance < rule[0]:
                return "Error: Account unable to be closed."
            fee = rule[0]
    # The fee only counts against the balance check; it is never deducted.
    if balance - fee != 0:
        return f"Error: Account balance must be $0.00 before closing. Current balance: ${balance:.2f}"
    self.store.update(
        "accounts",
        account_id,
        {
            "status": "CLOSED",
            "date_closed": TODAY,
            "closure_reason": reason,
            "early_closure_fee_waived": waive_early_closure_fee,
        },
    )
    return (
        f"Bank account closed successfully!\n  - Account ID: {account_id}\n"
        f"  - Account Type: {account.get('account_type', 'N/A')}\n"
        f"  - Account Class: {account.get('account_class', 'N/A')}\n  - Status: CLOSED\n"
        f"  - Date Closed: {TODAY}\n  - Reason: {reason}\n"
        f"  - Early Closure Fee Waived: {'Yes' if waive_early_closure_fee else 'No'}"
    )


@discoverable_agent_tool
def get_all_user_accounts_by_user_id_3847(self: Tau3Context, user_id: str) -> str:
    if not user_id:
        return "Error: Missing required parameter: user_id"
    bank = query_listing(self, "accounts", "user_id", user_id)
    if not has_rows(bank):
        bank = "  No bank accounts found."
    cards = query_listing(self, "credit_card_accounts", "user_id", user_id)
    if not has_rows(cards):
        cards = "  No credit card accounts found."
    return "\n".join(
        [
            "User accounts retrieved successfully.",
            "",
            "Executed: get_all_user_accounts_by_user_id_3847",
            f"Accounts for user {user_id}:",
            "",
            "Bank Accounts:",
            bank,
            "\nCredit Card Accounts:",
            cards,
        ]
    )


@discoverable_agent_tool
def transfer_funds_between_bank_accounts_7291(
    self: Tau3Context, source_account_id: str, destination_account_id: str, amount: float
) -> str:
    if not source_account_id or not destination_account_id or amount is None:  # 0 and [] go on
        return "Error: Missing required parameters (source_account_id, destination_account_id, amount)."
    try:
        value = float(amount)
    except (TypeError, ValueError):
        return f"Error: Invalid amount '{amount}'. Must be a number."
    if value <= 0:
        return "Error: Transfer amount must be positive."
    if source_account_id == destination_account_id:
        return "Error: Source and destination accounts cannot be the same."
    source = self.store.get("accounts", source_account_id)
    if source is None:
        return f"Error: Source account '{source_account_id}' not found."
    destination = self.store.get("accounts", destination_account_id)
    if destination is None:
        return f"Error: Destination account '{destination_account_id}' not found."
    if not is_live(source):
        return f"Error: Source account '{source_account_id}' is not active."
    if not is_live(destination):
        return f"Error: Destination account '{destination_account_id}' is not active."
    source_balance = balance_of(source)
    if source_balance < value:
        return (
            f"Error: Insufficient funds. Source account balance is ${source_balance:.2f}, "
            f"but transfer amount is ${value:.2f}."
        )
    new_source = source_balance - value
    new_destination = balance_of(destination) + value
    self.store.update("accounts", source_account_id, {"current_holdings": f"${new_source:.2f}"})
    self.store.update("accounts", destination_account_id, {"current_holdings": f"${new_destination:.2f}"})
    return (
        f"Transfer completed successfully!\n  - Amount: ${value:.2f}\n"
        f"  - From: {source_account_id} (new balance: ${new_source:.2f})\n"
        f"  - To: {destination_account_id} (new balance: ${new_destination:.2f})"
    )


def _apply_credit(
    self: Tau3Context,
    account_id: str,
    amount: float,
    credit_type: str,
    *,
    kind: str,
    classes: tuple[str, ...],
    credits: dict[str, str],
    dollar: str,
) -> str:
    """The checking (``kind="checking"``) and savings (``kind="savings"``) credit tools."""
    if missing(account_id, credit_type) or amount is None:
        return "Error: Missing required parameters."
    try:
        value = float(amount)
    except (TypeError, ValueError):
        return "Error: Invalid credit amount. Must be a number."
    if value <= 0:
        return "Error: Credit amount must be positive."
    # A list scan, as the benchmark's: an unhashable credit_type is simply not in it.
    if credit_type not in list(credits):
        return f"Error: Invalid credit_type. Must be one of: {list(credits)}"
    account = self.store.get("accounts", account_id)
    if account is None:
        return f"Error: Account '{account_id}' not found."
    if account.get("class", "").lower() not in classes:
        return f"Error: Account '{account_id}' is not a {kind} account. " + (
            "Credits can only be applied to checking accounts."
            if kind == "checking"
            else "This tool only applies to savings accounts."
        )
    if account.get("status") not in LIVE:
        return f"Error: Account '{account_id}' is not active."
    previous = balance_of(account)
    new = previous + value
    rid = "txn_" + H(f"{kind}_credit:{account_id}:{credit_type}:{value}:{TODAY}", 16)
    # The balance's "$" prefix differs between the two tools (TOOLS.md 1.6).
    self.store.update("accounts", account_id, {"current_holdings": f"{dollar}{new:.2f}"})
    # Assigned directly, so an existing row with this id is overwritten (TOOLS.md 1.3).
    self.store.put(
        "bank_account_transaction_history",
        rid,
        {
            "transaction_id": rid,
            "account_id": account_id,
            "date": TODAY,
            "description": credits[credit_type],
            "amount": value,
            "type": credit_type,
            "status": "posted",
        },
    )
    return (
        f"\nCredit applied successfully!\n  - Transaction ID: {rid}\n  - Account: {account_id}\n"
        f"  - Credit Type: {credit_type}\n  - Amount: ${value:.2f}\n  - Previous Balance: ${previous:.2f}\n"
        f"  - New Balance: ${new:.2f}"
    )


@discoverable_agent_tool
def apply_checking_account_credit_5829(self: Tau3Context, account_id: str, amount: float, credit_type: str) -> str:
    return _apply_credit(
        self, account_id, amount, credit_type, kind="checking", classes=("checking",), credits=CHECKING_CREDITS,
        dollar="$",
    )  # fmt: skip


@discoverable_agent_tool
def apply_savings_account_credit_6831(self: Tau3Context, account_id: str, amount: float, credit_type: str) -> str:
    return _apply_credit(
        self, account_id, amount, credit_type, kind="savings", classes=("saving", "savings"),
        credits=SAVINGS_CREDITS, dollar="",
    )  # fmt: skip


@discoverable_agent_tool
def submit_interest_discrepancy_report_7294(
    self: Tau3Context,
    account_id: str,
    user_id: str,
    expected_apy: float,
    actual_apy: float,
    amount_difference: float,
) -> str:
    if missing(account_id, user_id) or any(v is None for v in (expected_apy, actual_apy, amount_difference)):
        return "Error: Missing required parameters."
    try:
        expected = float(expected_apy)
        actual = float(actual_apy)
        difference = float(amount_difference)
    except (TypeError, ValueError):
        return "Error: expected_apy, actual_apy, and amount_difference must be numbers."
    account = self.store.get("accounts", account_id)
    if account is None:
        return f"Error: Account '{account_id}' not found."
    user = self.store.get("users", user_id)
    if user is None:
        return f"Error: User '{user_id}' not found."
    rid = "IDR_" + H(f"interest_report:{account_id}:{user_id}:{expected}:{actual}:{TODAY}", 16)
    # Quirk (TOOLS.md 9.8): the report's table does not exist in the DB model, so nothing is
    # stored; the only DB effect is the call-log row written by call_discoverable_agent_tool.
    return (
        f"\nInterest Discrepancy Report Submitted Successfully!\n  - Report ID: {rid}\n"
        f"  - Account: {account_id} ({account.get('level', 'Unknown')})\n  - Customer: {user.get('name', 'Unknown')}\n"
        f"  - Expected APY: {expected}%\n  - Actual APY: {actual}%\n"
        f"  - APY Difference: {round(expected - actual, 4)}%\n  - Amount Difference: ${difference:.2f}\n"
        "  - Status: PENDING_REVIEW\n\n"
        "The backend team will investigate this discrepancy and ensure correct APY calculations are applied "
        "going forward."
    )


def _transaction_time(row: dict[str, Any]) -> datetime:
    date = str(row.get("date", ""))
    for fmt in ("%m/%d/%Y %H:%M:%S", "%m/%d/%Y"):
        try:
            return datetime.strptime(date, fmt)
        except ValueError:
            pass
    return datetime.min


@discoverable_agent_tool
def get_bank_account_transactions_9173(self: Tau3Context, account_id: str) -> str:
    if not account_id:
        return "Error: Missing required parameter: account_id"
    if not self.store.exists("accounts", account_id):
        return f"Error: Account '{account_id}' not found."
    rows = self.store.where("bank_account_transaction_history", account_id=account_id)
    # Newest first; the sort is stable, so same-date rows keep their stored order.
    rows = sorted(rows, key=lambda item: _transaction_time(item[1]), reverse=True)
    found = listing("bank_account_transaction_history", rows) if rows else "\nNo transactions found for this account."
    return (
        "Bank account transactions retrieved successfully.\n\nExecuted: get_bank_account_transactions_9173\n"
        f"Transactions for account {account_id}:\n{found}"
    )
