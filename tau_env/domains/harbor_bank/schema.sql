-- Harbor Bank: the tables of the shipped example domain.
-- Money is in integer cents; dates are ISO (YYYY-MM-DD). STRICT tables keep types exact,
-- so the grader's digest never confuses 100 and 100.0.

CREATE TABLE customers (
    customer_id    TEXT PRIMARY KEY,
    full_name      TEXT NOT NULL,
    date_of_birth  TEXT NOT NULL,
    email          TEXT NOT NULL,
    phone          TEXT NOT NULL,
    address        TEXT NOT NULL,
    tier           TEXT NOT NULL CHECK (tier IN ('standard', 'preferred', 'private')),
    customer_since TEXT NOT NULL
) STRICT;

CREATE TABLE accounts (
    account_id     TEXT PRIMARY KEY,
    customer_id    TEXT NOT NULL REFERENCES customers (customer_id),
    product        TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('open', 'frozen', 'closed')),
    balance_cents  INTEGER NOT NULL,
    opened_on      TEXT NOT NULL,
    overdraft_link TEXT,
    closed_reason  TEXT
) STRICT;

CREATE TABLE cards (
    card_id           TEXT PRIMARY KEY,
    account_id        TEXT NOT NULL REFERENCES accounts (account_id),
    customer_id       TEXT NOT NULL REFERENCES customers (customer_id),
    last4             TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('active', 'locked', 'lost', 'stolen', 'cancelled')),
    daily_limit_cents INTEGER NOT NULL,
    issued_on         TEXT NOT NULL,
    replaces          TEXT
) STRICT;

CREATE TABLE transactions (
    txn_id       TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES accounts (account_id),
    posted_on    TEXT NOT NULL,
    description  TEXT NOT NULL,
    amount_cents INTEGER NOT NULL,  -- negative: money out of the account
    category     TEXT NOT NULL CHECK (category IN ('purchase', 'deposit', 'fee', 'transfer', 'refund', 'wire', 'interest', 'credit')),
    status       TEXT NOT NULL CHECK (status IN ('posted', 'pending', 'disputed', 'reversed'))
) STRICT;

CREATE TABLE fee_refunds (
    refund_id    TEXT PRIMARY KEY,
    fee_txn_id   TEXT NOT NULL REFERENCES transactions (txn_id),
    account_id   TEXT NOT NULL REFERENCES accounts (account_id),
    amount_cents INTEGER NOT NULL,
    reason       TEXT NOT NULL,
    refunded_on  TEXT NOT NULL
) STRICT;

CREATE TABLE disputes (
    dispute_id               TEXT PRIMARY KEY,
    txn_id                   TEXT NOT NULL REFERENCES transactions (txn_id),
    customer_id              TEXT NOT NULL REFERENCES customers (customer_id),
    reason                   TEXT NOT NULL,
    status                   TEXT NOT NULL,
    provisional_credit_cents INTEGER NOT NULL,
    opened_on                TEXT NOT NULL
) STRICT;

CREATE TABLE card_orders (
    order_id    TEXT PRIMARY KEY,
    old_card_id TEXT NOT NULL REFERENCES cards (card_id),
    new_card_id TEXT NOT NULL,
    customer_id TEXT NOT NULL,
    reason      TEXT NOT NULL,
    shipping    TEXT NOT NULL,
    fee_cents   INTEGER NOT NULL,
    ordered_on  TEXT NOT NULL
) STRICT;

CREATE TABLE travel_notices (
    notice_id   TEXT PRIMARY KEY,
    customer_id TEXT NOT NULL REFERENCES customers (customer_id),
    destination TEXT NOT NULL,
    start_date  TEXT NOT NULL,
    end_date    TEXT NOT NULL
) STRICT;

CREATE TABLE wires (
    wire_id             TEXT PRIMARY KEY,
    account_id          TEXT NOT NULL REFERENCES accounts (account_id),
    beneficiary_name    TEXT NOT NULL,
    beneficiary_account TEXT NOT NULL,
    amount_cents        INTEGER NOT NULL,
    fee_cents           INTEGER NOT NULL,
    status              TEXT NOT NULL CHECK (status IN ('awaiting_approval', 'approved', 'sent')),
    created_on          TEXT NOT NULL
) STRICT;

CREATE TABLE verifications (
    verification_id TEXT PRIMARY KEY,
    customer_id     TEXT NOT NULL REFERENCES customers (customer_id),
    verified_at     TEXT NOT NULL
) STRICT;

-- One row per hand-off to a human colleague (the reason is graded; the free-text summary is not).
CREATE TABLE handoffs (
    handoff_id   TEXT PRIMARY KEY,
    reason       TEXT NOT NULL,
    requested_at TEXT NOT NULL
) STRICT;
