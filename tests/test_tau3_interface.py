"""The tau3 interface texts are package data: interface.json loads to the structure the tools rely on.

The byte-exact comparison with the benchmark is the golden suites' job (test_tau3_golden.py,
test_tau3_pack.py: unlock/give texts and schemas); these tests need no data folder, so they also
guard the texts where the benchmark's copy is absent.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from fnmatch import fnmatch
from importlib.resources import files
from pathlib import Path

import pytest

from tau_env.domains.tau3_banking import interface
from tau_env.domains.tau3_banking.toolkit import AGENT_TOOLS, USER_TOOLS

NAMES = ["AGENT_SCHEMAS", "USER_SCHEMAS", "BASE_KINDS", "USER_KINDS", "DISCOVERABLE_AGENT", "DISCOVERABLE_USER"]
ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "tau_env.domains.tau3_banking"


def raw() -> dict:
    return json.loads(files(PACKAGE).joinpath("interface.json").read_text(encoding="utf-8"))


def test_the_json_file_holds_the_credit_and_exactly_the_module_names():
    data = raw()
    assert list(data) == ["_source", *NAMES]
    assert "sierra-research/tau2-bench" in data["_source"] and "MIT" in data["_source"]
    assert "MIT" in interface.__doc__ and "interface.json" in interface.__doc__
    assert interface.__all__ == NAMES


def test_the_module_exposes_the_file_values_with_parameter_rows_as_tuples():
    data = raw()
    for name in ["AGENT_SCHEMAS", "USER_SCHEMAS", "BASE_KINDS", "USER_KINDS"]:
        assert getattr(interface, name) == data[name]
    for name in ["DISCOVERABLE_AGENT", "DISCOVERABLE_USER"]:
        value = getattr(interface, name)
        assert list(value) == list(data[name])  # the benchmark's order
        for tool, spec in value.items():
            assert all(type(row) is tuple for row in spec["params"]), tool
            assert [list(row) for row in spec["params"]] == data[name][tool]["params"]


def test_the_texts_are_pinned():
    # A digest of every value, key order included: any edit to a text the benchmark shows a model
    # must be deliberate (and checked against the benchmark with the golden suites).
    blob = json.dumps({n: getattr(interface, n) for n in NAMES}, ensure_ascii=False)
    digest = hashlib.sha256(blob.encode()).hexdigest()
    assert digest == "0f2705d7a590df225b38323626d9a3810f430504f0eeeaa40d3f1b02804c7fcb"


def test_counts_and_kinds():
    assert (len(interface.AGENT_SCHEMAS), len(interface.USER_SCHEMAS)) == (14, 6)
    assert (len(interface.DISCOVERABLE_AGENT), len(interface.DISCOVERABLE_USER)) == (44, 4)
    names = [s["function"]["name"] for s in interface.AGENT_SCHEMAS]
    user_names = [s["function"]["name"] for s in interface.USER_SCHEMAS]
    assert len(set(names)) == 14 and set(names) == set(interface.BASE_KINDS)
    assert len(set(user_names)) == 6 and set(user_names) == set(interface.USER_KINDS)
    assert set(interface.BASE_KINDS.values()) | set(interface.USER_KINDS.values()) <= {"read", "write", "generic"}
    every = [*names, *user_names, *interface.DISCOVERABLE_AGENT, *interface.DISCOVERABLE_USER]
    assert len(every) == len(set(every)), "a tool name is used twice"


BASE_SCHEMAS = [*interface.AGENT_SCHEMAS, *interface.USER_SCHEMAS]


@pytest.mark.parametrize("schema", BASE_SCHEMAS, ids=[s["function"]["name"] for s in BASE_SCHEMAS])
def test_every_base_schema_is_an_openai_function_schema(schema):
    assert schema["type"] == "function" and set(schema["function"]) == {"name", "description", "parameters"}
    assert isinstance(schema["function"]["description"], str) and schema["function"]["description"].strip()
    params = schema["function"]["parameters"]
    assert params["type"] == "object" and isinstance(params["properties"], dict)
    assert set(params.get("required", [])) <= set(params["properties"])
    for prop in params["properties"].values():
        assert isinstance(prop.get("description"), str) and prop["description"].strip()


@pytest.mark.parametrize("name", list(interface.DISCOVERABLE_AGENT))
def test_every_discoverable_agent_tool_has_a_kind_description_and_typed_params(name):
    spec = interface.DISCOVERABLE_AGENT[name]
    assert set(spec) == {"kind", "description", "params"} and spec["kind"] in {"read", "write", "generic"}
    assert isinstance(spec["description"], str) and spec["description"].strip()
    assert isinstance(spec["params"], list)
    for row in spec["params"]:
        p, typ, required, desc = row
        assert isinstance(p, str) and p.isidentifier()
        assert typ in {"string", "number", "integer", "boolean"}
        assert type(required) is bool and isinstance(desc, str)
    assert len({row[0] for row in spec["params"]}) == len(spec["params"])
    assert name in AGENT_TOOLS  # every described tool is implemented


@pytest.mark.parametrize("name", list(interface.DISCOVERABLE_USER))
def test_every_discoverable_user_tool_has_a_kind_description_and_params(name):
    spec = interface.DISCOVERABLE_USER[name]
    assert set(spec) == {"kind", "description", "params"} and spec["kind"] in {"read", "write"}
    assert isinstance(spec["description"], str) and spec["description"].strip()
    assert spec["params"] and all(isinstance(p, str) and type(req) is bool for p, req in spec["params"])
    assert name in USER_TOOLS


def test_the_json_file_is_package_data():
    """Wheels and installs ship interface.json only if pyproject lists it for the package."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"].get(PACKAGE, [])
    assert any(fnmatch("interface.json", pat) for pat in patterns), patterns
