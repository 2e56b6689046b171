"""The 14 base agent tools and the discovery mechanics (TOOLS.md sections 2 and 3)."""

from __future__ import annotations

import json
from typing import Any

from tau_env.domains.tau3_banking import interface
from tau_env.domains.tau3_banking.toolkit import (
    AGENT_TOOLS,
    CURRENT_TIME_TEXT,
    USER_TOOLS,
    H,
    Tau3Context,
    agent_tool,
    listing,
    query_listing,
    shown_name,
)

TRANSFER_REASONS = [
    "fraud_or_security_concern", "account_closure_request", "deceased_account_holder", "legal_or_regulatory_matter",
    "account_ownership_dispute", "complex_billing_dispute", "abusive_customer_behavior", "third_party_inquiry",
    "technical_system_error", "unconfirmed_external_communication",
    "customer_demands_after_unavailable_offer_refusal", "kb_search_unsuccessful_customer_requests_transfer",
    "specialized_department_required", "accessibility_or_special_needs", "customer_frustrated_demands_human",
    "supervisor_request_service_complaint", "customer_requests_human_no_specific_reason",
    "request_completed_customer_wants_human_followup", "other",
]  # fmt: skip


@agent_tool
def transfer_to_human_agents(self: Tau3Context, summary: str, reason: str = "other") -> str:
    if reason not in TRANSFER_REASONS:
        return f"Error: Invalid transfer reason '{reason}'. Must be one of: {', '.join(TRANSFER_REASONS)}"
    return f"Transfer successful (reason: {reason}). A human agent will assist you shortly."


@agent_tool
def get_current_time(self: Tau3Context) -> str:
    return CURRENT_TIME_TEXT


@agent_tool
def get_user_information_by_id(self: Tau3Context, user_id: str) -> str:
    return query_listing(self, "users", "user_id", user_id)


@agent_tool
def get_user_information_by_name(self: Tau3Context, customer_name: str) -> str:
    return query_listing(self, "users", "name", customer_name)


@agent_tool
def get_user_information_by_email(self: Tau3Context, email: str) -> str:
    return query_listing(self, "users", "email", email)


@agent_tool
def change_user_email(self: Tau3Context, user_id: str, new_email: str) -> str:
    if self.store.update("users", user_id, {"email": new_email}) is None:
        return f"Error: User with ID '{user_id}' not found."
    return f"Email updated successfully.\n  - User ID: {user_id}\n  - New Email: {new_email}"


@agent_tool
def get_referrals_by_user(self: Tau3Context, user_id: str) -> str:
    return query_listing(self, "referrals", "referrer_id", user_id)


@agent_tool
def get_credit_card_transactions_by_user(self: Tau3Context, user_id: str) -> str:
    return query_listing(self, "credit_card_transaction_history", "user_id", user_id)


@agent_tool
def get_credit_card_accounts_by_user(self: Tau3Context, user_id: str) -> str:
    return query_listing(self, "credit_card_accounts", "user_id", user_id)


@agent_tool
def log_verification(
    self: Tau3Context,
    name: str,
    user_id: str,
    address: str,
    email: str,
    phone_number: str,
    date_of_birth: str,
    time_verified: str,
) -> str:
    t = time_verified.replace(" ", "_").replace(":", "").replace("-", "")
    row = {
        "name": name,
        "user_id": user_id,
        "address": address,
        "email": email,
        "phone_number": phone_number,
        "date_of_birth": date_of_birth,
        "time_verified": time_verified,
    }
    if not self.store.insert("verification_history", f"{user_id}_{t}", row):
        return "Failed to log verification: Record may already exist."
    return f"Verification logged successfully.\n  - User: {name} (ID: {user_id})\n  - Verified at: {time_verified}"


def _agent_discoverable(name: str) -> bool:
    spec = AGENT_TOOLS.get(name)
    return spec is not None and spec.discoverable


def _user_discoverable(name: str) -> bool:
    spec = USER_TOOLS.get(name)
    return spec is not None and spec.discoverable


def unlock_text(name: str) -> str:
    """What unlocking ``name`` returns: its description and parameters."""
    spec = interface.DISCOVERABLE_AGENT[name]
    params = [f"  - {p}: {typ} ({'required' if req else 'optional'}) - {desc}" for p, typ, req, desc in spec["params"]]
    return (
        f"Tool unlocked: {name}\nDescription: {spec['description']}\n\nTool: {name}\nDescription: "
        f"{spec['description']}\nParameters:\n"
        + ("\n".join(params) if params else "  (no parameters)")
        + f"\n\nYou can now use this tool by calling `call_discoverable_agent_tool` with agent_tool_name='{name}' "
        "and the required arguments."
    )


@agent_tool
def give_discoverable_user_tool(self: Tau3Context, discoverable_tool_name: str, arguments: str = "{}") -> str:
    if not _user_discoverable(discoverable_tool_name):
        return f"Error: Unknown discoverable tool '{shown_name(discoverable_tool_name)}'."
    try:
        args = json.loads(arguments)
    except json.JSONDecodeError as e:
        return f"Error: Invalid JSON in arguments: {e}"
    allowed = [p for p, _ in interface.DISCOVERABLE_USER[discoverable_tool_name]["params"]]
    for key in args:
        if key not in allowed:
            return f"Error: Unexpected parameter: {key}"
    description = interface.DISCOVERABLE_USER[discoverable_tool_name]["description"]
    self.given[discoverable_tool_name] = {
        "arguments": args,
        "given_at": "2025-11-14T03:40:00",
        "description": description,
    }
    self.store.insert(
        "user_discoverable_tools",
        H(f"user_discoverable_tool:{discoverable_tool_name}", 16),
        {"tool_name": discoverable_tool_name, "status": "GIVEN"},
    )
    shown = json.dumps(args, indent=2) if args else "(no arguments)"
    return (
        f"Tool given to user: {discoverable_tool_name}\nDescription: {description}\nArguments: {shown}\n\n"
        f"The user can now execute this action by calling `call_discoverable_user_tool` with "
        f"discoverable_tool_name='{discoverable_tool_name}' and the same arguments."
    )


@agent_tool
def unlock_discoverable_agent_tool(self: Tau3Context, agent_tool_name: str) -> str:
    if not _agent_discoverable(agent_tool_name):
        return f"Error: Unknown agent tool '{shown_name(agent_tool_name)}'. This tool is not available."
    self.unlocked.add(agent_tool_name)
    return unlock_text(agent_tool_name)


@agent_tool
def call_discoverable_agent_tool(self: Tau3Context, agent_tool_name: str, arguments: str = "{}") -> str:
    if not _agent_discoverable(agent_tool_name):
        return f"Error: Unknown agent tool '{shown_name(agent_tool_name)}'. This tool is not available."
    if agent_tool_name not in self.unlocked:
        return (
            f"Error: Tool '{shown_name(agent_tool_name)}' has not been unlocked. You must first use "
            "`unlock_discoverable_agent_tool` to unlock this tool before calling it."
        )
    try:
        args = json.loads(arguments, parse_int=float)  # every integer literal becomes a float
    except json.JSONDecodeError as e:
        return f"Error: Invalid JSON in arguments: {e}"
    try:
        output = AGENT_TOOLS[agent_tool_name].fn(self, **args)
    except TypeError as e:
        return f"Error: Invalid arguments: {e}"
    if interface.DISCOVERABLE_AGENT[agent_tool_name]["kind"] == "write" or agent_tool_name in self.read_log_allowlist:
        self.store.insert(
            "agent_discoverable_tools",
            H(f"agent_discoverable_tool:{agent_tool_name}", 16),
            {"tool_name": agent_tool_name, "status": "CALLED"},
        )
    return output


@agent_tool
def list_discoverable_agent_tools(self: Tau3Context) -> str:
    return "Your called agent tools:\n" + listing(
        "agent_discoverable_tools", self.store.rows("agent_discoverable_tools")
    )


def parse_user_arguments(arguments: Any) -> Any:
    """Arguments of call_discoverable_user_tool: JSON with every integer turned into a float."""
    return json.loads(arguments, parse_int=float)
