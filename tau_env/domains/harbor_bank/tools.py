"""Harbor Bank's tools: the worked example of writing domain tools.

Conventions (see docs/writing_a_domain.md):
- Read tools return JSON text of rows; write tools return a short confirmation.
- Business errors raise ``ToolError``: the call rolls back and the model sees the message.
- Hard limits (funds, statuses, verification) are enforced here; policy decisions (eligibility,
  fee amounts, tier limits) live in the documents, and the agent must apply them.
- Ids are derived from the call's content with ``ctx.make_id``, never from a counter or a clock,
  so an agent that does the right thing in another order still reaches the target state.
"""

from __future__ import annotations

import ast
import json
import operator
import sqlite3
from datetime import date
from typing import Any, Literal

from tau_env.error import ToolError
from tau_env.tools import ToolContext, tool

PRODUCTS = (
    "everyday_checking",
    "premier_checking",
    "student_checking",
    "basic_savings",
    "high_yield_savings",
    "cd_12_month",
)
CHECKING = ("everyday_checking", "premier_checking", "student_checking")
#: The absolute ceiling of a card's daily limit; the documents set lower limits per tier.
MAX_DAILY_LIMIT_CENTS = 1_000_000
TRANSFER_REASONS = (
    "fraud_or_security",
    "account_closure_dispute",
    "complaint",
    "legal_or_estate",
    "customer_requests_human",
    "out_of_policy_request",
    "other",
)


# --- helpers -----------------------------------------------------------------------------------
def _rows(conn: sqlite3.Connection, sql: str, *params: Any) -> list[dict[str, Any]]:
    cur = conn.execute(sql, params)
    cols = [c[0] for c in cur.description]
    return [dict(zip(cols, r)) for r in cur.fetchall()]


def _one(conn: sqlite3.Connection, table: str, key: str, value: str, what: str) -> dict[str, Any]:
    rows = _rows(conn, f"SELECT * FROM {table} WHERE {key} = ?", value)
    if not rows:
        raise ToolError(f"{what} '{value}' not found.")
    return rows[0]


def _dollars(cents: int) -> str:
    sign = "-" if cents < 0 else ""
    return f"{sign}${abs(cents) // 100:,}.{abs(cents) % 100:02d}"


def _require_verified(ctx: ToolContext, customer_id: str) -> None:
    if not ctx.conn.execute("SELECT 1 FROM verifications WHERE customer_id = ?", (customer_id,)).fetchone():
        raise ToolError(
            f"Customer '{customer_id}' has not been verified in this conversation; call verify_identity first."
        )


def _open_account(ctx: ToolContext, account_id: str) -> dict[str, Any]:
    acct = _one(ctx.conn, "accounts", "account_id", account_id, "Account")
    if acct["status"] != "open":
        raise ToolError(f"Account '{account_id}' is {acct['status']}; it must be open.")
    return acct


def _unique_id(ctx: ToolContext, table: str, key: str, prefix: str, *parts: Any) -> str:
    """A content-derived id; a repeat of the same content gets a suffix (-2, -3, ...)."""
    base = ctx.make_id(prefix, *parts)
    candidate, n = base, 1
    while ctx.conn.execute(f"SELECT 1 FROM {table} WHERE {key} = ?", (candidate,)).fetchone():
        n += 1
        candidate = f"{base}-{n}"
    return candidate


def _post(
    ctx: ToolContext, account_id: str, description: str, amount_cents: int, category: str, status: str = "posted"
) -> str:
    base = ctx.make_id("TX-", account_id, description, amount_cents, category)
    txn_id, n = base, 1
    while True:  # insert first and probe only on a clash: one statement in the usual case
        try:
            ctx.conn.execute(
                "INSERT INTO transactions VALUES (?, ?, ?, ?, ?, ?, ?)",
                (txn_id, account_id, ctx.today(), description, amount_cents, category, status),
            )
            break
        except sqlite3.IntegrityError as e:
            if "UNIQUE" not in str(e):
                raise
            n += 1
            txn_id = f"{base}-{n}"
    if status == "posted":
        ctx.conn.execute(
            "UPDATE accounts SET balance_cents = balance_cents + ? WHERE account_id = ?", (amount_cents, account_id)
        )
    return txn_id


def _matured(acct: dict[str, Any], ctx: ToolContext) -> bool:
    """A 12-month CD matures on the anniversary of its opening date."""
    opened = date.fromisoformat(acct["opened_on"])
    try:
        maturity = opened.replace(year=opened.year + 1)
    except ValueError:  # opened on 29 February
        maturity = opened.replace(year=opened.year + 1, day=28)
    return ctx.now.date() >= maturity


def _iso(value: str, name: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ToolError(f"{name} must be a date in YYYY-MM-DD form, got '{value[:40]}'.") from None


# --- base agent tools ----------------------------------------------------------------------------
@tool(produces=("start_date",))
def get_current_time(ctx: ToolContext) -> str:
    """Return the current date and time at the bank."""
    return ctx.now.strftime("%Y-%m-%d %H:%M (%A)")


@tool(produces=("customer_id",))
def find_customer(ctx: ToolContext, full_name: str, date_of_birth: str) -> str:
    """Find a customer's id from their full name and date of birth.

    Args:
        full_name: The customer's full name, e.g. "Maria Lopez".
        date_of_birth: Date of birth as YYYY-MM-DD.
    """
    wanted = " ".join(full_name.split()).casefold()  # casefold, not SQL lower(): names are not all ASCII
    candidates = _rows(
        ctx.conn, "SELECT customer_id, full_name FROM customers WHERE date_of_birth = ?", date_of_birth.strip()
    )
    rows = [r for r in candidates if " ".join(r["full_name"].split()).casefold() == wanted]
    if not rows:
        return "No customer matches that name and date of birth."
    return json.dumps(rows)


@tool(kind="write")
def verify_identity(ctx: ToolContext, customer_id: str, date_of_birth: str, phone_last4: str) -> str:
    """Verify the caller's identity; required before discussing or changing any account.

    Args:
        customer_id: The customer's id, e.g. "C-1001".
        date_of_birth: Date of birth the caller gave, YYYY-MM-DD.
        phone_last4: Last four digits of the phone number on file, as the caller gave them.
    """
    cust = _one(ctx.conn, "customers", "customer_id", customer_id, "Customer")
    if (
        cust["date_of_birth"] != date_of_birth.strip()
        or not cust["phone"].endswith(phone_last4.strip())
        or len(phone_last4.strip()) != 4
    ):
        raise ToolError(
            "Verification failed: the details do not match our records. Do not disclose account information."
        )
    ctx.conn.execute(
        "INSERT OR IGNORE INTO verifications VALUES (?, ?, ?)",
        (ctx.make_id("VER-", customer_id), customer_id, ctx.now.isoformat(sep=" ")),
    )
    return f"Identity verified for {cust['full_name']} ({customer_id})."


@tool
def get_customer(ctx: ToolContext, customer_id: str) -> str:
    """Show a customer's profile: contact details, tier and customer-since date.

    Args:
        customer_id: The customer's id.
    """
    return json.dumps(_one(ctx.conn, "customers", "customer_id", customer_id, "Customer"))


@tool(
    produces=(
        "account_id",
        "from_account_id",
        "to_account_id",
        "funding_account_id",
        "checking_account_id",
        "savings_account_id",
    )
)
def list_accounts(ctx: ToolContext, customer_id: str) -> str:
    """List a customer's accounts with product, status, balance (cents) and opening date.

    Args:
        customer_id: The customer's id.
    """
    _one(ctx.conn, "customers", "customer_id", customer_id, "Customer")
    return json.dumps(_rows(ctx.conn, "SELECT * FROM accounts WHERE customer_id = ? ORDER BY account_id", customer_id))


@tool(produces=("txn_id", "fee_txn_id"))
def list_transactions(ctx: ToolContext, account_id: str, limit: int = 20) -> str:
    """List an account's transactions, newest first (amounts in cents; negative is money out).

    Args:
        account_id: The account's id.
        limit: How many transactions to show (1-100).
    """
    if not 1 <= limit <= 100:
        raise ToolError(f"limit must be between 1 and 100, got {limit}.")
    _one(ctx.conn, "accounts", "account_id", account_id, "Account")
    return json.dumps(
        _rows(
            ctx.conn,
            "SELECT * FROM transactions WHERE account_id = ? ORDER BY posted_on DESC, txn_id DESC LIMIT ?",
            account_id,
            limit,
        )
    )


@tool(produces=("card_id",))
def list_cards(ctx: ToolContext, customer_id: str) -> str:
    """List a customer's debit cards with status and daily limit (cents).

    Args:
        customer_id: The customer's id.
    """
    _one(ctx.conn, "customers", "customer_id", customer_id, "Customer")
    return json.dumps(_rows(ctx.conn, "SELECT * FROM cards WHERE customer_id = ? ORDER BY card_id", customer_id))


@tool
def list_fee_refunds(ctx: ToolContext, customer_id: str) -> str:
    """List the fee refunds already granted on a customer's accounts (for refund limits).

    Args:
        customer_id: The customer's id.
    """
    return json.dumps(
        _rows(
            ctx.conn,
            "SELECT f.* FROM fee_refunds f JOIN accounts a USING (account_id) "
            "WHERE a.customer_id = ? ORDER BY f.refunded_on, f.refund_id",
            customer_id,
        )
    )


@tool(produces=("wire_id",))
def list_wires(ctx: ToolContext, customer_id: str) -> str:
    """List the wires from a customer's accounts, including ones still awaiting approval.

    Args:
        customer_id: The customer's id.
    """
    sql = (
        "SELECT w.* FROM wires w JOIN accounts a USING (account_id) WHERE a.customer_id = ? "
        "ORDER BY w.created_on, w.wire_id"
    )
    return json.dumps(_rows(ctx.conn, sql, customer_id))


@tool(kind="write", requires=("verify_identity",))
def update_contact_info(
    ctx: ToolContext, customer_id: str, email: str | None = None, phone: str | None = None, address: str | None = None
) -> str:
    """Change a verified customer's email, phone number or postal address.

    Args:
        customer_id: The customer's id.
        email: New email address, if it changes.
        phone: New phone number, if it changes.
        address: New postal address, if it changes.
    """
    _one(ctx.conn, "customers", "customer_id", customer_id, "Customer")
    _require_verified(ctx, customer_id)
    changes = {k: v.strip() for k, v in (("email", email), ("phone", phone), ("address", address)) if v is not None}
    if not changes:
        raise ToolError("Nothing to change: give at least one of email, phone, address.")
    if "email" in changes and ("@" not in changes["email"] or " " in changes["email"]):
        raise ToolError(f"'{changes['email'][:60]}' is not a valid email address.")
    for field_name, value in changes.items():
        if not value:
            raise ToolError(f"{field_name} cannot be empty.")
        ctx.conn.execute(f"UPDATE customers SET {field_name} = ? WHERE customer_id = ?", (value, customer_id))
    return f"Updated {', '.join(changes)} for {customer_id}."


@tool(kind="write", requires=("verify_identity",), conflicts=("close_account_8837",))
def transfer_funds(ctx: ToolContext, from_account_id: str, to_account_id: str, amount_cents: int) -> str:
    """Move money between two open accounts of the same verified customer.

    Args:
        from_account_id: Account the money leaves.
        to_account_id: Account the money goes to.
        amount_cents: Amount in cents (e.g. 12550 for $125.50); must be positive.
    """
    if amount_cents <= 0:
        raise ToolError(f"amount_cents must be positive, got {amount_cents}.")
    if from_account_id == to_account_id:
        raise ToolError("The two accounts must differ.")
    src, dst = _open_account(ctx, from_account_id), _open_account(ctx, to_account_id)
    if src["customer_id"] != dst["customer_id"]:
        raise ToolError("Both accounts must belong to the same customer.")
    _require_verified(ctx, src["customer_id"])
    if src["product"] == "cd_12_month" and not _matured(src, ctx):
        raise ToolError("Money cannot be moved out of a certificate of deposit before maturity.")
    if src["balance_cents"] < amount_cents:
        raise ToolError(f"Insufficient funds: {from_account_id} holds {_dollars(src['balance_cents'])}.")
    _post(ctx, from_account_id, f"Transfer to {to_account_id}", -amount_cents, "transfer")
    _post(ctx, to_account_id, f"Transfer from {from_account_id}", amount_cents, "transfer")
    return f"Transferred {_dollars(amount_cents)} from {from_account_id} to {to_account_id}."


def _card_for(ctx: ToolContext, card_id: str) -> dict[str, Any]:
    card = _one(ctx.conn, "cards", "card_id", card_id, "Card")
    _require_verified(ctx, card["customer_id"])
    return card


@tool(
    kind="write",
    requires=("verify_identity",),
    conflicts=("unlock_card", "replace_card_5120", "change_daily_limit_7745"),
)
def lock_card(ctx: ToolContext, card_id: str) -> str:
    """Temporarily lock an active debit card (reversible with unlock_card).

    Args:
        card_id: The card's id.
    """
    card = _card_for(ctx, card_id)
    if card["status"] != "active":
        raise ToolError(f"Card '{card_id}' is {card['status']}; only an active card can be locked.")
    ctx.conn.execute("UPDATE cards SET status = 'locked' WHERE card_id = ?", (card_id,))
    return f"Card {card_id} is now locked."


@tool(kind="write", requires=("verify_identity",), conflicts=("lock_card", "replace_card_5120"))
def unlock_card(ctx: ToolContext, card_id: str) -> str:
    """Unlock a card that was locked with lock_card (lost or stolen cards cannot be unlocked).

    Args:
        card_id: The card's id.
    """
    card = _card_for(ctx, card_id)
    if card["status"] != "locked":
        raise ToolError(f"Card '{card_id}' is {card['status']}; only a locked card can be unlocked.")
    ctx.conn.execute("UPDATE cards SET status = 'active' WHERE card_id = ?", (card_id,))
    return f"Card {card_id} is active again."


@tool(kind="write", ends_episode=True)
def transfer_to_human(ctx: ToolContext, summary: str, reason: Literal[TRANSFER_REASONS]) -> str:  # type: ignore[valid-type]
    """Hand the conversation to a human colleague; only when the policy requires it. Ends the chat.

    Args:
        summary: A short summary of the customer's issue for the colleague.
        reason: Why the transfer is needed.
    """
    # The hand-off is recorded (reason only), so a transfer with the wrong reason, or none, is graded.
    ctx.conn.execute(
        "INSERT OR IGNORE INTO handoffs VALUES (?, ?, ?)",
        (ctx.make_id("HO-", reason), reason, ctx.now.isoformat(sep=" ")),
    )
    return f"Transfer requested ({reason}). A colleague will join shortly."


_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Mod: operator.mod,
    ast.FloorDiv: operator.floordiv,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _eval(node: ast.AST) -> float:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.left), _eval(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval(node.operand))
    raise ToolError("Only numbers, parentheses and + - * / // % are allowed.")


@tool(max_string=200)
def calculate(ctx: ToolContext, expression: str) -> str:
    """Evaluate an arithmetic expression, e.g. "(1250 + 75) * 2".

    Args:
        expression: Numbers, parentheses and + - * / // %.
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        value = _eval(tree)
    except SyntaxError:
        raise ToolError(f"'{expression[:60]}' is not an arithmetic expression.") from None
    except ZeroDivisionError:
        raise ToolError("Division by zero.") from None
    except (OverflowError, RecursionError, MemoryError, ValueError):
        raise ToolError("The expression is too large to evaluate.") from None
    return repr(round(value, 6) if isinstance(value, float) else value)


# --- discoverable agent tools (their names are in the documents) ----------------------------------
@tool(name="refund_fee_4410", kind="write", discoverable=True, requires=("verify_identity",))
def refund_fee(ctx: ToolContext, account_id: str, fee_txn_id: str, reason: str) -> str:
    """Refund a fee charged to an account, as a courtesy the fee-refund policy allows.

    Args:
        account_id: The account the fee was charged to.
        fee_txn_id: The transaction id of the fee.
        reason: Why the fee is refunded (short).
    """
    acct = _open_account(ctx, account_id)
    _require_verified(ctx, acct["customer_id"])
    txn = _one(ctx.conn, "transactions", "txn_id", fee_txn_id, "Transaction")
    if txn["account_id"] != account_id or txn["category"] != "fee":
        raise ToolError(f"Transaction '{fee_txn_id}' is not a fee on account {account_id}.")
    if txn["status"] != "posted":
        raise ToolError(f"Fee '{fee_txn_id}' is {txn['status']} and cannot be refunded.")
    amount = -txn["amount_cents"]
    ctx.conn.execute("UPDATE transactions SET status = 'reversed' WHERE txn_id = ?", (fee_txn_id,))
    _post(ctx, account_id, f"Refund of fee {fee_txn_id}", amount, "refund")
    ctx.conn.execute(
        "INSERT INTO fee_refunds VALUES (?, ?, ?, ?, ?, ?)",
        (ctx.make_id("FR-", fee_txn_id), fee_txn_id, account_id, amount, reason.strip(), ctx.today()),
    )
    return f"Refunded {_dollars(amount)} for fee {fee_txn_id} to {account_id}."


@tool(
    name="open_account_2291",
    kind="write",
    discoverable=True,
    requires=("verify_identity",),
    produces=(
        "account_id",
        "from_account_id",
        "to_account_id",
        "funding_account_id",
        "checking_account_id",
        "savings_account_id",
    ),
)
def open_account(
    ctx: ToolContext,
    customer_id: str,
    product: Literal[PRODUCTS],  # type: ignore[valid-type]
    initial_deposit_cents: int,
    funding_account_id: str,
) -> str:
    """Open a new account for a verified customer, funded by a transfer from one of their open accounts.

    Args:
        customer_id: The customer's id.
        product: The product code, as written in the product documents.
        initial_deposit_cents: Opening deposit in cents, moved from the funding account.
        funding_account_id: The customer's open account that funds the opening deposit.
    """
    _one(ctx.conn, "customers", "customer_id", customer_id, "Customer")
    _require_verified(ctx, customer_id)
    if initial_deposit_cents <= 0:
        raise ToolError("initial_deposit_cents must be positive.")
    src = _open_account(ctx, funding_account_id)
    if src["customer_id"] != customer_id:
        raise ToolError("The funding account must belong to the same customer.")
    if src["balance_cents"] < initial_deposit_cents:
        raise ToolError(f"Insufficient funds in {funding_account_id}.")
    prefix = "CHK-" if product in CHECKING else ("CD-" if product == "cd_12_month" else "SAV-")
    account_id = _unique_id(ctx, "accounts", "account_id", prefix, customer_id, product)
    ctx.conn.execute(
        "INSERT INTO accounts VALUES (?, ?, ?, 'open', 0, ?, NULL, NULL)",
        (account_id, customer_id, product, ctx.today()),
    )
    _post(ctx, funding_account_id, f"Opening deposit to {account_id}", -initial_deposit_cents, "transfer")
    _post(ctx, account_id, f"Opening deposit from {funding_account_id}", initial_deposit_cents, "transfer")
    return f"Opened {product} account {account_id} with {_dollars(initial_deposit_cents)}."


@tool(
    name="close_account_8837",
    kind="write",
    discoverable=True,
    requires=("verify_identity",),
    conflicts=(
        "transfer_funds",
        "open_account_2291",
        "link_overdraft_protection_1288",
        "refund_fee_4410",
        "file_dispute_6604",
        "replace_card_5120",
        "lock_card",
        "unlock_card",
        "change_daily_limit_7745",
        "initiate_wire_9150",
        "release_wire_9152",
        "deposit_check_in_app",
    ),
)
def close_account(ctx: ToolContext, account_id: str, reason: str) -> str:
    """Close an open account whose balance is exactly zero.

    Args:
        account_id: The account to close.
        reason: The customer's reason for closing (short).
    """
    acct = _open_account(ctx, account_id)
    _require_verified(ctx, acct["customer_id"])
    if acct["balance_cents"] != 0:
        raise ToolError(
            f"Account {account_id} holds {_dollars(acct['balance_cents'])}; its balance must be zero "
            "before it can be closed."
        )
    ctx.conn.execute(
        "UPDATE accounts SET status = 'closed', closed_reason = ? WHERE account_id = ?", (reason.strip(), account_id)
    )
    ctx.conn.execute(
        "UPDATE cards SET status = 'cancelled' WHERE account_id = ? AND status IN ('active', 'locked')", (account_id,)
    )
    ctx.conn.execute("UPDATE accounts SET overdraft_link = NULL WHERE overdraft_link = ?", (account_id,))
    return f"Account {account_id} is closed."


@tool(
    name="replace_card_5120",
    kind="write",
    discoverable=True,
    requires=("verify_identity",),
    produces=("card_id",),
    conflicts=("lock_card", "unlock_card", "change_daily_limit_7745"),
)
def replace_card(
    ctx: ToolContext,
    card_id: str,
    reason: Literal["lost", "stolen", "damaged"],
    shipping: Literal["standard", "expedited"],
    fee_cents: int,
) -> str:
    """Order a replacement debit card; the old card stops working at once.

    Args:
        card_id: The card being replaced.
        reason: Why it is replaced.
        shipping: Delivery speed.
        fee_cents: The replacement fee from the fee schedule, in cents (0 if none); charged to the card's account.
    """
    card = _card_for(ctx, card_id)
    if card["status"] in ("cancelled", "lost", "stolen"):
        raise ToolError(f"Card '{card_id}' is already {card['status']}; it has been replaced or closed.")
    if fee_cents < 0:
        raise ToolError("fee_cents cannot be negative.")
    _open_account(ctx, card["account_id"])
    new_id = _unique_id(ctx, "cards", "card_id", "CARD-", card_id, "replacement")
    last4 = str(int(ctx.make_id("", new_id, "last4", n=8), 16) % 10000).zfill(4)
    old_status = {"lost": "lost", "stolen": "stolen", "damaged": "cancelled"}[reason]
    ctx.conn.execute("UPDATE cards SET status = ? WHERE card_id = ?", (old_status, card_id))
    ctx.conn.execute(
        "INSERT INTO cards VALUES (?, ?, ?, ?, 'active', ?, ?, ?)",
        (new_id, card["account_id"], card["customer_id"], last4, card["daily_limit_cents"], ctx.today(), card_id),
    )
    ctx.conn.execute(
        "INSERT INTO card_orders VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (ctx.make_id("ORD-", card_id), card_id, new_id, card["customer_id"], reason, shipping, fee_cents, ctx.today()),
    )
    if fee_cents:
        _post(ctx, card["account_id"], f"Card replacement fee ({shipping})", -fee_cents, "fee")
    return f"Card {card_id} marked {old_status}; new card {new_id} (ending {last4}) ships {shipping}."


@tool(name="file_dispute_6604", kind="write", discoverable=True, requires=("verify_identity",))
def file_dispute(
    ctx: ToolContext,
    txn_id: str,
    reason: Literal["unauthorized", "duplicate", "not_received", "wrong_amount"],
    provisional_credit_cents: int,
) -> str:
    """Open a dispute on a card purchase and post the provisional credit the dispute policy allows.

    Args:
        txn_id: The disputed purchase.
        reason: The dispute reason.
        provisional_credit_cents: Provisional credit in cents per the dispute policy (0 if none).
    """
    txn = _one(ctx.conn, "transactions", "txn_id", txn_id, "Transaction")
    acct = _open_account(ctx, txn["account_id"])
    _require_verified(ctx, acct["customer_id"])
    if txn["category"] != "purchase" or txn["amount_cents"] >= 0:
        raise ToolError(f"Transaction '{txn_id}' is not a card purchase; only purchases can be disputed.")
    if txn["status"] != "posted":
        raise ToolError(f"Transaction '{txn_id}' is {txn['status']}; only posted purchases can be disputed.")
    if not 0 <= provisional_credit_cents <= -txn["amount_cents"]:
        raise ToolError("provisional_credit_cents must be between 0 and the purchase amount.")
    ctx.conn.execute("UPDATE transactions SET status = 'disputed' WHERE txn_id = ?", (txn_id,))
    dispute_id = ctx.make_id("DSP-", txn_id)
    ctx.conn.execute(
        "INSERT INTO disputes VALUES (?, ?, ?, ?, 'open', ?, ?)",
        (dispute_id, txn_id, acct["customer_id"], reason, provisional_credit_cents, ctx.today()),
    )
    if provisional_credit_cents:
        _post(
            ctx, acct["account_id"], f"Provisional credit for dispute {dispute_id}", provisional_credit_cents, "credit"
        )
    return f"Dispute {dispute_id} opened for {txn_id}; provisional credit {_dollars(provisional_credit_cents)}."


@tool(name="set_travel_notice_3012", kind="write", discoverable=True, requires=("verify_identity",))
def set_travel_notice(ctx: ToolContext, customer_id: str, destination: str, start_date: str, end_date: str) -> str:
    """Record that a customer will use their cards abroad, so purchases there are not declined.

    Args:
        customer_id: The customer's id.
        destination: Country or countries visited.
        start_date: First day of travel, YYYY-MM-DD.
        end_date: Last day of travel, YYYY-MM-DD.
    """
    _one(ctx.conn, "customers", "customer_id", customer_id, "Customer")
    _require_verified(ctx, customer_id)
    start, end = _iso(start_date, "start_date"), _iso(end_date, "end_date")
    if end < start:
        raise ToolError("end_date is before start_date.")
    if not destination.strip():
        raise ToolError("destination cannot be empty.")
    ctx.conn.execute(
        "INSERT OR REPLACE INTO travel_notices VALUES (?, ?, ?, ?, ?)",
        (
            ctx.make_id("TRV-", customer_id, start.isoformat()),
            customer_id,
            destination.strip(),
            start.isoformat(),
            end.isoformat(),
        ),
    )
    return f"Travel notice set for {customer_id}: {destination.strip()} from {start} to {end}."


@tool(name="change_daily_limit_7745", kind="write", discoverable=True, requires=("verify_identity",))
def change_daily_limit(ctx: ToolContext, card_id: str, new_limit_cents: int) -> str:
    """Change an active card's daily spending limit (within the customer's tier maximum).

    Args:
        card_id: The card's id.
        new_limit_cents: New daily limit in cents.
    """
    card = _card_for(ctx, card_id)
    if card["status"] != "active":
        raise ToolError(f"Card '{card_id}' is {card['status']}; only an active card's limit can change.")
    if not 10_000 <= new_limit_cents <= MAX_DAILY_LIMIT_CENTS:
        raise ToolError(f"new_limit_cents must be between 10000 and {MAX_DAILY_LIMIT_CENTS}.")
    ctx.conn.execute("UPDATE cards SET daily_limit_cents = ? WHERE card_id = ?", (new_limit_cents, card_id))
    return f"Daily limit of {card_id} is now {_dollars(new_limit_cents)}."


@tool(name="initiate_wire_9150", kind="write", discoverable=True, requires=("verify_identity",), produces=("wire_id",))
def initiate_wire(
    ctx: ToolContext,
    account_id: str,
    beneficiary_name: str,
    beneficiary_account: str,
    amount_cents: int,
    fee_cents: int,
) -> str:
    """Create a domestic wire that waits for the customer's approval in the mobile app; no money moves yet.

    Args:
        account_id: The customer's account the wire is sent from.
        beneficiary_name: The recipient's full name.
        beneficiary_account: The recipient's account number.
        amount_cents: Amount to send, in cents.
        fee_cents: The wire fee from the fee schedule, in cents.
    """
    acct = _open_account(ctx, account_id)
    _require_verified(ctx, acct["customer_id"])
    if amount_cents <= 0 or fee_cents < 0:
        raise ToolError("amount_cents must be positive and fee_cents not negative.")
    if acct["product"] not in CHECKING:
        raise ToolError("Wires can only be sent from a checking account.")
    if acct["balance_cents"] < amount_cents + fee_cents:
        raise ToolError(f"Insufficient funds: {account_id} holds {_dollars(acct['balance_cents'])}.")
    wire_id = _unique_id(ctx, "wires", "wire_id", "WIRE-", account_id, beneficiary_account, amount_cents)
    ctx.conn.execute(
        "INSERT INTO wires VALUES (?, ?, ?, ?, ?, ?, 'awaiting_approval', ?)",
        (
            wire_id,
            account_id,
            beneficiary_name.strip(),
            beneficiary_account.strip(),
            amount_cents,
            fee_cents,
            ctx.today(),
        ),
    )
    return (
        f"Wire {wire_id} created for {_dollars(amount_cents)} and awaits the customer's approval in the app "
        "(hand them approve_wire_in_app)."
    )


@tool(name="release_wire_9152", kind="write", discoverable=True, requires=("verify_identity", "approve_wire_in_app"))
def release_wire(ctx: ToolContext, wire_id: str) -> str:
    """Send a wire the customer has approved in the app; debits the amount and the fee.

    Args:
        wire_id: The wire's id.
    """
    wire = _one(ctx.conn, "wires", "wire_id", wire_id, "Wire")
    acct = _open_account(ctx, wire["account_id"])
    _require_verified(ctx, acct["customer_id"])
    if wire["status"] != "approved":
        raise ToolError(f"Wire {wire_id} is {wire['status']}; the customer must approve it in the app first.")
    if acct["balance_cents"] < wire["amount_cents"] + wire["fee_cents"]:
        raise ToolError("Insufficient funds to send the wire.")
    _post(ctx, wire["account_id"], f"Wire to {wire['beneficiary_name']}", -wire["amount_cents"], "wire")
    if wire["fee_cents"]:
        _post(ctx, wire["account_id"], "Domestic wire fee", -wire["fee_cents"], "fee")
    ctx.conn.execute("UPDATE wires SET status = 'sent' WHERE wire_id = ?", (wire_id,))
    return f"Wire {wire_id} sent."


@tool(name="link_overdraft_protection_1288", kind="write", discoverable=True, requires=("verify_identity",))
def link_overdraft_protection(ctx: ToolContext, checking_account_id: str, savings_account_id: str) -> str:
    """Link a savings account to cover overdrafts on a checking account of the same customer.

    Args:
        checking_account_id: The checking account to protect.
        savings_account_id: The savings account that covers it.
    """
    chk, sav = _open_account(ctx, checking_account_id), _open_account(ctx, savings_account_id)
    _require_verified(ctx, chk["customer_id"])
    if chk["customer_id"] != sav["customer_id"]:
        raise ToolError("Both accounts must belong to the same customer.")
    if chk["product"] not in CHECKING or sav["product"] not in ("basic_savings", "high_yield_savings"):
        raise ToolError("Overdraft protection links a checking account to a savings account.")
    ctx.conn.execute(
        "UPDATE accounts SET overdraft_link = ? WHERE account_id = ?", (savings_account_id, checking_account_id)
    )
    return f"{savings_account_id} now covers overdrafts on {checking_account_id}."


# --- user tools --------------------------------------------------------------------------------------
@tool(kind="write", side="user")
def deposit_check_in_app(ctx: ToolContext, account_id: str, amount_cents: int, check_number: str) -> str:
    """Deposit a paper check by photographing it in the Harbor Bank app (the deposit is pending until it clears).

    Args:
        account_id: Your account to deposit into.
        amount_cents: The check's amount in cents.
        check_number: The number printed on the check.
    """
    acct = _open_account(ctx, account_id)
    if amount_cents <= 0:
        raise ToolError("The amount must be positive.")
    if acct["product"] == "cd_12_month":
        raise ToolError("Checks cannot be deposited into a certificate of deposit.")
    _post(ctx, account_id, f"Mobile check deposit #{check_number.strip()}", amount_cents, "deposit", status="pending")
    return f"Check #{check_number.strip()} for {_dollars(amount_cents)} submitted; it is pending review."


@tool(kind="write", side="user", handover=True)
def approve_wire_in_app(ctx: ToolContext, wire_id: str) -> str:
    """Approve a wire transfer that the bank prepared for you, from the Harbor Bank app.

    Args:
        wire_id: The wire's id, as the agent gave it.
    """
    wire = _one(ctx.conn, "wires", "wire_id", wire_id, "Wire")
    if wire["status"] != "awaiting_approval":
        raise ToolError(f"Wire {wire_id} is {wire['status']}; there is nothing to approve.")
    ctx.conn.execute("UPDATE wires SET status = 'approved' WHERE wire_id = ?", (wire_id,))
    return f"You approved wire {wire_id} for {_dollars(wire['amount_cents'])} to {wire['beneficiary_name']}."


@tool(side="user")
def view_my_cards_in_app(ctx: ToolContext, customer_id: str) -> str:
    """See your own debit cards in the Harbor Bank app (ids, last four digits, status).

    Args:
        customer_id: Your customer id (shown in the app).
    """
    return json.dumps(
        _rows(ctx.conn, "SELECT card_id, last4, status FROM cards WHERE customer_id = ? ORDER BY card_id", customer_id)
    )


TOOLS = [
    get_current_time,
    find_customer,
    verify_identity,
    get_customer,
    list_accounts,
    list_transactions,
    list_cards,
    list_fee_refunds,
    list_wires,
    update_contact_info,
    transfer_funds,
    lock_card,
    unlock_card,
    transfer_to_human,
    calculate,
    refund_fee,
    open_account,
    close_account,
    replace_card,
    file_dispute,
    set_travel_notice,
    change_daily_limit,
    initiate_wire,
    release_wire,
    link_overdraft_protection,
    deposit_check_in_app,
    approve_wire_in_app,
    view_my_cards_in_app,
]
