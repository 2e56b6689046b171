"""Discoverable agent tools: debit_cards (TOOLS.md section 4.6)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from tau_env.domains.tau3_banking.toolkit import (
    TODAY,
    H,
    Tau3Context,
    discoverable_agent_tool,
    has_rows,
    missing,
    query_listing,
    title_case,
)

# --- shared rules ---------------------------------------------------------------------------------
SEQUENTIAL_PINS = (
    "0123", "1234", "2345", "3456", "4567", "5678", "6789", "9876", "8765", "7654", "6543", "5432", "4321", "3210",
)  # fmt: skip

#: Which activation tool serves which issue_reason.
ACTIVATION_TOOL = {
    "new_account": "activate_debit_card_8291",
    "first_card": "activate_debit_card_8291",
    "lost": "activate_debit_card_8292",
    "stolen": "activate_debit_card_8292",
    "fraud": "activate_debit_card_8292",
    "expired": "activate_debit_card_8293",
    "damaged": "activate_debit_card_8293",
    "upgrade": "activate_debit_card_8293",
    "bank_reissue": "activate_debit_card_8293",
}

DELIVERY_DAYS = {"STANDARD": "7-10 business days", "EXPEDITED": "3-5 business days", "RUSH": "1-2 business days"}
CARD_DESIGNS = ("CLASSIC", "PREMIUM", "CUSTOM")
CLOSE_REASONS = ("lost", "stolen", "fraud_suspected", "damaged", "no_longer_needed", "account_closing")

DISPUTE_CATEGORIES = (
    "unauthorized_transaction", "atm_cash_discrepancy", "atm_deposit_not_credited", "duplicate_charge",
    "incorrect_amount", "goods_services_not_received", "recurring_charge_after_cancellation", "card_present_fraud",
    "card_not_present_fraud",
)  # fmt: skip
FRAUD_CATEGORIES = ("unauthorized_transaction", "card_present_fraud", "card_not_present_fraud")
TRANSACTION_TYPES = (
    "pin_purchase", "signature_purchase", "online_purchase", "atm_withdrawal", "atm_deposit", "recurring_payment",
    "person_to_person",
)  # fmt: skip
PIN_COMPROMISED = ("yes_shared", "yes_observed", "no", "unknown")
CARD_ACTIONS = ("keep_active", "freeze_pending_investigation", "close_and_reissue")

#: Default daily ATM limit by account level (lower-cased, without the " account" suffix).
DEFAULT_ATM_LIMITS = {
    "blue": 500, "green": 600, "light blue": 400, "green fee-free": 500, "evergreen": 750, "bluest": 1500,
    "dark green": 300, "gold years": 600, "purple": 1000,
}  # fmt: skip

#: The last day of each month as written in expiration dates (February is always 28).
MONTH_END = {1: 31, 2: 28, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}


def _pin_error(pin: Any) -> str | None:
    """The PIN rules shared by activation, reset and change; ``isdigit`` runs on the raw value."""
    if not pin or not pin.isdigit() or len(pin) != 4:
        return "Error: PIN must be exactly 4 digits."
    if pin in SEQUENTIAL_PINS:
        return "Error: PIN cannot be sequential (e.g., 1234). Please choose a more secure PIN."
    if len(set(pin)) == 1:
        return "Error: PIN cannot be all the same digit (e.g., 1111). Please choose a more secure PIN."
    return None


def _digits(seed: str, n_hex: int, keep: int) -> str:
    """Decimal digits of ``H(seed, n_hex)``: the first ``keep``, left-padded with ``0``."""
    return "".join(c for c in H(seed, n_hex) if c.isdigit())[:keep].rjust(keep, "0")


def _cards_of(self: Tau3Context, account_id: Any) -> list[tuple[str, dict[str, Any]]]:
    return self.store.where("debit_cards", account_id=account_id)


def _fee_parts(delivery_fee: float, design_fee: float, excess: float) -> list[tuple[str, str]]:
    """The positive fees as (label, amount text): float repr for delivery and design, whole dollars for excess."""
    parts = [("Delivery", f"${delivery_fee}"), ("Design", f"${design_fee}"), ("Excess Replacement", f"${excess:.0f}")]
    return [part for part, fee in zip(parts, (delivery_fee, design_fee, excess)) if fee > 0]


def _new_card_issue_reason(cards: list[tuple[str, dict[str, Any]]]) -> str:
    """A new card's issue_reason, from the account's first CLOSED card, else whether it has any card."""
    closed = [card for _, card in cards if card.get("status") == "CLOSED"]
    if closed:
        closure = closed[0].get("closure_reason")
        if closure in ("lost", "stolen"):
            return closure
        return "fraud" if closure in ("fraud", "fraud_suspected") else "first_card"
    return "first_card" if cards else "new_account"


# --- ordering -------------------------------------------------------------------------------------
@discoverable_agent_tool
def order_debit_card_5739(
    self: Tau3Context,
    account_id: str,
    user_id: str,
    delivery_option: str,
    delivery_fee: float,
    card_design: str,
    design_fee: float,
    shipping_address: str,
    excess_replacement_fee: float | None = None,
) -> str:
    # null fees stay null and count as missing below; a fee that is no number is an error
    try:
        delivery_fee = None if delivery_fee is None else float(delivery_fee)
    except (TypeError, ValueError):
        return "Error: delivery_fee must be a number."
    try:
        design_fee = None if design_fee is None else float(design_fee)
    except (TypeError, ValueError):
        return "Error: design_fee must be a number."
    try:
        excess: float = float(excess_replacement_fee or 0)
    except (TypeError, ValueError):
        excess = 0  # the integer 0, stored as such (a benchmark quirk)
    if not all([account_id, user_id, delivery_option, card_design, shipping_address]) or None in (
        delivery_fee,
        design_fee,
    ):
        return (
            "Error: Missing required parameters. Required: account_id, user_id, delivery_option, delivery_fee, "
            "card_design, design_fee, shipping_address."
        )
    option = delivery_option.upper()
    if option not in DELIVERY_DAYS:
        return f"Error: Invalid delivery_option. Must be one of: {list(DELIVERY_DAYS)}"
    design = card_design.upper()
    if design not in CARD_DESIGNS:
        return f"Error: Invalid card_design. Must be one of: {list(CARD_DESIGNS)}"
    account = self.store.get("accounts", account_id)
    if account is None:
        return f"Error: Account '{account_id}' not found."
    if account.get("class") != "checking":
        return (
            f"Error: Debit cards can only be ordered for checking accounts. "
            f"Account '{account_id}' is a {account.get('class')} account."
        )
    if account.get("status") != "OPEN":
        return f"Error: Account must be OPEN. Account '{account_id}' has status: {account.get('status')}"
    if account.get("user_id") != user_id:
        return f"Error: Account '{account_id}' does not belong to user '{user_id}'."
    # Only "," is stripped here, so a "$"-prefixed balance fails to parse and counts as 0 (a benchmark quirk).
    try:
        balance = float(str(account.get("current_holdings", account.get("balance", 0))).replace(",", ""))
    except ValueError:
        balance = 0.0
    if balance < 25:
        return f"Error: Account must have a minimum balance of $25. Current balance: ${balance:.2f}"
    if self.store.where("debit_card_orders", account_id=account_id, status="PENDING"):
        return f"Error: There is already a pending debit card order for account '{account_id}'."
    cards = _cards_of(self, account_id)
    if any(card.get("status") == "ACTIVE" for _, card in cards):
        return (
            f"Error: Account '{account_id}' already has an active debit card. "
            "Maximum 1 active card per checking account."
        )
    total = delivery_fee + design_fee + excess
    if total > 0 and balance < total:
        return f"Error: Insufficient funds for fees. Total fees: ${total:.2f}. Current balance: ${balance:.2f}"

    order_id = "dcord_" + H(f"debit_card_order:{account_id}:{user_id}:{option}", 12)
    order = {
        "order_id": order_id,
        "account_id": account_id,
        "user_id": user_id,
        "delivery_option": option,
        "card_design": design,
        "shipping_address": shipping_address,
        "delivery_fee": delivery_fee,
        "design_fee": design_fee,
        "excess_replacement_fee": excess,
        "total_fee": total,
        "order_date": TODAY,
        "expected_delivery": DELIVERY_DAYS[option],
        "status": "PENDING",
    }
    if not self.store.insert("debit_card_orders", order_id, order):
        return "Error: Failed to create debit card order. Order may already exist."

    new_balance = balance - total
    fees = _fee_parts(delivery_fee, design_fee, excess)
    if total > 0:
        self.store.update("accounts", account_id, {"current_holdings": f"{new_balance:.2f}"})
        fee_id = "btxn_dcfee_" + order_id[-8:]
        fee_row = {
            "transaction_id": fee_id,
            "account_id": account_id,
            "date": TODAY,
            "description": "DEBIT CARD ORDER FEE - " + ", ".join(f"{k} {v}" for k, v in fees),
            "amount": -total,
            "type": "debit_card_fee",
            "status": "posted",
        }
        self.store.insert("bank_account_transaction_history", fee_id, fee_row)

    user = self.store.get("users", user_id) or {}
    month, _, year = TODAY.split("/")
    card_id = "dbc_" + H(f"debit_card:{account_id}:{user_id}:{TODAY}", 12)
    card = {
        "card_id": card_id,
        "account_id": account_id,
        "user_id": user_id,
        "cardholder_name": user["name"].upper() if user.get("name") else "CARDHOLDER",
        "last_4_digits": _digits(f"card_details:{card_id}:last4", 8, 4),
        "cvv": _digits(f"card_details:{card_id}:cvv", 6, 3),
        "status": "PENDING",
        "issue_date": TODAY,
        "expiration_date": f"{month}/{MONTH_END[int(month)]}/{int(year) + 4}",
        "card_design": design,
        "issue_reason": _new_card_issue_reason(cards),
    }
    self.store.insert("debit_cards", card_id, card)

    lines = [
        "Debit Card Order Confirmed",
        f"Order ID: {order_id}",
        f"Card ID: {card_id}",
        f"Linked Account: {account_id}",
        f"Delivery Option: {option}",
        f"Card Design: {design}",
        f"Shipping Address: {shipping_address}",
        f"Expected Delivery: {DELIVERY_DAYS[option]}",
        "",
        "Note: Card will arrive with status PENDING. Customer must call to activate after receiving the card.",
    ]
    if total > 0:
        shown = ", ".join(f"{k}: {v}" for k, v in fees)
        lines.append(f"Total Fees: ${total:.2f} ({shown}) - CHARGED to account {account_id}")
        lines.append(f"New Account Balance: ${new_balance:.2f}")
    else:
        lines.append("Total Fees: $0 (No additional charges)")
    return "\n".join(lines)


# --- activation -----------------------------------------------------------------------------------
def _activate(
    self: Tau3Context, tool: str, card_id: Any, last_4_digits: Any, expiration_date: Any, cvv: Any, pin: Any
) -> tuple[str, list[str]] | str:
    """The checks and writes the three activation tools share.

    Returns an error text, or the card's issue_reason and the other cards on the account that are
    still ACTIVE (the caller changes them). As in the benchmark, the CVV and the expiration date are
    never compared with the card, and the PIN is not stored.
    """
    if not all([card_id, last_4_digits, expiration_date, cvv, pin]):
        return "Error: Missing required parameters. Required: card_id, last_4_digits, expiration_date, cvv, pin."
    error = _pin_error(pin)
    if error:
        return error
    # isdigit() runs on the raw value first: a numeric cvv raises AttributeError, as in the benchmark.
    if not cvv.isdigit() or len(cvv) != 3:
        return "Error: CVV must be exactly 3 digits."
    if not last_4_digits.isdigit() or len(last_4_digits) != 4:
        return "Error: Last 4 digits must be exactly 4 digits."
    card = self.store.get("debit_cards", card_id)
    if card is None:
        return f"Error: Debit card '{card_id}' not found."
    reason = card.get("issue_reason", "new_account")
    if ACTIVATION_TOOL.get(reason) != tool:
        correct = ACTIVATION_TOOL.get(reason, "the appropriate activation tool")
        return (
            f"Error: Wrong activation tool. This card has issue_reason='{reason}'. "
            f"Please use {correct} instead of {tool}."
        )
    status = card.get("status")
    if status == "ACTIVE":
        return f"Error: Debit card '{card_id}' is already active."
    if status != "PENDING":
        return (
            f"Error: Debit card '{card_id}' cannot be activated. Current status: {status}. "
            "Only PENDING cards can be activated."
        )
    if card.get("last_4_digits") != last_4_digits:
        return "Error: Card verification failed. The last 4 digits do not match our records."
    account_id = card.get("account_id")
    account = self.store.get("accounts", account_id)
    if account is not None and account.get("status") != "OPEN":
        return f"Error: The linked checking account '{account_id}' is no longer open. Card cannot be activated."
    self.store.update("debit_cards", card_id, {"status": "ACTIVE", "activated_date": TODAY})
    others = [rid for rid, other in _cards_of(self, account_id) if rid != card_id and other.get("status") == "ACTIVE"]
    return reason, others


def _card_list(title: str, ids: list[str]) -> list[str]:
    return ["", title, *(f"- {rid}" for rid in ids)] if ids else []


@discoverable_agent_tool
def activate_debit_card_8291(
    self: Tau3Context, card_id: str, last_4_digits: str, expiration_date: str, cvv: str, pin: str
) -> str:
    result = _activate(self, "activate_debit_card_8291", card_id, last_4_digits, expiration_date, cvv, pin)
    if isinstance(result, str):
        return result
    _, others = result
    for rid in others:
        self.store.update(
            "debit_cards",
            rid,
            {"status": "DEACTIVATED", "deactivated_date": TODAY, "deactivation_reason": "New card activated"},
        )
    lines = [
        "New Debit Card Activation Successful",
        f"Card ID: {card_id}",
        "Status: ACTIVE",
        f"Activation Date: {TODAY}",
        "",
        "Your new card is now ready to use.",
        *_card_list("Previous cards deactivated:", others),
    ]
    return "\n".join(lines)


@discoverable_agent_tool
def activate_debit_card_8292(
    self: Tau3Context, card_id: str, last_4_digits: str, expiration_date: str, cvv: str, pin: str
) -> str:
    result = _activate(self, "activate_debit_card_8292", card_id, last_4_digits, expiration_date, cvv, pin)
    if isinstance(result, str):
        return result
    reason, others = result
    for rid in others:
        self.store.update(
            "debit_cards",
            rid,
            {
                "status": "DEACTIVATED",
                "deactivated_date": TODAY,
                "deactivation_reason": f"Replacement card activated ({reason})",
            },
        )
    lines = [
        "Replacement Debit Card Activation Successful",
        f"Card ID: {card_id}",
        f"Replacement Reason: {title_case(reason)}",
        "Status: ACTIVE",
        f"Activation Date: {TODAY}",
        "",
        "Your replacement card is now ready to use.",
        "",
        "IMPORTANT SECURITY REMINDERS:",
        "- Please review your recent transactions for any unauthorized charges",
        "- Report any suspicious activity immediately",
    ]
    if reason == "fraud":
        lines.append("- Consider changing your online banking password")
    lines.extend(_card_list("Previous cards deactivated:", others))
    return "\n".join(lines)


@discoverable_agent_tool
def activate_debit_card_8293(
    self: Tau3Context, card_id: str, last_4_digits: str, expiration_date: str, cvv: str, pin: str
) -> str:
    result = _activate(self, "activate_debit_card_8293", card_id, last_4_digits, expiration_date, cvv, pin)
    if isinstance(result, str):
        return result
    reason, others = result
    for rid in others:
        self.store.update(
            "debit_cards",
            rid,
            {
                "status": "GRACE_PERIOD",
                "grace_period_ends": TODAY,
                "deactivation_reason": f"Reissued card activated ({reason})",
            },
        )
    lines = [
        "Reissued Debit Card Activation Successful",
        f"Card ID: {card_id}",
        f"Reissue Reason: {title_case(reason)}",
        "Status: ACTIVE",
        f"Activation Date: {TODAY}",
        "",
        "Your reissued card is now ready to use.",
        *_card_list(f"Previous cards in grace period (ends {TODAY}):", others),
    ]
    if reason in ("expired", "bank_reissue"):
        lines.extend(
            [
                "",
                "REMINDER: Update any recurring payments or subscriptions with the new card's expiration date and CVV.",
            ]
        )
    return "\n".join(lines)


# --- status changes -------------------------------------------------------------------------------
@discoverable_agent_tool
def close_debit_card_4721(self: Tau3Context, card_id: str, reason: str) -> str:
    if missing(card_id, reason):
        return "Error: Missing required parameters. Required: card_id, reason."
    reason = reason.lower()
    if reason not in CLOSE_REASONS:
        return f"Error: Invalid reason. Must be one of: {list(CLOSE_REASONS)}"
    card = self.store.get("debit_cards", card_id)
    if card is None:
        return f"Error: Debit card '{card_id}' not found."
    status = card.get("status")
    if status not in ("ACTIVE", "PENDING"):
        return (
            f"Error: Debit card '{card_id}' cannot be closed. Current status: {status}. "
            "Only ACTIVE or PENDING cards can be closed."
        )
    self.store.update("debit_cards", card_id, {"status": "CLOSED", "closed_date": TODAY, "closure_reason": reason})
    lines = [
        "Debit Card Closed Successfully",
        f"Card ID: {card_id}",
        f"Previous Status: {status}",
        "New Status: CLOSED",
        f"Closure Reason: {title_case(reason)}",
        f"Closure Date: {TODAY}",
        "",
    ]
    if reason in ("lost", "stolen", "fraud_suspected"):
        lines += [
            "IMPORTANT: This card has been immediately deactivated for security.",
            "Any pending transactions may still be processed.",
        ]
        if reason == "fraud_suspected":
            lines += [
                "Please advise the customer to review recent transactions and file disputes for any unauthorized "
                "charges.",
                "Also recommend changing their online banking password.",
            ]
    # For the other reasons the two empty lines stay next to each other, as the spec lists them.
    lines += [
        "",
        "Note: This card cannot be reactivated. If the customer needs a new card, they can order one through "
        "the standard ordering process.",
        "Any recurring payments linked to this card will need to be updated with new payment information.",
    ]
    return "\n".join(lines)


@discoverable_agent_tool
def freeze_debit_card_3892(self: Tau3Context, card_id: str) -> str:
    if not card_id:
        return "Error: Missing required parameter: card_id."
    card = self.store.get("debit_cards", card_id)
    if card is None:
        return f"Error: Debit card '{card_id}' not found."
    status = card.get("status")
    if status == "FROZEN":
        return f"Error: Debit card '{card_id}' is already frozen."
    if status != "ACTIVE":
        return (
            f"Error: Debit card '{card_id}' cannot be frozen. Current status: {status}. "
            "Only ACTIVE cards can be frozen."
        )
    self.store.update("debit_cards", card_id, {"status": "FROZEN", "frozen_date": TODAY})
    return (
        f"Debit Card Frozen Successfully\nCard ID: {card_id}\nStatus: FROZEN\nFrozen Date: {TODAY}\n\n"
        "While frozen:\n"
        "- All new purchase transactions will be declined\n"
        "- Recurring payments and subscriptions will be declined\n"
        "- Pending transactions already authorized may still process\n\n"
        "To unfreeze, the customer can call customer service or use the mobile app.\n"
        "If the card is confirmed lost or stolen, recommend closing the card permanently instead."
    )


@discoverable_agent_tool
def unfreeze_debit_card_3893(self: Tau3Context, card_id: str) -> str:
    if not card_id:
        return "Error: Missing required parameter: card_id."
    card = self.store.get("debit_cards", card_id)
    if card is None:
        return f"Error: Debit card '{card_id}' not found."
    status = card.get("status")
    if status == "ACTIVE":
        return f"Error: Debit card '{card_id}' is already active."
    if status != "FROZEN":
        return (
            f"Error: Debit card '{card_id}' cannot be unfrozen. Current status: {status}. "
            "Only FROZEN cards can be unfrozen."
        )
    account_id = card.get("account_id")
    account = self.store.get("accounts", account_id)
    if account is not None and account.get("status") != "OPEN":
        return f"Error: The linked checking account '{account_id}' is no longer open. Card cannot be unfrozen."
    self.store.update("debit_cards", card_id, {"status": "ACTIVE", "unfrozen_date": TODAY})
    return (
        f"Debit Card Unfrozen Successfully\nCard ID: {card_id}\nStatus: ACTIVE\nUnfrozen Date: {TODAY}\n\n"
        "The card is now active and ready to use immediately.\n"
        "All transactions will process normally."
    )


@discoverable_agent_tool
def clear_debit_card_fraud_alert_4892(self: Tau3Context, card_id: str, reason: str) -> str:
    if not card_id:
        return "Error: Missing required parameter: card_id."
    if not reason:
        return "Error: Missing required parameter: reason."
    if reason not in ("customer_verified", "velocity_clear"):
        return f"Error: Invalid reason '{reason}'. Must be one of: customer_verified, velocity_clear"
    card = self.store.get("debit_cards", card_id)
    if card is None:
        return f"Error: Debit card '{card_id}' not found."
    if reason == "velocity_clear":
        if not card.get("velocity_blocked"):
            return f"Error: Debit card '{card_id}' does not have an active velocity block."
        self.store.update("debit_cards", card_id, {"velocity_blocked": False, "velocity_cleared_date": TODAY})
        return (
            f"Velocity Block Cleared Successfully\nCard ID: {card_id}\nCleared Date: {TODAY}\n\n"
            "The card is now unblocked and ready for normal use.\n"
            "The velocity monitoring will continue - if the same unusual patterns recur,\n"
            "the card may be blocked again automatically."
        )
    if not card.get("fraud_alert_active"):
        return f"Error: Debit card '{card_id}' does not have an active fraud alert."
    if card.get("alert_source") == "bank_initiated":
        return (
            "Error: BANK_INITIATED_ALERT - This fraud alert was initiated by the bank's fraud detection system "
            "and cannot be cleared by customer service agents. Please transfer the customer to the security team "
            "using transfer_to_human_agents."
        )
    self.store.update(
        "debit_cards", card_id, {"fraud_alert_active": False, "alert_source": None, "fraud_alert_cleared_date": TODAY}
    )
    return (
        f"Fraud Alert Cleared Successfully\nCard ID: {card_id}\nCleared Date: {TODAY}\n\n"
        "The fraud alert has been removed and the card is ready for normal use.\n"
        "Advise the customer to monitor their account and report any suspicious activity immediately."
    )


# --- PIN ------------------------------------------------------------------------------------------
@discoverable_agent_tool
def reset_debit_card_pin_6284(self: Tau3Context, card_id: str, last_4_digits: str, new_pin: str) -> str:
    if not all([card_id, last_4_digits, new_pin]):
        return "Error: Missing required parameters. Required: card_id, last_4_digits, new_pin."
    if not last_4_digits.isdigit() or len(last_4_digits) != 4:
        return "Error: Last 4 digits must be exactly 4 digits."
    error = _pin_error(new_pin)
    if error:
        return error
    card = self.store.get("debit_cards", card_id)
    if card is None:
        return f"Error: Debit card '{card_id}' not found."
    if card.get("last_4_digits") != last_4_digits:
        return "Error: Card verification failed. The last 4 digits do not match our records."
    if card.get("status") != "ACTIVE":
        return (
            f"Error: Cannot reset PIN. Card status is {card.get('status')}. Only ACTIVE cards can have their PIN reset."
        )
    self.store.update(
        "debit_cards", card_id, {"pin_last_changed": TODAY, "pin_locked": False, "pin_attempts_remaining": 3}
    )
    return (
        f"Debit Card PIN Reset Successfully\nCard ID: {card_id}\nPIN Changed: {TODAY}\n\n"
        "The new PIN is effective immediately.\n"
        "Your card has been unlocked and is ready to use.\n"
        "Customer can use the new PIN for ATM withdrawals and point-of-sale transactions.\n\n"
        "Security reminder: Never share your PIN with anyone."
    )


@discoverable_agent_tool
def change_debit_card_pin_6285(self: Tau3Context, card_id: str, current_pin: str, new_pin: str) -> str:
    if missing(card_id, current_pin, new_pin):
        return "Error: Missing required parameters. Required: card_id, current_pin, new_pin."
    if not current_pin.isdigit() or len(current_pin) != 4:
        return "Error: Current PIN must be exactly 4 digits."
    error = _pin_error(new_pin)
    if error:
        return error
    if new_pin == current_pin:
        return "Error: New PIN must be different from current PIN."
    card = self.store.get("debit_cards", card_id)
    if card is None:
        return f"Error: Debit card '{card_id}' not found."
    if card.get("status") != "ACTIVE":
        return (
            f"Error: Cannot change PIN. Card status is {card.get('status')}. "
            "Only ACTIVE cards can have their PIN changed."
        )
    # The current PIN is not verified against anything, as in the benchmark.
    self.store.update("debit_cards", card_id, {"pin_last_changed": TODAY})
    return (
        f"Debit Card PIN Changed Successfully\nCard ID: {card_id}\nPIN Changed: {TODAY}\n\n"
        "The new PIN is effective immediately.\n"
        "Customer can use the new PIN for ATM withdrawals and point-of-sale transactions.\n\n"
        "Security reminder: Never share your PIN with anyone."
    )


# --- reads ----------------------------------------------------------------------------------------
@discoverable_agent_tool
def get_debit_cards_by_account_id_7823(self: Tau3Context, account_id: str) -> str:
    if not account_id:
        return "Error: Missing required parameter 'account_id'."
    account = self.store.get("accounts", account_id)
    if account is None:
        return f"Error: Account '{account_id}' not found."
    if account.get("class", "").lower() not in ("checking", "business_checking"):  # a non-string class raises
        return (
            f"Error: Account '{account_id}' is not a checking account. "
            "Debit cards are only available for checking accounts."
        )
    cards = _cards_of(self, account_id)
    if not cards:
        return f"No debit cards found for account '{account_id}'."
    shown = []
    for rid, card in cards:
        entry = {"card_id": rid, **card}
        # the benchmark's renames: each only when the old name is there and the new one is not
        if "last_4_digits" in entry and "card_number_last_4" not in entry:
            entry["card_number_last_4"] = entry.pop("last_4_digits")
        if "date_issued" not in entry:
            for old in ("issue_date", "created_date"):
                if old in entry:
                    entry["date_issued"] = entry.pop(old)
                    break
        shown.append(entry)
    shown.sort(key=lambda c: c.get("date_issued") or "", reverse=True)  # stable: equal dates keep table order
    return json.dumps(shown, indent=2)


@discoverable_agent_tool
def get_debit_dispute_status_7483(self: Tau3Context, user_id: str) -> str:
    if not user_id:
        return "Error: Missing required parameter: user_id"
    head = (
        "Debit card dispute history retrieved successfully.\n\nExecuted: get_debit_dispute_status_7483\n"
        f"Debit card dispute history for user {user_id}:"
    )
    found = query_listing(self, "debit_card_disputes", "user_id", user_id)  # the pasted filter, as the benchmark
    if not has_rows(found):
        return head + "\n\nNo debit card disputes found for this user."
    return head + "\n" + found


def _cash_and_check_scan(envelope: str, time: str, location: str, check: str, bank: str, payee: str, date: str) -> str:
    """The envelope scan of the two deposits of an $875.00 check and $260.00 cash the ATM recorded as $385.00."""
    return f"""
=== ATM DEPOSIT ENVELOPE SCAN ===
Envelope ID: {envelope}
Deposit Time: {time}
ATM Location: {location}

--- ENVELOPE CONTENTS ---
Item 1: Personal Check
  - Check Number: {check}
  - Drawn On: {bank}
  - Payee: {payee}
  - Amount: $875.00
  - Memo: "October rent refund"
  - Signature: Present and legible
  - Date on Check: {date}

Item 2: Cash
  - Denomination breakdown:
    * 2 x $100 bills = $200.00
    * 3 x $20 bills = $60.00
  - Total Cash: $260.00

--- DEPOSIT SUMMARY ---
Check Total: $875.00
Cash Total: $260.00
GRAND TOTAL: $1,135.00

--- MACHINE RECORD ---
Amount Recorded by ATM: $385.00
DISCREPANCY DETECTED: $750.00 difference

--- IMAGE QUALITY ---
Envelope scan: CLEAR
Check front: CLEAR
Check back (endorsement): CLEAR - endorsed "For Deposit Only - {payee}"
Cash image: CLEAR - bills visible and countable
"""


_DISCREPANCY_NOTES = (
    "Images clearly show deposit contents totaling $1,135.00. ATM machine recorded only $385.00. "
    "Discrepancy of $750.00 confirmed via image review."
)

#: The benchmark's images for three deposits: (ATM, envelope scan, verification notes) by transaction id.
DEPOSIT_SCANS = {
    "btxn_834027370c20": (
        "ATM #3921",
        _cash_and_check_scan(
            "ENV-2025-3921-00923",
            "3:47 PM CST",
            "Rho-Bank ATM #3921, Cedar Lane Branch, Austin, TX",
            "7284",
            "First Texas Bank",
            "Derek Yamamoto",
            "11/03/2025",
        ),
        _DISCREPANCY_NOTES,
    ),
    "btxn_test_deposit_001": (
        "ATM #3921",
        _cash_and_check_scan(
            "ENV-2025-3921-00847",
            "2:34 PM EST",
            "Rho-Bank ATM #3921, 742 Oak Avenue, Portland, OR",
            "4821",
            "First National Bank",
            "Linda Patterson",
            "11/05/2025",
        ),
        _DISCREPANCY_NOTES,
    ),
    "btxn_test_atm_dep_partial": (
        "ATM #5847",
        "\n=== ATM DEPOSIT ENVELOPE SCAN ===\nEnvelope ID: ENV-2025-5847-00293\nDeposit Time: 10:15 AM EST\n\n"
        "--- ENVELOPE CONTENTS ---\nItem 1: Personal Check\n  - Check Number: 7392\n  - Amount: $500.00\n\n"
        "--- DEPOSIT SUMMARY ---\nCheck Total: $500.00\nCash Total: $0.00\nGRAND TOTAL: $500.00\n\n"
        "--- MACHINE RECORD ---\nAmount Recorded by ATM: $500.00\nNo discrepancy detected.\n",
        "Images confirm deposit matches recorded amount. No discrepancy found.",
    ),
}


@discoverable_agent_tool
def get_atm_deposit_images_8473(self: Tau3Context, transaction_id: str) -> str:
    if not transaction_id:
        return "Error: Missing required parameter: transaction_id"
    txn = self.store.get("bank_account_transaction_history", transaction_id)
    if txn is None:
        return f"Error: Transaction '{transaction_id}' not found."
    if txn.get("type") != "atm_deposit":
        return (
            f"Error: Transaction '{transaction_id}' is not an ATM deposit. "
            "This tool only works for ATM deposit transactions."
        )
    description = txn.get("description", "")  # a non-string raises, as in the benchmark
    if "RHO-BANK" not in description.upper() and "RHOBANK" not in description.upper():
        return (
            f"Error: Transaction '{transaction_id}' is from a third-party ATM. Deposit images are only available "
            "for Rho-Bank ATM deposits. For third-party ATM disputes, a chargeback request must be submitted to "
            "the ATM network."
        )
    head = "ATM Deposit Image Retrieval Results\n=====================================\n"
    date = txn.get("date", "Unknown")
    if transaction_id in DEPOSIT_SCANS:
        atm, scan, notes = DEPOSIT_SCANS[transaction_id]
        return (
            f"{head}Transaction ID: {transaction_id}\nATM: {atm}\nDeposit Date: {date}\n\n{scan}\n\n"
            f"--- VERIFICATION NOTES ---\n{notes}\n"
        )
    return (
        f"{head}Transaction ID: {transaction_id}\nATM: {description}\nDeposit Date: {date}\n"
        f"Amount Recorded: ${abs(txn.get('amount', 0)):.2f}\n\n"
        "--- IMAGE STATUS ---\nStatus: IMAGES NOT AVAILABLE\n"
        "Reason: Deposit images for this transaction have either expired (older than 90 days) or were not "
        "captured by the ATM system.\n\n"
        "For deposits without available images, the dispute will proceed based on customer statement and ATM "
        "journal records only. Investigation timeline may be extended.\n"
    )


# --- limits, recurring block, disputes ----------------------------------------------------------------
@discoverable_agent_tool
def request_temporary_debit_card_limit_increase_8374(
    self: Tau3Context, card_id: str, limit_type: str, new_limit: int
) -> str:
    if not card_id:
        return "Error: Missing required parameter: card_id."
    if not limit_type:
        return "Error: Missing required parameter: limit_type."
    if limit_type not in ("atm", "purchase"):
        return f"Error: Invalid limit_type '{limit_type}'. Must be 'atm' or 'purchase'."
    if new_limit is None:  # 0 and False go on, to the positive-amount check
        return "Error: Missing required parameter: new_limit."
    try:
        as_float = float(new_limit)
    except (TypeError, ValueError):
        return f"Error: new_limit must be an integer, got '{new_limit}'."
    if not as_float.is_integer():  # the text shows the float (inf and nan fail here too)
        return f"Error: new_limit must be an integer, got '{as_float}'."
    requested = int(as_float)
    if requested <= 0:
        return "Error: new_limit must be a positive amount."
    card = self.store.get("debit_cards", card_id)
    if card is None:
        return f"Error: Debit card '{card_id}' not found."
    if card.get("status") != "ACTIVE":
        return (
            f"Error: Debit card '{card_id}' is not active. Current status: {card.get('status')}. "
            "Only ACTIVE cards can have limit increases."
        )
    account_id = card.get("account_id")
    account = self.store.get("accounts", account_id) if account_id else None
    if account is None:
        return f"Error: Could not find linked account for debit card '{card_id}'."
    if account.get("status") != "OPEN":
        return (
            f"Error: The linked account '{account_id}' is not in good standing. "
            f"Account status: {account.get('status')}."
        )
    # Age against today at midnight; an empty or unparseable date_opened skips the check (a
    # non-string one raises, as in the benchmark).
    opened = account.get("date_opened")
    if opened:
        try:
            age = (datetime.strptime(TODAY, "%m/%d/%Y") - datetime.strptime(opened, "%m/%d/%Y")).days
        except ValueError:
            age = None
        if age is not None and age < 60:
            return (
                f"Error: Account must be at least 60 days old for a temporary limit increase. Account age: {age} days."
            )
    if limit_type == "atm":
        current = card.get("daily_atm_limit")
        label = "Daily ATM Withdrawal Limit"
        if current is None:
            level = account.get("level", "").lower()  # a non-string level raises, as in the benchmark
            if "light green" in level:
                return (
                    "Error: Light Green Account (teen checking) cards have policy-based limits that cannot be "
                    "modified. The daily ATM withdrawal limit of $150 is fixed by account policy for safety reasons. "
                    "The customer may request the parent/guardian to withdraw cash from their own account if needed."
                )
            current = DEFAULT_ATM_LIMITS.get(level.removesuffix(" account")) if level.endswith(" account") else None
            if current is None:
                return (
                    f"Error: Could not determine the default ATM limit for account type '{account.get('level')}'. "
                    "Please verify the account type."
                )
    else:
        current = card.get("daily_purchase_limit")
        label = "Daily Purchase Limit"
    if current is None:
        return (
            f"Error: The card does not have a {label.lower()} configured. This may be a restricted account type "
            "where limits are set by account policy and cannot be modified."
        )
    maximum = int(current * 1.5)
    if requested > maximum:
        return (
            f"Error: Requested limit ${requested} exceeds the maximum allowed temporary increase. "
            f"Maximum temporary limit is ${maximum} (150% of current ${current} limit)."
        )
    if requested <= current:
        return f"Error: Requested limit ${requested} is not higher than the current limit of ${current}."
    self.store.update(
        "debit_cards",
        card_id,
        {
            f"daily_{limit_type}_limit": requested,
            f"temporary_{limit_type}_limit_increase": True,
            f"original_{limit_type}_limit": current,
            f"temporary_{limit_type}_limit_expires": TODAY,
        },
    )
    lines = [
        f"Temporary {label} Increase Granted Successfully",
        f"Card ID: {card_id}",
        f"Previous Limit: ${current}",
        f"New Temporary Limit: ${requested}",
        f"Increase Amount: ${requested - current}",
        "",
        "Important Information:",
        "- This temporary increase expires in 24 hours",
        f"- After expiration, the limit will revert to ${current}",
        "- Only one temporary increase is allowed per 24-hour period",
        "",  # the benchmark adds the ATM note for purchase limits too
        "Note: If the customer is at a third-party (non-Rho-Bank) ATM, that ATM may have its own",
        "per-transaction or daily limits that Rho-Bank cannot override. The customer may need to",
        "use a Rho-Bank ATM or make multiple smaller withdrawals at third-party ATMs.",
    ]
    return "\n".join(lines)


@discoverable_agent_tool
def set_debit_card_recurring_block_7382(self: Tau3Context, card_id: str, block_recurring: bool) -> str:
    if not card_id:
        return "Error: Missing required parameter: card_id"
    card = self.store.get("debit_cards", card_id)
    if not card:  # an empty row counts as absent, as the benchmark's truthiness test
        return f"Error: Debit card '{card_id}' not found."
    status = card.get("status", "").upper()  # a non-string status raises, as in the benchmark
    if status != "ACTIVE":
        return f"Error: Cannot update recurring block settings for a card with status '{status}'. Card must be ACTIVE."
    self.store.update("debit_cards", card_id, {"recurring_blocked": block_recurring})
    if block_recurring:
        return (
            f"Recurring payments BLOCKED for debit card {card_id}.\n"
            "All recurring/subscription charges will be declined.\n"
            "One-time purchases are not affected.\n"
            "This change takes effect within 24 hours."
        )
    return (
        f"Recurring payments UNBLOCKED for debit card {card_id}.\n"
        "Recurring/subscription charges will now be allowed.\n"
        "This change takes effect within 24 hours."
    )


@discoverable_agent_tool
def file_debit_card_transaction_dispute_6281(
    self: Tau3Context,
    transaction_id: str,
    account_id: str,
    card_id: str,
    user_id: str,
    dispute_category: str,
    transaction_date: str,
    discovery_date: str,
    disputed_amount: float,
    transaction_type: str,
    card_in_possession: bool,
    pin_compromised: str,
    contacted_merchant: bool,
    police_report_filed: bool,
    written_statement_provided: bool,
    provisional_credit_eligible: bool,
    customer_max_liability_amount: float,
    card_action: str,
) -> str:
    required = [
        transaction_id, account_id, card_id, user_id, dispute_category, transaction_date, discovery_date,
        disputed_amount, transaction_type, pin_compromised, card_action,
    ]  # fmt: skip
    if not all(required):
        return "Error: Missing required parameters."
    if customer_max_liability_amount is None:
        return "Error: customer_max_liability_amount is required."
    if None in (card_in_possession, contacted_merchant, police_report_filed, written_statement_provided):
        return (
            "Error: card_in_possession, contacted_merchant, police_report_filed, and written_statement_provided "
            "are required boolean fields."
        )
    # each list shown as a Python list; an unhashable value is compared, never hashed
    if dispute_category not in DISPUTE_CATEGORIES:
        return f"Error: Invalid dispute_category. Must be one of: {list(DISPUTE_CATEGORIES)}"
    if transaction_type not in TRANSACTION_TYPES:
        return f"Error: Invalid transaction_type. Must be one of: {list(TRANSACTION_TYPES)}"
    if pin_compromised not in PIN_COMPROMISED:
        return f"Error: Invalid pin_compromised. Must be one of: {list(PIN_COMPROMISED)}"
    if card_action not in CARD_ACTIONS:
        return f"Error: Invalid card_action. Must be one of: {list(CARD_ACTIONS)}"
    if disputed_amount <= 0:  # a string amount raises TypeError, as in the benchmark
        return "Error: disputed_amount must be a positive number."

    dispute_id = "dsp_" + H(f"dispute:{user_id}:{transaction_id}", 12)
    is_fraud = dispute_category in FRAUD_CATEGORIES
    row = {
        "dispute_id": dispute_id,
        "transaction_id": transaction_id,
        "account_id": account_id,
        "card_id": card_id,
        "user_id": user_id,
        "dispute_category": dispute_category,
        "transaction_date": transaction_date,
        "discovery_date": discovery_date,
        "disputed_amount": disputed_amount,
        "transaction_type": transaction_type,
        "card_in_possession": card_in_possession,
        "pin_compromised": pin_compromised,
        "contacted_merchant": contacted_merchant,
        "police_report_filed": police_report_filed,
        "written_statement_provided": written_statement_provided,
        "provisional_credit_eligible": provisional_credit_eligible,
        "provisional_credit_issued": provisional_credit_eligible,
        "provisional_credit_amount": disputed_amount if provisional_credit_eligible else None,
        "customer_max_liability_amount": customer_max_liability_amount,
        "card_action": card_action,
        "is_fraud_category": is_fraud,
        "pin_shared_voluntarily": pin_compromised == "yes_shared",
        "submitted_at": TODAY,
        "status": "OPEN",
    }
    if not self.store.insert("debit_card_disputes", dispute_id, row):
        return "Error: Dispute may have already been filed for this transaction."
    lines = [
        f"Dispute ID: {dispute_id}",
        f"Transaction: {transaction_id}",
        f"Account: {account_id}",
        f"Category: {title_case(dispute_category)}",
        f"Disputed Amount: ${disputed_amount:.2f}",
        f"Card Action: {title_case(card_action)}",
    ]
    if provisional_credit_eligible:
        lines.append(
            f"Provisional Credit: ISSUED - ${disputed_amount:.2f} credited within 10 business days per Regulation E."
        )
    else:
        lines.append("Provisional Credit: Not eligible - see Debit Card Provisional Credit Guidelines for details.")
    if pin_compromised == "yes_shared":
        lines.append("WARNING: Customer indicated PIN was shared voluntarily. This may affect liability determination.")
    if is_fraud and not police_report_filed and disputed_amount > 500:
        lines.append("RECOMMENDATION: For fraud disputes over $500, filing a police report is recommended.")
    return "\n".join(lines)
