"""Counts and ranges as a person writes them (ui/words.py), and the strings issue 39 found wrong that use them."""

from __future__ import annotations

import pytest

from ui.words import plural, span


@pytest.mark.parametrize(
    "n, noun, said",
    [
        (1, "run", "1 run"),
        (0, "run", "0 runs"),
        (2, "worker", "2 workers"),
        (1, "worker", "1 worker"),
        (3, "finished epoch", "3 finished epochs"),
        (2, "process", "2 processes"),
        (2, "batch", "2 batches"),
    ],
)
def test_plural_says_one_thing_in_the_singular_and_the_rest_in_the_plural(n, noun, said):
    assert plural(n, noun) == said


def test_a_range_whose_ends_read_the_same_collapses_to_one_value():
    assert span(20, 20, " s") == "20 s"  # issue 39: "20–20 s each"
    assert span(20.2, 19.8, " s", "{:.0f}") == "20 s"
    assert span(20, 40, " s") == "20–40 s"


def test_a_one_worker_runs_title_says_worker():
    from engine.advice.code import run_title

    title = run_title({"run_id": "r", "config": {"loader": "processes", "workers": 1}})
    assert "1 worker," in title + "," and "1 workers" not in title
