"""The interface of tau2-bench's banking_knowledge tools, as a model sees it.

Names, descriptions and parameters of the tools of the public tau3-banking benchmark
(sierra-research/tau2-bench, MIT licence), so that the schemas shown to an agent and the texts
of unlock/give match the benchmark's byte for byte. The behaviour is implemented in this package
from the public specification; nothing here is code.
"""

# ruff: noqa: E501

#: OpenAI schemas of the 14 base agent tools, in the benchmark's order.
AGENT_SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": "transfer_to_human_agents",
            "description": "Transfer the user to a human agent.\n"
            "\n"
            "The proper transfer reason enum can be found in the knowledge base: search it "
            "before calling this tool to select the proper applicable reason.",
            "parameters": {
                "properties": {
                    "summary": {
                        "description": "A summary of the user's issue and what was attempted before transfer.",
                        "title": "Summary",
                        "type": "string",
                    },
                    "reason": {
                        "default": "other",
                        "description": "The specific reason code for the transfer.",
                        "enum": [
                            "fraud_or_security_concern",
                            "account_closure_request",
                            "deceased_account_holder",
                            "legal_or_regulatory_matter",
                            "account_ownership_dispute",
                            "complex_billing_dispute",
                            "abusive_customer_behavior",
                            "third_party_inquiry",
                            "technical_system_error",
                            "unconfirmed_external_communication",
                            "customer_demands_after_unavailable_offer_refusal",
                            "kb_search_unsuccessful_customer_requests_transfer",
                            "specialized_department_required",
                            "accessibility_or_special_needs",
                            "customer_frustrated_demands_human",
                            "supervisor_request_service_complaint",
                            "customer_requests_human_no_specific_reason",
                            "request_completed_customer_wants_human_followup",
                            "other",
                        ],
                        "title": "Reason",
                        "type": "string",
                    },
                },
                "required": ["summary"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_current_time",
            "description": "Get the current time. Use this to get the current timestamp for logging "
            "verification records.",
            "parameters": {"properties": {}, "title": "parameters", "type": "object"},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_user_information_by_id",
            "description": "Get the information (date of birth, email, phone number, address) for a user "
            "by their user id.",
            "parameters": {
                "properties": {"user_id": {"description": "The ID of the user", "title": "User Id", "type": "string"}},
                "required": ["user_id"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_user_information_by_name",
            "description": "Get the information (date of birth, email, phone number, address) for a user "
            "by their name. Case Sensitive.",
            "parameters": {
                "properties": {
                    "customer_name": {"description": "The name of the user", "title": "Customer Name", "type": "string"}
                },
                "required": ["customer_name"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_user_information_by_email",
            "description": "Get the information (date of birth, email, phone number, address) for a user "
            "by their email.",
            "parameters": {
                "properties": {"email": {"description": "The email of the user", "title": "Email", "type": "string"}},
                "required": ["email"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "change_user_email",
            "description": "Change the email address for a user.",
            "parameters": {
                "properties": {
                    "user_id": {
                        "description": "The ID of the user whose email should be changed",
                        "title": "User Id",
                        "type": "string",
                    },
                    "new_email": {
                        "description": "The new email address to set for the user",
                        "title": "New Email",
                        "type": "string",
                    },
                },
                "required": ["user_id", "new_email"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_referrals_by_user",
            "description": "Get all referrals made by a user.",
            "parameters": {
                "properties": {
                    "user_id": {
                        "description": "The ID of the user (referrer) to look up referrals for",
                        "title": "User Id",
                        "type": "string",
                    }
                },
                "required": ["user_id"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_credit_card_transactions_by_user",
            "description": "Get all credit card transactions for a user.",
            "parameters": {
                "properties": {
                    "user_id": {
                        "description": "The ID of the user to look up transactions for",
                        "title": "User Id",
                        "type": "string",
                    }
                },
                "required": ["user_id"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_credit_card_accounts_by_user",
            "description": "Get all credit card accounts for a user.\n"
            "\n"
            "Returns information about each credit card account including card type,\n"
            "date opened, current balance, and reward points.",
            "parameters": {
                "properties": {
                    "user_id": {
                        "description": "The ID of the user to look up credit card accounts for",
                        "title": "User Id",
                        "type": "string",
                    }
                },
                "required": ["user_id"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "log_verification",
            "description": "Log a verification record after successfully verifying a user's identity.\n"
            "\n"
            "Call this tool after you have verified a user by confirming 2 out of 4 "
            "identity fields\n"
            "(date of birth, email, phone number, address). This creates an audit record "
            "of the verification.",
            "parameters": {
                "properties": {
                    "name": {"description": "The verified user's full name", "title": "Name", "type": "string"},
                    "user_id": {"description": "The verified user's ID", "title": "User Id", "type": "string"},
                    "address": {"description": "The verified user's address", "title": "Address", "type": "string"},
                    "email": {"description": "The verified user's email", "title": "Email", "type": "string"},
                    "phone_number": {
                        "description": "The verified user's phone number",
                        "title": "Phone Number",
                        "type": "string",
                    },
                    "date_of_birth": {
                        "description": "The verified user's date of birth (MM/DD/YYYY format)",
                        "title": "Date Of Birth",
                        "type": "string",
                    },
                    "time_verified": {
                        "description": 'The timestamp of the verification (e.g., "2025-11-14 03:40:00 EST")',
                        "title": "Time Verified",
                        "type": "string",
                    },
                },
                "required": ["name", "user_id", "address", "email", "phone_number", "date_of_birth", "time_verified"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "give_discoverable_user_tool",
            "description": "Pass a tool to the user so they can execute it themselves.\n"
            "\n"
            "Use this when the knowledge base indicates that the user should perform\n"
            'an action themselves (e.g., "to do X, have the user call tool_name(args)").\n'
            "\n"
            "The user will then be able to call `call_discoverable_tool` with the same\n"
            "tool name and arguments to simulate executing the action.",
            "parameters": {
                "properties": {
                    "discoverable_tool_name": {
                        "description": "The name of the "
                        "discoverable tool "
                        "(e.g., "
                        '"open_webpage", '
                        '"navigate_to_section")',
                        "title": "Discoverable Tool Name",
                        "type": "string",
                    },
                    "arguments": {
                        "default": "{}",
                        "description": "JSON string of arguments for the "
                        'tool (e.g., \'{"url": '
                        '"https://example.com"}\')',
                        "title": "Arguments",
                        "type": "string",
                    },
                },
                "required": ["discoverable_tool_name"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "unlock_discoverable_agent_tool",
            "description": "Unlock an agent discoverable tool that was found in the knowledge base.\n"
            "\n"
            "Use this when the knowledge base indicates that you have access to a "
            "specialized\n"
            "internal tool. The knowledge base will tell you the tool name to unlock.\n"
            "\n"
            "After unlocking, you can use the tool by calling "
            "`call_discoverable_agent_tool` with\n"
            "the tool name and required arguments.",
            "parameters": {
                "properties": {
                    "agent_tool_name": {
                        "description": "The name of the agent "
                        "discoverable tool to "
                        "unlock\n"
                        "(e.g., "
                        '"calculate_apr_adjustment_7842")',
                        "title": "Agent Tool Name",
                        "type": "string",
                    }
                },
                "required": ["agent_tool_name"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "call_discoverable_agent_tool",
            "description": "Call an agent discoverable tool that you have previously unlocked.\n"
            "\n"
            "Use this after unlocking a tool with `unlock_discoverable_agent_tool`. The "
            "knowledge base\n"
            "will tell you which tool to use and what arguments to provide.",
            "parameters": {
                "properties": {
                    "agent_tool_name": {
                        "description": "The name of the agent discoverable tool to call",
                        "title": "Agent Tool Name",
                        "type": "string",
                    },
                    "arguments": {
                        "default": "{}",
                        "description": 'JSON string of arguments for the tool (e.g., \'{"user_id": "abc123"}\')',
                        "title": "Arguments",
                        "type": "string",
                    },
                },
                "required": ["agent_tool_name"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_discoverable_agent_tools",
            "description": "List all agent discoverable tools that you have called.\n"
            "\n"
            "Use this to see what specialized tools you have used.",
            "parameters": {"properties": {}, "title": "parameters", "type": "object"},
        },
    },
]

#: OpenAI schemas of the 6 user tools.
USER_SCHEMAS = [
    {
        "type": "function",
        "function": {
            "name": "apply_for_credit_card",
            "description": "Apply for a credit card.",
            "parameters": {
                "properties": {
                    "card_type": {"description": "Type of credit card", "title": "Card Type", "type": "string"},
                    "customer_name": {"description": "Full legal name", "title": "Customer Name", "type": "string"},
                    "annual_income": {
                        "description": "Annual income in USD",
                        "title": "Annual Income",
                        "type": "number",
                    },
                    "rho_bank_subscription": {
                        "default": False,
                        "description": "Whether user has Rho-Bank+ subscription",
                        "title": "Rho Bank Subscription",
                        "type": "boolean",
                    },
                },
                "required": ["card_type", "customer_name", "annual_income"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit_referral",
            "description": "Submit a referral request to refer someone to open an account.",
            "parameters": {
                "properties": {
                    "user_id": {"description": "Your user ID (the referrer)", "title": "User Id", "type": "string"},
                    "account_type": {
                        "description": "The type of account you are referring someone to open",
                        "title": "Account Type",
                        "type": "string",
                    },
                },
                "required": ["user_id", "account_type"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "call_discoverable_user_tool",
            "description": "Call a tool that was given to you by the agent.\n"
            "\n"
            "Use this when the agent has instructed you to perform an action using\n"
            "a discoverable tool. The agent will have told you the tool name and "
            "arguments.\n"
            "\n"
            "This simulates you performing the action in the real world (e.g., opening\n"
            "a webpage, navigating to a section, clicking a button).",
            "parameters": {
                "properties": {
                    "discoverable_tool_name": {
                        "description": 'The name of the discoverable tool to call (e.g., "open_webpage")',
                        "title": "Discoverable Tool Name",
                        "type": "string",
                    },
                    "arguments": {
                        "default": "{}",
                        "description": "JSON string of arguments for the "
                        'tool (e.g., \'{"url": '
                        '"https://example.com"}\')',
                        "title": "Arguments",
                        "type": "string",
                    },
                },
                "required": ["discoverable_tool_name"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_discoverable_user_tools",
            "description": "List all tools that have been given to you by the agent.\n"
            "\n"
            "Use this to see what actions the agent has instructed you to perform.",
            "parameters": {"properties": {}, "title": "parameters", "type": "object"},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "request_human_agent_transfer",
            "description": "Request to be transferred to a human agent for assistance.\n"
            "\n"
            "Use this when you want to speak with a real human agent instead of\n"
            "the automated system. Each request will be logged and processed.",
            "parameters": {"properties": {}, "title": "parameters", "type": "object"},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit_transaction",
            "description": "Submit a credit card transaction.",
            "parameters": {
                "properties": {
                    "user_id": {"description": "Your user ID", "title": "User Id", "type": "string"},
                    "credit_card_type": {
                        "description": 'Type of credit card used (e.g., "Bronze Rewards Card", "Gold Rewards Card")',
                        "title": "Credit Card Type",
                        "type": "string",
                    },
                    "merchant_name": {
                        "description": "Name of the merchant where the purchase was made",
                        "title": "Merchant Name",
                        "type": "string",
                    },
                    "amount": {
                        "description": "Transaction amount in USD (e.g., 127.43)",
                        "title": "Amount",
                        "type": "number",
                    },
                    "category": {
                        "description": "Transaction category (e.g., "
                        '"Groceries", "Dining", "Travel", '
                        '"Software", "Entertainment", '
                        '"Utilities", "Shopping")',
                        "title": "Category",
                        "type": "string",
                    },
                },
                "required": ["user_id", "credit_card_type", "merchant_name", "amount", "category"],
                "title": "parameters",
                "type": "object",
            },
        },
    },
]

#: Tool type of each base tool ("read", "write" or "generic").
BASE_KINDS = {
    "call_discoverable_agent_tool": "write",
    "change_user_email": "write",
    "get_credit_card_accounts_by_user": "read",
    "get_credit_card_transactions_by_user": "read",
    "get_current_time": "read",
    "get_referrals_by_user": "read",
    "get_user_information_by_email": "read",
    "get_user_information_by_id": "read",
    "get_user_information_by_name": "read",
    "give_discoverable_user_tool": "generic",
    "list_discoverable_agent_tools": "read",
    "log_verification": "write",
    "transfer_to_human_agents": "generic",
    "unlock_discoverable_agent_tool": "generic",
}

#: Tool type of each user tool.
USER_KINDS = {
    "apply_for_credit_card": "write",
    "call_discoverable_user_tool": "write",
    "list_discoverable_user_tools": "read",
    "request_human_agent_transfer": "write",
    "submit_referral": "write",
    "submit_transaction": "write",
}

#: The 44 discoverable agent tools: kind, description and (name, type, required, description) of each parameter.
DISCOVERABLE_AGENT = {
    "activate_debit_card_8291": {
        "kind": "write",
        "description": "Activate a NEW debit card for a customer. Use ONLY for "
        "first-time cards on a checking account (issue_reason = "
        "'new_account' or 'first_card'). For replacement or reissued "
        "cards, use the appropriate variant.",
        "params": [
            ("card_id", "string", True, "The debit card ID to activate"),
            ("last_4_digits", "string", True, "Last 4 digits of the card number (for verification)"),
            ("expiration_date", "string", True, "Card expiration date in MM/YY format"),
            ("cvv", "string", True, "3-digit CVV from the back of the card"),
            ("pin", "string", True, "4-digit PIN chosen by the customer"),
        ],
    },
    "activate_debit_card_8292": {
        "kind": "write",
        "description": "Activate a REPLACEMENT debit card. Use ONLY for cards "
        "replacing lost, stolen, or fraud-suspected cards (issue_reason "
        "= 'lost', 'stolen', or 'fraud'). For new or reissued cards, "
        "use the appropriate variant.",
        "params": [
            ("card_id", "string", True, "The debit card ID to activate"),
            ("last_4_digits", "string", True, "Last 4 digits of the card number (for verification)"),
            ("expiration_date", "string", True, "Card expiration date in MM/YY format"),
            ("cvv", "string", True, "3-digit CVV from the back of the card"),
            ("pin", "string", True, "4-digit PIN chosen by the customer"),
        ],
    },
    "activate_debit_card_8293": {
        "kind": "write",
        "description": "Activate a REISSUED debit card. Use ONLY for cards reissued "
        "due to expiration, damage, design upgrade, or bank-initiated "
        "replacement (issue_reason = 'expired', 'damaged', 'upgrade', "
        "or 'bank_reissue'). For new or replacement cards, use the "
        "appropriate variant.",
        "params": [
            ("card_id", "string", True, "The debit card ID to activate"),
            ("last_4_digits", "string", True, "Last 4 digits of the card number (for verification)"),
            ("expiration_date", "string", True, "Card expiration date in MM/YY format"),
            ("cvv", "string", True, "3-digit CVV from the back of the card"),
            ("pin", "string", True, "4-digit PIN chosen by the customer"),
        ],
    },
    "apply_checking_account_credit_5829": {
        "kind": "write",
        "description": "Apply a credit to a customer's checking account.",
        "params": [
            ("account_id", "string", True, "The checking account ID to credit"),
            ("amount", "number", True, "The positive dollar amount to credit (must be greater than 0)"),
            (
                "credit_type",
                "string",
                True,
                "The type of credit: 'rebate_credit' for missing rebates, 'fee_refund' for incorrect fee charges",
            ),
        ],
    },
    "apply_credit_card_account_flag_6147": {
        "kind": "write",
        "description": "Apply a flag to a customer's credit card account. "
        "Flags can include annual fee waivers, promotional "
        "APR rates, rewards bonuses, or other account-level "
        "modifiers. Each flag has an effective date and "
        "expiration date.",
        "params": [
            ("credit_card_account_id", "string", True, "The credit card account ID to apply the flag to"),
            ("user_id", "string", True, "The user's unique identifier in the system"),
            (
                "flag_type",
                "string",
                True,
                "Type of flag to apply. Must be one of: "
                "'annual_fee_waived', 'promotional_apr', "
                "'rewards_bonus', 'other'",
            ),
            ("expiration_date", "string", True, "Date when the flag expires (MM/DD/YYYY format)"),
            (
                "reason",
                "string",
                True,
                "Reason for applying this flag. Must be one of: "
                "'retention_offer', 'loyalty_benefit', 'promotional', "
                "'error_correction', 'other'",
            ),
        ],
    },
    "apply_savings_account_credit_6831": {
        "kind": "write",
        "description": "Apply a credit to a customer's savings account for "
        "interest corrections, fee refunds, or goodwill "
        "adjustments.",
        "params": [
            ("account_id", "string", True, "The savings account ID to credit"),
            ("amount", "number", True, "The positive dollar amount to credit (must be greater than 0)"),
            (
                "credit_type",
                "string",
                True,
                "The type of credit: 'interest_correction' for "
                "APY/interest calculation errors, 'fee_refund' for "
                "incorrect fee charges, 'goodwill_credit' for customer "
                "service gestures",
            ),
        ],
    },
    "apply_statement_credit_8472": {
        "kind": "write",
        "description": "Apply a statement credit to a customer's credit card account.",
        "params": [
            ("user_id", "string", True, "The user's unique identifier in the system"),
            ("credit_card_account_id", "string", True, "The credit card account ID to apply the credit to"),
            ("amount", "number", True, "The credit amount in dollars (e.g., 25.00 for a $25 credit)"),
            (
                "reason",
                "string",
                True,
                "Reason for the statement credit. Must be one of: "
                "'goodwill_adjustment', 'promotional_credit', "
                "'annual_fee_reversal', 'late_fee_reversal', "
                "'interest_charge_reversal', 'dispute_resolution', "
                "'price_match', 'retention_offer', 'error_correction', "
                "'other'",
            ),
        ],
    },
    "approve_credit_limit_increase_5847": {
        "kind": "write",
        "description": "Approve and apply a credit limit increase for a customer's credit card.",
        "params": [
            ("credit_card_account_id", "string", True, "The credit card account ID"),
            ("user_id", "string", True, "The customer's unique identifier in the system"),
            ("new_credit_limit", "integer", True, "The new total credit limit in dollars (e.g., 7500 for $7,500)"),
        ],
    },
    "change_debit_card_pin_6285": {
        "kind": "write",
        "description": "Change a debit card PIN when the customer knows their current PIN.",
        "params": [
            ("card_id", "string", True, "The debit card ID to change PIN for"),
            ("current_pin", "string", True, "The customer's current 4-digit PIN"),
            ("new_pin", "string", True, "The new 4-digit PIN chosen by the customer"),
        ],
    },
    "clear_debit_card_fraud_alert_4892": {
        "kind": "write",
        "description": "Clear a fraud alert or velocity block on a debit card.",
        "params": [
            ("card_id", "string", True, "The debit card ID to clear the alert/block for"),
            (
                "reason",
                "string",
                True,
                "Reason for clearing: 'customer_verified' (for fraud "
                "alerts after customer verification) or 'velocity_clear' "
                "(for velocity blocks after identity verification)",
            ),
        ],
    },
    "close_bank_account_7392": {
        "kind": "write",
        "description": "Close a customer's bank account (checking or savings).",
        "params": [
            ("account_id", "string", True, "The ID of the bank account to close"),
            ("reason", "string", False, "The reason for closing the account"),
            ("waive_early_closure_fee", "boolean", False, "Whether to waive early closure fees"),
        ],
    },
    "close_credit_card_account_7834": {
        "kind": "write",
        "description": "Close a customer's credit card account permanently.",
        "params": [
            ("credit_card_account_id", "string", True, "The credit card account ID to close"),
            ("user_id", "string", True, "The user's unique identifier in the system"),
        ],
    },
    "close_debit_card_4721": {
        "kind": "write",
        "description": "Close or cancel a debit card permanently.",
        "params": [
            ("card_id", "string", True, "The debit card ID to close"),
            (
                "reason",
                "string",
                True,
                "Reason for closing: lost, stolen, fraud_suspected, damaged, no_longer_needed, or account_closing",
            ),
        ],
    },
    "deny_credit_limit_increase_5848": {
        "kind": "write",
        "description": "Deny a credit limit increase request for a customer's credit card.",
        "params": [
            ("credit_card_account_id", "string", True, "The credit card account ID"),
            ("user_id", "string", True, "The customer's unique identifier in the system"),
            (
                "denial_reason",
                "string",
                True,
                "The reason for denying the request. Must be one of: "
                "'insufficient_account_age', 'cooldown_period_active', "
                "'pending_disputes', 'pending_replacement_card', "
                "'past_due_balance', 'high_utilization', "
                "'insufficient_payment_history', "
                "'requested_amount_exceeds_limit', 'other'",
            ),
        ],
    },
    "emergency_credit_bureau_incident_transfer_1114": {
        "kind": "generic",
        "description": "Emergency escalation tool for the 11/14 "
        "credit bureau reporting incident. Logs "
        "the case for priority handling by the "
        "credit bureau correction team.\n"
        "\n"
        "Returns:\n"
        "    Emergency escalation logged. Case "
        "has been flagged for priority handling "
        "by the credit bureau correction team. "
        "Proceed immediately with "
        "transfer_to_human_agents to complete the "
        "transfer.",
        "params": [],
    },
    "example_agent_tool_0000": {
        "kind": "write",
        "description": "An example agent discoverable tool placeholder.\n"
        "\n"
        "Returns:\n"
        "    Example tool executed successfully.",
        "params": [],
    },
    "file_credit_card_transaction_dispute_4829": {
        "kind": "write",
        "description": "File a formal dispute for a credit card transaction.",
        "params": [
            ("transaction_id", "string", True, "The unique identifier for the transaction being disputed"),
            (
                "card_action",
                "string",
                True,
                "Flag indicating the card's status. Must be one "
                "of: 'keep_active' (card remains active, dispute "
                "only), 'cancel_and_reissue' (card is being "
                "cancelled and replaced). This is for "
                "record-keeping only and does NOT order a "
                "replacement card.",
            ),
            ("card_last_4_digits", "string", True, "Last 4 digits of the credit card number"),
            ("full_name", "string", True, "Full legal name of the cardholder"),
            ("user_id", "string", True, "The user's unique identifier in the system"),
            ("phone", "string", True, "Contact phone number"),
            ("email", "string", True, "Contact email address"),
            ("address", "string", True, "Contact mailing address"),
            (
                "contacted_merchant",
                "boolean",
                True,
                "Whether the user attempted to resolve the issue with the merchant first",
            ),
            ("purchase_date", "string", True, "Date when the purchase was made, format MM/DD/YYYY"),
            ("issue_noticed_date", "string", True, "Date when the user noticed the issue, format MM/DD/YYYY"),
            (
                "dispute_reason",
                "string",
                True,
                "Reason for the dispute. Must be one of: "
                "'unauthorized_fraudulent_charge', "
                "'duplicate_charge', 'incorrect_amount', "
                "'goods_services_not_received', "
                "'goods_services_not_as_described', "
                "'canceled_subscription_still_charging', "
                "'refund_never_processed'",
            ),
            (
                "resolution_requested",
                "string",
                True,
                "Resolution being requested. Must be one of: 'full_refund', 'partial_refund'",
            ),
            ("eligible_for_provisional_credit", "boolean", True, "Whether the user is eligible for provisional credit"),
            (
                "partial_refund_amount",
                "number",
                False,
                "Amount requested for partial refund (required only if resolution_requested is 'partial_refund')",
            ),
        ],
    },
    "file_debit_card_transaction_dispute_6281": {
        "kind": "write",
        "description": "File a formal dispute for a debit card "
        "transaction under Regulation E. Debit card "
        "disputes affect actual bank funds and have "
        "different liability rules based on reporting "
        "timing.",
        "params": [
            ("transaction_id", "string", True, "The unique identifier for the transaction being disputed"),
            ("account_id", "string", True, "The checking account ID linked to the debit card"),
            ("card_id", "string", True, "The debit card ID"),
            ("user_id", "string", True, "The user's unique identifier in the system"),
            (
                "dispute_category",
                "string",
                True,
                "Category of the dispute. Must be one of: "
                "'unauthorized_transaction', "
                "'atm_cash_discrepancy', "
                "'atm_deposit_not_credited', 'duplicate_charge', "
                "'incorrect_amount', "
                "'goods_services_not_received', "
                "'recurring_charge_after_cancellation', "
                "'card_present_fraud', 'card_not_present_fraud'",
            ),
            ("transaction_date", "string", True, "Date when the transaction occurred, format MM/DD/YYYY"),
            ("discovery_date", "string", True, "Date when the user first noticed the issue, format MM/DD/YYYY"),
            ("disputed_amount", "number", True, "The dollar amount being disputed"),
            (
                "transaction_type",
                "string",
                True,
                "Type of transaction. Must be one of: "
                "'pin_purchase', 'signature_purchase', "
                "'online_purchase', 'atm_withdrawal', "
                "'atm_deposit', 'recurring_payment', "
                "'person_to_person'",
            ),
            (
                "card_in_possession",
                "boolean",
                True,
                "Whether the customer still has their physical debit card in their possession",
            ),
            (
                "pin_compromised",
                "string",
                True,
                "Whether the customer's PIN may have been "
                "compromised. Must be one of: 'yes_shared', "
                "'yes_observed', 'no', 'unknown'",
            ),
            (
                "contacted_merchant",
                "boolean",
                True,
                "Whether the user attempted to resolve the issue with the merchant first",
            ),
            (
                "police_report_filed",
                "boolean",
                True,
                "Whether a police report has been filed (recommended for fraud over $500)",
            ),
            (
                "written_statement_provided",
                "boolean",
                True,
                "Whether the customer has provided a written "
                "statement describing what happened (required for "
                "Reg E provisional credit)",
            ),
            (
                "provisional_credit_eligible",
                "boolean",
                True,
                "Whether the user is eligible for provisional credit based on Debit Card Provisional Credit Guidelines",
            ),
            (
                "customer_max_liability_amount",
                "number",
                True,
                "The maximum dollar amount the customer could be "
                "liable for based on Regulation E reporting timing "
                "rules and the disputed amount. Use -1 for "
                "unlimited liability.",
            ),
            (
                "card_action",
                "string",
                True,
                "Action to take on the card. Must be one of: "
                "'keep_active', 'freeze_pending_investigation', "
                "'close_and_reissue'",
            ),
        ],
    },
    "freeze_debit_card_3892": {
        "kind": "write",
        "description": "Temporarily freeze a debit card. The card can be unfrozen later.",
        "params": [("card_id", "string", True, "The debit card ID to freeze")],
    },
    "get_all_user_accounts_by_user_id_3847": {
        "kind": "read",
        "description": "Retrieve all accounts (checking, savings, credit cards) for a customer.",
        "params": [("user_id", "string", True, "The customer's unique identifier in the system")],
    },
    "get_atm_deposit_images_8473": {
        "kind": "read",
        "description": "Retrieve ATM deposit envelope/check images for a specific ATM deposit transaction.",
        "params": [("transaction_id", "string", True, "The transaction ID of the ATM deposit to retrieve images for")],
    },
    "get_bank_account_transactions_9173": {
        "kind": "read",
        "description": "Retrieve the transaction history for a bank "
        "account.\n"
        "\n"
        "Transactions are returned in reverse chronological "
        "order (most recent\n"
        "first).",
        "params": [("account_id", "string", True, "The bank account ID to retrieve transactions for")],
    },
    "get_closure_reason_history_8293": {
        "kind": "read",
        "description": "Retrieve the closure reason history for a specific credit card account.",
        "params": [
            (
                "credit_card_account_id",
                "string",
                True,
                "The credit card account ID to check for previous closure attempts",
            )
        ],
    },
    "get_credit_limit_increase_history_4829": {
        "kind": "read",
        "description": "Retrieve the credit limit increase request "
        "history for a specific credit card account. "
        "Returns all previous CLI requests including "
        "dates, amounts, and statuses.",
        "params": [("credit_card_account_id", "string", True, "The credit card account ID to check for CLI history")],
    },
    "get_debit_cards_by_account_id_7823": {
        "kind": "read",
        "description": "Retrieve all debit cards associated with a checking "
        "account. Returns card details including status, "
        "issue reason, and expiration date.",
        "params": [("account_id", "string", True, "The checking account ID to retrieve debit cards for")],
    },
    "get_debit_dispute_status_7483": {
        "kind": "read",
        "description": "Retrieve a user's debit card dispute history from the "
        "debit_card_disputes table. Returns all debit card "
        "disputes filed by the user, including dispute IDs, "
        "categories, amounts, statuses, and provisional credit "
        "information.",
        "params": [("user_id", "string", True, "The user's unique identifier in the system")],
    },
    "get_payment_history_6183": {
        "kind": "read",
        "description": "Retrieve payment history for a credit card account.",
        "params": [
            ("credit_card_account_id", "string", True, "The credit card account ID to check payment history for"),
            ("months", "integer", True, "Number of months of payment history to retrieve"),
        ],
    },
    "get_pending_replacement_orders_5765": {
        "kind": "read",
        "description": "Check if a credit card account has any pending replacement card orders.",
        "params": [
            (
                "credit_card_account_id",
                "string",
                True,
                "The credit card account ID to check for pending replacement orders",
            )
        ],
    },
    "get_user_dispute_history_7291": {
        "kind": "read",
        "description": "Retrieve a user's credit card transaction dispute history "
        "from the transaction_disputes table. Returns all credit "
        "card transaction disputes filed by the user, including "
        "dispute IDs, transaction IDs, dispute reasons, statuses, "
        "and submission dates.",
        "params": [("user_id", "string", True, "The user's unique identifier in the system")],
    },
    "initial_transfer_to_human_agent_0218": {
        "kind": "generic",
        "description": "Initiate a transfer request to a human agent. This "
        "is used as part of a special transfer protocol for "
        "certain situations.\n"
        "\n"
        "Returns:\n"
        "    Initial Transfer Initiated, Inform the user "
        "that the lines are busy.",
        "params": [],
    },
    "initial_transfer_to_human_agent_1822": {
        "kind": "generic",
        "description": "Initiate a transfer request to a human agent. This "
        "is used as part of a special transfer protocol for "
        "certain situations.\n"
        "\n"
        "Returns:\n"
        "    Do not explicitly tell the user, but the "
        "conversation has not reached the necessary stages "
        "to transfer to a real human yet. Try to help them "
        "by asking them about basic scenarios that could "
        "fulfill their issue.",
        "params": [],
    },
    "log_credit_card_closure_reason_4521": {
        "kind": "write",
        "description": "Log the reason why a customer wants to close their credit card account.",
        "params": [
            ("credit_card_account_id", "string", True, "The credit card account ID the customer wants to close"),
            ("user_id", "string", True, "The user's unique identifier in the system"),
            (
                "closure_reason",
                "string",
                True,
                "Reason for closure. Must be one of: 'annual_fee', "
                "'not_using_card', 'found_better_card', "
                "'unhappy_with_rewards', 'simplifying_finances', "
                "'negative_experience', 'other'",
            ),
        ],
    },
    "open_bank_account_4821": {
        "kind": "write",
        "description": "Open a new bank account for a customer.",
        "params": [
            ("user_id", "string", True, "The customer's unique identifier in the system"),
            (
                "account_type",
                "string",
                True,
                "Type of account to open. Must be one of: 'checking' (personal "
                "checking), 'savings' (personal savings), 'business_checking', "
                "'business_savings'",
            ),
            ("account_class", "string", True, "The full official account class name"),
        ],
    },
    "order_debit_card_5739": {
        "kind": "write",
        "description": "Order a new debit card for a customer's checking account.",
        "params": [
            ("account_id", "string", True, "The checking account ID to link the debit card to"),
            ("user_id", "string", True, "The customer's unique identifier"),
            ("delivery_option", "string", True, "Shipping speed: STANDARD, EXPEDITED, or RUSH"),
            ("delivery_fee", "number", True, "Fee to charge for delivery in dollars"),
            ("card_design", "string", True, "Card design: CLASSIC, PREMIUM, or CUSTOM"),
            ("design_fee", "number", True, "Fee to charge for card design in dollars"),
            ("shipping_address", "string", True, "Full shipping address for card delivery"),
            ("excess_replacement_fee", "number", False, "Fee for exceeding replacement limit, if applicable"),
        ],
    },
    "order_replacement_credit_card_7291": {
        "kind": "write",
        "description": "Order a replacement credit card for a customer. The "
        "old card will be automatically cancelled when the "
        "replacement is ordered.",
        "params": [
            ("credit_card_account_id", "string", True, "The credit card account ID for the card being replaced"),
            ("user_id", "string", True, "The user's unique identifier in the system"),
            ("shipping_address", "string", True, "Full shipping address where the new card should be sent"),
            (
                "reason",
                "string",
                True,
                "Reason for replacement. Must be one of: "
                "'fraud_suspected', 'lost', 'stolen', 'damaged', "
                "'expired', 'other'",
            ),
            (
                "expedited_shipping",
                "boolean",
                False,
                "Whether to use expedited shipping (2-3 business days instead of 7-10)",
            ),
        ],
    },
    "pay_credit_card_from_checking_9182": {
        "kind": "write",
        "description": "Pay off a credit card balance using funds from the "
        "customer's Rho-Bank checking account. This deducts "
        "the specified amount from the checking account and "
        "reduces the credit card balance by the same amount.",
        "params": [
            ("user_id", "string", True, "The customer's unique identifier in the system"),
            ("checking_account_id", "string", True, "The ID of the Rho-Bank checking account to debit funds from"),
            ("credit_card_account_id", "string", True, "The ID of the credit card account to apply the payment to"),
            ("amount", "number", True, "The payment amount in dollars. Must be a positive number."),
        ],
    },
    "request_temporary_debit_card_limit_increase_8374": {
        "kind": "write",
        "description": "Request a temporary 24-hour increase to a debit card's daily ATM or purchase limit.",
        "params": [
            ("card_id", "string", True, "The debit card ID to increase limits for"),
            (
                "limit_type",
                "string",
                True,
                "Type of limit to increase: 'atm' for daily ATM withdrawal limit, 'purchase' for daily purchase limit",
            ),
            ("new_limit", "integer", True, "The requested new temporary limit amount in dollars"),
        ],
    },
    "reset_debit_card_pin_6284": {
        "kind": "write",
        "description": "Reset a debit card PIN when the customer has forgotten it.",
        "params": [
            ("card_id", "string", True, "The debit card ID to reset PIN for"),
            ("last_4_digits", "string", True, "Last 4 digits of the card number (for verification)"),
            ("new_pin", "string", True, "The new 4-digit PIN chosen by the customer"),
        ],
    },
    "set_debit_card_recurring_block_7382": {
        "kind": "write",
        "description": "Block or unblock all recurring payments on a debit "
        "card. When blocked, all recurring/subscription "
        "charges will be declined. One-time purchases are "
        "not affected.",
        "params": [
            ("card_id", "string", True, "The debit card ID to update"),
            (
                "block_recurring",
                "boolean",
                True,
                "True to block all recurring payments, False to unblock/allow recurring payments",
            ),
        ],
    },
    "submit_credit_limit_increase_request_7392": {
        "kind": "write",
        "description": "Submit a credit limit increase request for a customer's credit card.",
        "params": [
            ("credit_card_account_id", "string", True, "The credit card account ID to request increase for"),
            ("user_id", "string", True, "The customer's unique identifier in the system"),
            (
                "requested_increase_amount",
                "integer",
                True,
                "The dollar amount by which to increase the credit limit (e.g., 2500 for $2,500)",
            ),
        ],
    },
    "submit_interest_discrepancy_report_7294": {
        "kind": "write",
        "description": "Submit a report for interest calculation "
        "discrepancies to the backend team for "
        "investigation. Use this when the interest "
        "credited to a customer's account does not match "
        "expected APY calculations.",
        "params": [
            ("account_id", "string", True, "The savings account ID with the discrepancy"),
            ("user_id", "string", True, "The customer's unique identifier"),
            (
                "expected_apy",
                "number",
                True,
                "The APY percentage the customer should have received (e.g., 2.775 for 2.775%)",
            ),
            ("actual_apy", "number", True, "The APY percentage that was actually applied (e.g., 2.5 for 2.5%)"),
            (
                "amount_difference",
                "number",
                True,
                "The dollar amount difference between expected and actual interest credited",
            ),
        ],
    },
    "transfer_funds_between_bank_accounts_7291": {
        "kind": "write",
        "description": "Transfer funds from one bank account to another.",
        "params": [
            ("source_account_id", "string", True, "The account ID to transfer funds from"),
            ("destination_account_id", "string", True, "The account ID to transfer funds to"),
            ("amount", "number", True, "The amount to transfer in USD"),
        ],
    },
    "unfreeze_debit_card_3893": {
        "kind": "write",
        "description": "Unfreeze a previously frozen debit card.",
        "params": [("card_id", "string", True, "The debit card ID to unfreeze")],
    },
    "update_transaction_rewards_3847": {
        "kind": "write",
        "description": "Update the rewards_earned field on a credit card transaction.",
        "params": [
            ("transaction_id", "string", True, "The unique identifier for the transaction to update"),
            ("new_rewards_earned", "string", True, "The corrected rewards value (e.g., '6300 points')"),
        ],
    },
}

#: The 4 discoverable user tools: kind, description and (name, required) of each parameter.
DISCOVERABLE_USER = {
    "deposit_check_3847": {
        "kind": "write",
        "description": "Deposit a check into a checking or savings account. The user takes a "
        "photo of the check and submits it through their mobile banking app.",
        "params": [("account_id", True), ("check_amount", True)],
    },
    "get_card_last_4_digits": {
        "kind": "read",
        "description": "Look up the last 4 digits of a credit card number.",
        "params": [("credit_card_account_id", True)],
    },
    "get_referral_link": {
        "kind": "write",
        "description": "Generate a referral link for a specific credit card to share with friends or family.",
        "params": [("user_id", True), ("card_name", True)],
    },
    "submit_cash_back_dispute_0589": {
        "kind": "write",
        "description": "Submit a cash back dispute for a specific transaction.",
        "params": [("user_id", True), ("transaction_id", True)],
    },
}
