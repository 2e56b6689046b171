"""Dates in synthesized requests are said as customers say them (the shipped tasks' "June 20th to
July 5th"), the year left out only when it is the bank's current one, and the teacher that makes
the SFT data takes them as given instead of asking for the ISO form again."""

from __future__ import annotations

import random
import re
from datetime import date, timedelta

from hypothesis import given
from hypothesis import strategies as st
from tau_env.synthesis.pipeline import run_tasks
from tau_env.synthesis.templates import spoken_date

from tau_env import ScriptedUser, TeacherAgent, evaluate, load_tasks

MONTHS = "January February March April May June July August September October November December".split()
SPOKEN = re.compile(
    r"^(?:(?P<m1>[A-Z][a-z]+) (?P<d1>\d{1,2})(?:st|nd|rd|th)?"
    r"|(?:the )?(?P<d2>\d{1,2})(?:st|nd|rd|th)?(?: of)? (?P<m2>[A-Z][a-z]+))"
    r"(?:,? (?P<y>\d{4}))?$"
)


@given(
    d=st.dates(min_value=date(2000, 1, 1), max_value=date(2099, 12, 31)),
    today=st.dates(min_value=date(2000, 1, 1), max_value=date(2099, 12, 31)),
    seed=st.integers(0, 2**32),
)
def test_a_spoken_date_names_the_same_day_and_its_year_unless_it_is_this_year(d, today, seed):
    text = spoken_date(d, today, random.Random(seed))
    m = SPOKEN.match(text)
    assert m, text
    month = MONTHS.index(m["m1"] or m["m2"]) + 1
    day = int(m["d1"] or m["d2"])
    assert (month, day) == (d.month, d.day), text
    if m["y"] is not None:
        assert int(m["y"]) == d.year
    else:
        assert d.year == today.year, text  # a year is left out only when it cannot be mistaken


def test_the_forms_vary_and_some_leave_the_year_out():
    today = date(2025, 6, 1)
    texts = {spoken_date(today + timedelta(days=9), today, random.Random(s)) for s in range(200)}
    assert len(texts) >= 4
    assert any("2025" not in t for t in texts) and any("2025" in t for t in texts)
    next_year = {spoken_date(date(2026, 1, 3), today, random.Random(s)) for s in range(200)}
    assert all("2026" in t for t in next_year)


def test_synthesized_travel_requests_say_dates_in_words_and_the_teacher_does_not_ask_for_them(tmp_path):
    run_tasks(tmp_path / "s", "harbor-bank-v0", n=150, batch=150, seed=3)
    travel = [t for t in load_tasks(tmp_path / "s" / "tasks.jsonl") if "start date" in t.scenario.facts]
    assert all(t.scenario.facts["start date"] not in " ".join(t.scenario.requests) for t in travel)  # never ISO
    # those whose request gives the dates (a clarification task's does not: its dates are asked for)
    tasks = [t for t in travel if t.scenario.facts["travel dates"] in " ".join(t.scenario.requests)]
    assert len(tasks) >= 5
    assert any(not re.search(r"\b20\d\d\b", " ".join(t.scenario.requests)) for t in tasks)
    results = evaluate("harbor-bank-v0", TeacherAgent, ScriptedUser, tasks=tasks, retrieval="grep", max_steps=40)
    for r in results.results:
        asked = " ".join(
            m.get("content") or "" for m in r.to_dict()["agent_view"]["messages"] if m["role"] == "assistant"
        )
        assert r.reward == 1.0, r.task_id
        assert "start date" not in asked and "end date" not in asked, r.task_id
