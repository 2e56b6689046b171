"""The CPU recipe's extra SFT tasks from the shipped set (benchmarks/recipe_cpu.py: ``shipped_neighbours``):
single-request shipped tasks outside the held-out split that decontamination against it keeps."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tau_env.synthesis.decontam import decontaminate

import tau_env

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "recipe_cpu.py"
_spec = importlib.util.spec_from_file_location("recipe_cpu", SCRIPT)
recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipe)


def test_neighbours_are_single_requests_outside_the_split_that_leak_none_of_it():
    env = tau_env.make(recipe.ENV)
    try:
        domain = env.domain
        by_id = {t.id: t for t in domain.tasks}
        heldout = list(recipe.HELDOUT)
        ids, stats = recipe.shipped_neighbours(heldout)
        assert ids and not set(ids) & set(heldout)
        assert all(len(by_id[i].scenario.requests) == 1 for i in ids)
        assert stats["outside_heldout"] == len(by_id) - len(heldout) and stats["single_request_kept"] == len(ids)
        # what it keeps passes decontamination against the held-out tasks again, every detector
        held = [by_id[h] for h in heldout]
        again = decontaminate([by_id[i] for i in ids], held, domain=domain, against_domain=domain)
        assert again.removed == []
        # and what it leaves out of the single requests outside the split is what that decontamination removes
        single_rest = [t for t in domain.tasks if t.id not in heldout and len(t.scenario.requests) == 1]
        full = decontaminate(single_rest, held, domain=domain, against_domain=domain)
        assert ids == [t.id for t in full.kept]
        assert full.removed  # the shipped set shares customers and chains with its held-out tasks
    finally:
        env.close()


def test_a_smaller_split_keeps_its_other_tasks_for_training():
    ids_all, _ = recipe.shipped_neighbours(list(recipe.HELDOUT))
    ids_one, _ = recipe.shipped_neighbours(list(recipe.HELDOUT[:1]))
    assert set(ids_all) < set(ids_one)
    assert recipe.HELDOUT[0] not in ids_one and set(recipe.HELDOUT[1:]) & set(ids_one)


def test_a_negative_or_huge_copy_count_is_refused_before_any_work(capsys):
    import pytest

    for bad in ("-1", "101", "x"):
        with pytest.raises(SystemExit) as e:
            recipe.main(["--sft-shipped", bad, "--model", "/nonexistent"])
        assert e.value.code == 2
        assert "--sft-shipped" in capsys.readouterr().err
