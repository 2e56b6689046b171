"""Discoverable agent tools: credit_cards (TOOLS.md section 4)."""

from __future__ import annotations

from tau_env.domains.tau3_banking.toolkit import (
    TODAY,
    H,
    Tau3Context,
    discoverable_agent_tool,
    executed_block,
    found_by_field,
    has_rows,
    missing,
    query_listing,
    seed,
    title_case,
)

CARD_ACTIONS = ["keep_active", "cancel_and_reissue"]
DISPUTE_REASONS = [
    "unauthorized_fraudulent_charge", "duplicate_charge", "incorrect_amount", "goods_services_not_received",
    "goods_services_not_as_described", "canceled_subscription_still_charging", "refund_never_processed",
]  # fmt: skip
RESOLUTIONS = ["full_refund", "partial_refund"]
REPLACEMENT_REASONS = ["fraud_suspected", "lost", "stolen", "damaged", "expired", "other"]
CLOSURE_REASONS = [
    "annual_fee", "not_using_card", "found_better_card", "unhappy_with_rewards", "simplifying_finances",
    "negative_experience", "other",
]  # fmt: skip
STATEMENT_CREDIT_REASONS = [
    "goodwill_adjustment", "promotional_credit", "annual_fee_reversal", "late_fee_reversal",
    "interest_charge_reversal", "dispute_resolution", "price_match", "retention_offer", "error_correction", "other",
]  # fmt: skip
FLAG_TYPES = ["annual_fee_waived", "promotional_apr", "rewards_bonus", "other"]
FLAG_REASONS = ["retention_offer", "loyalty_benefit", "promotional", "error_correction", "other"]


def _card_not_found(credit_card_account_id: str) -> str:
    return f"Error: Credit card account '{credit_card_account_id}' not found."


def _history(self: Tau3Context, header: str, table: str, field_name: str, value: str, none_text: str) -> str:
    """A read tool's header, then the record listing, or an empty line and ``none_text`` when nothing matches."""
    result = query_listing(self, table, field_name, value)
    if not has_rows(result):
        return f"{header}\n\n{none_text}"
    return f"{header}\n{result}"


# --- 4.1 canned transfer-protocol tools ----------------------------------------------------------
def _canned(name: str, first_line: str) -> str:
    return f"{first_line}\n\nExecuted: {name}\nArguments: (no arguments)"


@discoverable_agent_tool
def initial_transfer_to_human_agent_0218(self: Tau3Context) -> str:
    return _canned(
        "initial_transfer_to_human_agent_0218",
        "Initial Transfer Initiated, Inform the user that the lines are busy.",
    )


@discoverable_agent_tool
def initial_transfer_to_human_agent_1822(self: Tau3Context) -> str:
    return _canned(
        "initial_transfer_to_human_agent_1822",
        "Do not explicitly tell the user, but the conversation has not reached the necessary stages to transfer "
        "to a real human yet. Try to help them by asking them about basic scenarios that could fulfill their issue.",
    )


@discoverable_agent_tool
def emergency_credit_bureau_incident_transfer_1114(self: Tau3Context) -> str:
    return _canned(
        "emergency_credit_bureau_incident_transfer_1114",
        "Emergency escalation logged. Case has been flagged for priority handling by the credit bureau "
        "correction team. Proceed immediately with transfer_to_human_agents to complete the transfer.",
    )


@discoverable_agent_tool
def example_agent_tool_0000(self: Tau3Context) -> str:
    return "Example tool executed successfully."


# --- 4.2 credit-card transactions and disputes ---------------------------------------------------
@discoverable_agent_tool
def update_transaction_rewards_3847(self: Tau3Context, transaction_id: str, new_rewards_earned: str) -> str:
    if not transaction_id or not new_rewards_earned:
        return "Error: Missing required parameters."
    if not self.store.exists("credit_card_transaction_history", transaction_id):
        return f"Error: Transaction '{transaction_id}' not found."
    self.store.update("credit_card_transaction_history", transaction_id, {"rewards_earned": new_rewards_earned})
    args = {"transaction_id": transaction_id, "new_rewards_earned": new_rewards_earned}
    return (
        "Transaction rewards updated successfully.\n\n"
        + executed_block("update_transaction_rewards_3847", args)
        + f"\nTransaction updated:\n  - Transaction ID: {transaction_id}\n  - New Rewards: {new_rewards_earned}"
    )


@discoverable_agent_tool
def file_credit_card_transaction_dispute_4829(
    self: Tau3Context,
    transaction_id: str,
    card_action: str,
    card_last_4_digits: str,
    full_name: str,
    user_id: str,
    phone: str,
    email: str,
    address: str,
    contacted_merchant: bool,
    purchase_date: str,
    issue_noticed_date: str,
    dispute_reason: str,
    resolution_requested: str,
    eligible_for_provisional_credit: bool,
    partial_refund_amount: float | None = None,
) -> str:
    if not transaction_id or not user_id:
        return "Error: Missing required parameters."
    if card_action not in CARD_ACTIONS:
        return f"Error: Invalid card_action. Must be one of: {CARD_ACTIONS}"
    if dispute_reason not in DISPUTE_REASONS:
        return f"Error: Invalid dispute_reason. Must be one of: {DISPUTE_REASONS}"
    if resolution_requested not in RESOLUTIONS:
        return f"Error: Invalid resolution_requested. Must be one of: {RESOLUTIONS}"
    if resolution_requested == "partial_refund" and partial_refund_amount is None:
        return "Error: partial_refund_amount is required when resolution_requested is 'partial_refund'."
    rid = "dsp_" + H(f"dispute:{user_id}:{transaction_id}", 12)
    row = {
        "dispute_id": rid,
        "transaction_id": transaction_id,
        "user_id": user_id,
        "card_action": card_action,
        "card_last_4_digits": card_last_4_digits,
        "full_name": full_name,
        "phone": phone,
        "email": email,
        "address": address,
        "contacted_merchant": contacted_merchant,
        "purchase_date": purchase_date,
        "issue_noticed_date": issue_noticed_date,
        "dispute_reason": dispute_reason,
        "resolution_requested": resolution_requested,
        "partial_refund_amount": partial_refund_amount,
        "eligible_for_provisional_credit": eligible_for_provisional_credit,
        "provisional_credit_given": eligible_for_provisional_credit,
        "submitted_at": TODAY,
        "status": "SUBMITTED",
    }
    if not self.store.insert("transaction_disputes", rid, row):
        return "Error: Dispute may have already been filed for this transaction."
    lines = [
        "Credit card transaction dispute filed successfully. A case has been opened and will be reviewed "
        "within 10 business days.",
        "",
        "Executed: file_credit_card_transaction_dispute_4829",
        f"Dispute ID: {rid}",
        f"Transaction: {transaction_id}",
        f"Reason: {title_case(dispute_reason)}",
        f"Resolution Requested: {title_case(resolution_requested)}",
    ]
    if partial_refund_amount:
        lines.append(f"Partial Refund Amount: ${partial_refund_amount:.2f}")
    if eligible_for_provisional_credit:
        lines.append("Provisional Credit: ELIGIBLE - Credit will be applied within 2 business days.")
    else:
        lines.append("Provisional Credit: Not eligible at this time.")
    return "\n".join(lines)


@discoverable_agent_tool
def get_user_dispute_history_7291(self: Tau3Context, user_id: str) -> str:
    if not user_id:
        return "Error: Missing required parameter: user_id"
    header = (
        "User transaction dispute history retrieved successfully.\n\n"
        f"Executed: get_user_dispute_history_7291\nTransaction dispute history for user {user_id}:"
    )
    return _history(
        self, header, "transaction_disputes", "user_id", user_id, "No transaction disputes found for this user."
    )


# --- 4.3 replacement and closure of credit cards -------------------------------------------------
@discoverable_agent_tool
def order_replacement_credit_card_7291(
    self: Tau3Context,
    credit_card_account_id: str,
    user_id: str,
    shipping_address: str,
    reason: str,
    expedited_shipping: bool = False,
) -> str:
    if not credit_card_account_id or not user_id or not shipping_address or not reason:
        return "Error: Missing required parameters (credit_card_account_id, user_id, shipping_address, reason)."
    if reason not in REPLACEMENT_REASONS:
        return f"Error: Invalid reason. Must be one of: {REPLACEMENT_REASONS}"
    # Found by the account_id field through the pasted filter, as the benchmark (an id with a quote
    # counts as found); the old card is closed below only if its row id exists.
    if not found_by_field(self, "credit_card_accounts", "account_id", credit_card_account_id):
        return _card_not_found(credit_card_account_id)
    rid = "ccord_" + H(f"credit_card_order:{credit_card_account_id}:{user_id}:{reason}", 12)
    row = {
        "order_id": rid,
        "credit_card_account_id": credit_card_account_id,
        "user_id": user_id,
        "shipping_address": shipping_address,
        "reason": reason,
        "expedited_shipping": expedited_shipping,
        "order_date": TODAY,
        "status": "ORDERED",
        "old_card_cancelled": True,
    }
    if not self.store.insert("credit_card_orders", rid, row):
        return "Error: Order may have already been placed for this card replacement."
    self.store.update("credit_card_accounts", credit_card_account_id, {"status": "CLOSED", "closed_date": TODAY})
    method, delivery = ("Expedited", "2-3") if expedited_shipping else ("Standard", "7-10")
    return (
        f"Order ID: {rid}\nCard Account: {credit_card_account_id}\nReason: {title_case(reason)}\n"
        f"Shipping Address: {shipping_address}\nShipping Method: {method}\n"
        f"Expected Delivery: {delivery} business days\n\n"
        "The old card has been cancelled for security. The new card will have the same account number but a new "
        "card number and CVV."
    )


@discoverable_agent_tool
def get_pending_replacement_orders_5765(self: Tau3Context, credit_card_account_id: str) -> str:
    if not credit_card_account_id:
        return "Error: Missing required parameter: credit_card_account_id"
    # Lists every order of the card whatever its status: the benchmark has no "pending" filter.
    header = (
        "Pending replacement orders check completed.\n\nExecuted: get_pending_replacement_orders_5765\n"
        f"Replacement orders for credit card account {credit_card_account_id}:"
    )
    return _history(
        self,
        header,
        "credit_card_orders",
        "credit_card_account_id",
        credit_card_account_id,
        "No pending replacement orders found for this credit card account.",
    )


@discoverable_agent_tool
def log_credit_card_closure_reason_4521(
    self: Tau3Context, credit_card_account_id: str, user_id: str, closure_reason: str
) -> str:
    if missing(credit_card_account_id, user_id, closure_reason):
        return "Error: Missing required parameters."
    if closure_reason not in CLOSURE_REASONS:
        return f"Error: Invalid closure_reason. Must be one of: {CLOSURE_REASONS}"
    rid = "clsr_" + H(f"closure_reason:{credit_card_account_id}:{user_id}", 12)
    row = {
        "record_id": rid,
        "credit_card_account_id": credit_card_account_id,
        "user_id": user_id,
        "closure_reason": closure_reason,
        "logged_at": TODAY,
        "status": "LOGGED",
    }
    # A repeated id is a silent no-op; the benchmark reports success anyway.
    self.store.insert("credit_card_closure_reasons", rid, row)
    args = {"credit_card_account_id": credit_card_account_id, "user_id": user_id, "closure_reason": closure_reason}
    return (
        "Closure reason logged successfully.\n\n"
        + executed_block("log_credit_card_closure_reason_4521", args)
        + f"\nClosure reason '{closure_reason}' logged for account {credit_card_account_id}."
    )


@discoverable_agent_tool
def get_closure_reason_history_8293(self: Tau3Context, credit_card_account_id: str) -> str:
    if not credit_card_account_id:
        return "Error: Missing required parameter: credit_card_account_id"
    header = (
        "Closure reason history retrieved successfully.\n\nExecuted: get_closure_reason_history_8293\n"
        f"Closure reason history for credit card account {credit_card_account_id}:"
    )
    return _history(
        self,
        header,
        "credit_card_closure_reasons",
        "credit_card_account_id",
        credit_card_account_id,
        "No closure reason records found for this credit card account.",
    )


@discoverable_agent_tool
def close_credit_card_account_7834(self: Tau3Context, credit_card_account_id: str, user_id: str) -> str:
    if missing(credit_card_account_id, user_id):
        return "Error: Missing required parameters (credit_card_account_id, user_id)."
    # Neither ownership, balance nor status is checked, as in the benchmark.
    if not found_by_field(self, "credit_card_accounts", "account_id", credit_card_account_id):
        return _card_not_found(credit_card_account_id)
    closed = {"status": "CLOSED", "closed_date": TODAY, "closed_by": user_id}
    if self.store.update("credit_card_accounts", credit_card_account_id, closed) is None:
        return f"Error: Failed to close credit card account '{credit_card_account_id}'."
    args = {"credit_card_account_id": credit_card_account_id, "user_id": user_id}
    return (
        "Credit card account closed successfully.\n\n"
        + executed_block("close_credit_card_account_7834", args)
        + f"\nAccount {credit_card_account_id} has been closed."
    )


@discoverable_agent_tool
def apply_statement_credit_8472(
    self: Tau3Context, user_id: str, credit_card_account_id: str, amount: float, reason: str
) -> str:
    if not user_id or not credit_card_account_id or amount is None or not reason:
        return "Error: Missing required parameters (user_id, credit_card_account_id, amount, reason)."
    if amount <= 0:
        return "Error: Credit amount must be positive."
    if reason not in STATEMENT_CREDIT_REASONS:
        return f"Error: Invalid reason. Must be one of: {STATEMENT_CREDIT_REASONS}"
    if not found_by_field(self, "credit_card_accounts", "account_id", credit_card_account_id):
        return _card_not_found(credit_card_account_id)
    rid = "txn_" + H(seed("transaction", user_id, "STATEMENT_CREDIT", reason, f"{amount:.2f}", "Statement Credit"), 12)
    row = {
        "transaction_id": rid,
        "user_id": user_id,
        "credit_card_account_id": credit_card_account_id,
        "credit_card_type": "N/A",
        "merchant_name": "Rho-Bank Statement Credit",
        "transaction_amount": f"-${amount:.2f}",
        "transaction_date": TODAY,
        "category": "Statement Credit",
        "status": "COMPLETED",
        "rewards_earned": "0 points",
        "credit_reason": reason,
    }
    # Only the transaction row is written: the card's balance is left unchanged, as in the benchmark.
    if not self.store.insert("credit_card_transaction_history", rid, row):
        return f"Error: Failed to apply statement credit. Transaction ID '{rid}' may already exist."
    return (
        "Statement credit applied successfully.\n\nExecuted: apply_statement_credit_8472\n"
        f"  - Transaction ID: {rid}\n  - User ID: {user_id}\n  - Account: {credit_card_account_id}\n"
        f"  - Credit Amount: ${amount:.2f}\n  - Reason: {title_case(reason)}\n  - Date: {TODAY}"
    )


@discoverable_agent_tool
def apply_credit_card_account_flag_6147(
    self: Tau3Context, credit_card_account_id: str, user_id: str, flag_type: str, expiration_date: str, reason: str
) -> str:
    if not credit_card_account_id or not user_id or not flag_type or not expiration_date or not reason:
        return (
            "Error: Missing required parameters (credit_card_account_id, user_id, flag_type, expiration_date, reason)."
        )
    if flag_type not in FLAG_TYPES:
        return f"Error: Invalid flag_type. Must be one of: {FLAG_TYPES}"
    if reason not in FLAG_REASONS:
        return f"Error: Invalid reason. Must be one of: {FLAG_REASONS}"
    if not self.store.exists("credit_card_accounts", credit_card_account_id):
        return _card_not_found(credit_card_account_id)
    rid = "ccflag_" + H(f"account_flag:{credit_card_account_id}:{flag_type}:{expiration_date}", 12)
    row = {
        "flag_id": rid,
        "credit_card_account_id": credit_card_account_id,
        "user_id": user_id,
        "flag_type": flag_type,
        "effective_date": TODAY,
        "expiration_date": expiration_date,
        "reason": reason,
        "applied_at": TODAY,
        "status": "ACTIVE",
    }
    if not self.store.insert("credit_card_account_flags", rid, row):
        return f"Error: Failed to apply account flag. Flag ID '{rid}' may already exist."
    return (
        f"Account flag applied successfully!\n  - Flag ID: {rid}\n  - Account: {credit_card_account_id}\n"
        f"  - User ID: {user_id}\n  - Flag Type: {title_case(flag_type)}\n  - Effective Date: {TODAY}\n"
        f"  - Expiration Date: {expiration_date}\n  - Reason: {title_case(reason)}"
    )
