"""A run of the user's own loop on the dashboard: marked observed on Runs, its run page says what was observed and
what the lab would try next, and Explore never pools it with the lab's runs of the same settings."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from engine import api, watch
from tests._markup import seen


def _observed_run(db) -> str:
    """One real watched loop, two epochs of a sync DataLoader, stored in `db`: its run id."""
    watched = watch(DataLoader(TensorDataset(torch.randn(64, 4), torch.zeros(64, dtype=torch.long)), batch_size=16,
                               worker_init_fn=None, collate_fn=lambda b: torch.utils.data.default_collate(b)),
                    name="mine", db=db)
    for _ in range(2):
        for x, _y in watched:
            x.sum()
    watched.close()
    found = api.search_runs("mine")
    return found[found["source"] == "observed"]["run_id"].iloc[0]


def test_an_observed_run_is_marked_on_runs_and_its_page_says_what_to_try_next(seeded, open_page, no_problems):
    db, ids = seeded
    run_id = _observed_run(db)
    at = open_page("runs")
    no_problems(at)
    table = at.dataframe[0].value
    assert table.set_index("run_id").loc[run_id, "source"] == "observed"
    assert set(table[table["run_id"].isin(ids)]["source"].dropna()) == set()   # the lab's runs are not
    at = open_page("runs", run=run_id)
    no_problems(at)
    shown = " ".join(seen(i.value) for i in at.info)
    assert "Observed: your own training loop" in shown and "loader=sync" in shown
    assert "collate_fn" in " ".join(seen(c.value) for c in at.caption)   # what the lab cannot reproduce, named
    assert f"--baseline-run {run_id}" in at.code[0].value
    assert len(at.get("plotly_chart")) == 3   # its epochs, their breakdown, its per-step timeline


def test_explore_never_pools_observed_runs_with_the_labs(seeded):
    db, ids = seeded
    _observed_run(db)
    summary = api.explore_summary("loader", metric="epoch_s", db=db)
    sync = summary[summary["loader"] == "sync"]
    assert sorted(sync["source"]) == ["lab", "observed"]   # the same loader, two points
