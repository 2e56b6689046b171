"""The CPU recipe's decontamination settings (benchmarks/recipe_cpu.py: ``--decontam-against``,
``--decontam-detectors``): parsed strictly, recorded, and a run folder made with others refused."""

from __future__ import annotations

import argparse
import importlib.util
import json
from pathlib import Path

import pytest
from tau_env.synthesis.decontam import DETECTORS, decontaminate

import tau_env
from tau_env.error import ResultsFolderError

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "recipe_cpu.py"
_spec = importlib.util.spec_from_file_location("recipe_cpu_decontam", SCRIPT)
recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(recipe)


def test_detector_lists_parse_to_known_detectors_or_are_refused(capsys):
    assert recipe.detector_list("all") is None
    assert recipe.detector_list("instance") == list(recipe.INSTANCE_DETECTORS)
    assert set(recipe.INSTANCE_DETECTORS) < set(DETECTORS)
    assert {"chain_abstract", "state_change"}.isdisjoint(recipe.INSTANCE_DETECTORS)
    assert recipe.detector_list(" ngram, ids,ngram ") == ["ngram", "ids"]
    for bad in ("", "chain,", "chain,bogus", "ALL"):
        with pytest.raises(argparse.ArgumentTypeError, match="detectors"):
            recipe.detector_list(bad)
        with pytest.raises(SystemExit) as e:
            recipe.main(["--decontam-detectors", bad, "--model", "/nonexistent"])
        assert e.value.code == 2 and "--decontam-detectors" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        recipe.main(["--decontam-against", "everything", "--model", "/nonexistent"])
    assert e.value.code == 2


def test_a_run_folder_decontaminated_otherwise_is_refused(tmp_path):
    synth = tmp_path / "synth"
    held = recipe.decontaminate_run(synth, "heldout", list(recipe.INSTANCE_DETECTORS))
    assert held == {"task_ids": list(recipe.HELDOUT), "detectors": list(recipe.INSTANCE_DETECTORS)}
    assert recipe.decontaminate_run(synth, "shipped", None) == {"task_ids": None, "detectors": None}
    synth.mkdir()
    (synth / "decontamination.json").write_text(json.dumps({"against": recipe.ENV, "removed": []}))
    assert recipe.decontaminate_run(synth, "shipped", None)["task_ids"] is None  # a record of before passes
    with pytest.raises(ResultsFolderError, match="use another --out"):
        recipe.decontaminate_run(synth, "heldout", None)
    (synth / "decontamination.json").write_text(json.dumps({"against": recipe.ENV, "passes": [held], "removed": []}))
    assert recipe.decontaminate_run(synth, "heldout", list(recipe.INSTANCE_DETECTORS)) == held
    for against, detectors in (("shipped", None), ("heldout", None), ("heldout", ["chain", "ids"])):
        with pytest.raises(ResultsFolderError, match="--decontam-against"):
            recipe.decontaminate_run(synth, against, detectors)


def test_instance_level_neighbours_add_procedures_but_no_copy_of_a_heldout_task():
    heldout = list(recipe.HELDOUT)
    strict, _ = recipe.shipped_neighbours(heldout)
    loose, stats = recipe.shipped_neighbours(heldout, list(recipe.INSTANCE_DETECTORS))
    assert set(strict) <= set(loose) and not set(loose) & set(heldout)
    env = tau_env.make(recipe.ENV)
    try:
        domain = env.domain
        by_id = {t.id: t for t in domain.tasks}
        held = [by_id[h] for h in heldout]
        again = decontaminate(
            [by_id[i] for i in loose], held, domain=domain, against_domain=domain, detectors=recipe.INSTANCE_DETECTORS
        )
        assert again.removed == []  # no shared chain, customer or record, no near-copy wording
        assert stats["removed"] > 0  # the shipped set shares customers with its held-out tasks
    finally:
        env.close()
