"""A run of the user's own loop on the dashboard: marked observed on Runs, its run page says what was observed and
what the lab would try next, and Explore never pools it with the lab's runs of the same settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from engine import api, watch
from engine.store import connect
from tests._markup import seen


def _observed_run(db) -> str:
    """One real watched loop, two epochs of a sync DataLoader, stored in `db`: its run id."""
    watched = watch(
        DataLoader(
            TensorDataset(torch.randn(64, 4), torch.zeros(64, dtype=torch.long)),
            batch_size=16,
            worker_init_fn=None,
            collate_fn=lambda b: torch.utils.data.default_collate(b),
        ),
        name="mine",
        db=db,
    )
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
    assert set(table[table["run_id"].isin(ids)]["source"]) == {"lab"}  # the lab's runs say so, never None
    assert table.set_index("run_id").loc[run_id, "model"] == "your model"
    at = open_page("runs", run=run_id)
    no_problems(at)
    shown = " ".join(seen(i.value) for i in at.info)
    assert "Observed: your own training loop" in shown and "loader=sync" in shown
    assert "collate_fn" in " ".join(seen(c.value) for c in at.caption)  # what the lab cannot reproduce, named
    steps = at.code[0].value
    assert "YOUR_MODULE" not in steps and "python -m engine tune -- python " in steps
    assert f"{Path(__file__).name}" in steps  # the script that made the loader: the command works as pasted
    assert len(at.get("plotly_chart")) == 3  # its epochs, their breakdown, its per-step timeline
    said = [
        seen(e.value) for kind in ("markdown", "caption", "info", "warning", "subheader") for e in getattr(at, kind)
    ]
    assert not [t for t in said if re.search(r"\bNone\b|\bnan\b", t)]  # issue 39: no None a user reads


def test_an_observed_runs_page_says_why_it_has_no_verdict_and_shows_a_stored_one(seeded, open_page):
    db, _ = seeded
    run_id = _observed_run(db)
    verdict = next(seen(m.value) for m in open_page("runs", run=run_id).markdown if "Verdict:" in seen(m.value))
    assert "Verdict: **none**: " in verdict and "lower bound" in verdict and "–" not in verdict.split(":")[1]
    with connect(db, read_only=False) as conn:  # what issue 38 stores for an observed run: the lab's columns
        conn.execute(
            "UPDATE runs SET verdict = 'data-bound', verdict_help = 'more workers', efficiency = 0.8 WHERE run_id = ?",
            [run_id],
        )
    api.bump_data_version()
    verdict = next(seen(m.value) for m in open_page("runs", run=run_id).markdown if "Verdict:" in seen(m.value))
    assert verdict.startswith("Verdict: **data-bound**: more workers")


def test_an_observed_runs_breakdown_stacks_every_measured_phase_to_the_epoch(seeded):
    """Issue 39: the bars left out the data wait (a NaN copy phase broke the stack): 0.45 s bars on 0.62 s epochs."""
    db, _ = seeded
    run_id = _observed_run(db)
    epochs = api.get_epochs(run_id)
    assert epochs["h2d_s"].isna().all() and epochs["data_wait_s"].notna().all()  # the shape issue 39 met
    fig = api.epoch_breakdown_chart(epochs)
    phases = {t.name: dict(zip(t.x, t.y)) for t in fig.data}
    assert "data wait" in phases and "copy to device" not in phases  # not measured: no segment, not a zero
    assert "copy to device: not measured" in fig.layout.title.text
    walls = epochs.groupby("epoch")["wall_s"].mean()
    for epoch, wall in walls.items():
        stacked = sum(p.get(epoch, 0.0) for p in phases.values())
        assert stacked == pytest.approx(wall, rel=1e-6), (epoch, phases)
        assert phases["data wait"][epoch] > 0


def test_explore_never_pools_observed_runs_with_the_labs(seeded):
    db, ids = seeded
    _observed_run(db)
    summary = api.explore_summary("loader", metric="epoch_s", db=db)
    sync = summary[summary["loader"] == "sync"]
    assert sorted(sync["source"]) == ["lab", "observed"]  # the same loader, two points
