"""``@tool(requires=..., produces=..., conflicts=...)``: metadata for task synthesis, never in the schema."""

from __future__ import annotations

import json

import pytest

from tau_env import ToolContext, tool
from tau_env.error import ToolDefinitionError


def _plain(ctx: ToolContext, card_id: str) -> str:
    """Lock a card.

    Args:
        card_id: The card's id.
    """
    return card_id


def test_metadata_is_stored_as_tuples():
    t = tool(kind="write", requires=["verify_identity"], produces=("card_id",), conflicts=("unlock_card",))(_plain)
    assert t.requires == ("verify_identity",)
    assert t.produces == ("card_id",)
    assert t.conflicts == ("unlock_card",)
    bare = tool(_plain)
    assert (bare.requires, bare.produces, bare.conflicts) == ((), (), ())


def test_metadata_never_reaches_the_schema():
    with_meta = tool(kind="write", requires=("verify_identity",), conflicts=("unlock_card",))(_plain)
    without = tool(kind="write")(_plain)
    assert with_meta.schema == without.schema
    text = json.dumps(with_meta.schema)
    assert "verify_identity" not in text and "unlock_card" not in text
    assert with_meta.describe() == without.describe()


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"requires": "verify_identity"}, r"requires must be a tuple .*got str 'verify_identity'.*write \("),
        ({"produces": ("card_id", 3)}, r"produces must hold non-empty strings.*got 3"),
        ({"conflicts": ("",)}, r"conflicts must hold non-empty strings"),
        ({"conflicts": {"a": 1}}, r"conflicts must be a tuple .*got dict"),
        ({"requires": None}, r"requires must be a tuple .*got NoneType"),
    ],
)
def test_bad_metadata_is_a_clear_definition_error(kwargs, expected):
    with pytest.raises(ToolDefinitionError, match=expected) as err:
        tool(**kwargs)(_plain)
    assert "'_plain'" in str(err.value)  # names the tool


def test_harbor_bank_metadata_names_real_tools_and_arguments():
    from tau_env.domains.harbor_bank.tools import TOOLS

    names = {t.name for t in TOOLS}
    params = {p for t in TOOLS for p in t.parameters["properties"]}
    annotated = [t for t in TOOLS if t.requires or t.produces or t.conflicts]
    assert len(annotated) >= 15
    for t in TOOLS:
        assert set(t.requires) <= names, t.name
        assert set(t.conflicts) <= names, t.name
        assert set(t.produces) <= params, t.name
    by = {t.name: t for t in TOOLS}
    assert "approve_wire_in_app" in by["release_wire_9152"].requires
    assert "card_id" in by["list_cards"].produces
    assert "transfer_funds" in by["close_account_8837"].conflicts
    # every write on a customer's records is guarded by verify_identity in the tool itself
    for name in ("transfer_funds", "lock_card", "refund_fee_4410", "open_account_2291", "initiate_wire_9150"):
        assert "verify_identity" in by[name].requires
    assert not by["deposit_check_in_app"].requires  # a user tool in the app: no agent-side verification
