"""Explore: the URL restores the view, tampered URLs fall back with a warning, share links round-trip,
bad view ids are an st.error; the DuckDB aggregation and the chart carry run ids."""

from __future__ import annotations

import re

import pandas as pd

from engine import api
from engine.store import connect, list_runs
from tests._markup import seen


def _groups(at) -> pd.DataFrame:
    """The chart's table of groups (the ranking's table comes first on the page)."""
    return next(d.value for d in at.dataframe if "run_ids" in d.value.columns)


def _widgets(at) -> dict:
    return {w.key: w.value for w in [*at.selectbox, *at.multiselect, *at.date_input] if w.key}


def test_query_params_restore_the_widgets(seeded, open_page, no_problems):
    db, ids = seeded
    at = open_page(
        "explore",
        metric="samples_per_s",
        x="workers",
        color="loader",
        facet="host",
        interval="quantiles",
        workload="tensor",
        tag="seed",
        date_from="2000-01-01",
    )
    no_problems(at)
    w = _widgets(at)
    assert (w["explore.metric"], w["explore.x"], w["explore.color"], w["explore.facet"]) == (
        "samples_per_s",
        "workers",
        "loader",
        "host",
    )
    assert w["explore.interval"] == "quantiles" and w["explore.workload"] == ["tensor"]
    assert w["explore.tag"] == ["seed"] and str(w["explore.date_from"]) == "2000-01-01"
    assert at.query_params["x"] == "workers"  # the URL keeps the state
    table = _groups(at)
    assert set(",".join(table["run_ids"]).split(",")) == set(ids)


def test_tampered_params_warn_and_fall_back_to_defaults(seeded, open_page):
    at = open_page(
        "explore",
        x="no_such_field",
        metric="'; DROP TABLE runs; --",
        workload="nope",
        bogus="1",
        date_from="yesterday",
        sel="../../etc/passwd",
    )
    assert not at.exception and not at.error
    text = " ".join(seen(w.value) for w in at.warning)
    for name in ("x=", "metric=", "workload=", "'bogus'", "date_from=", "sel="):
        assert name in text
    w = _widgets(at)
    assert (w["explore.x"], w["explore.metric"], w["explore.workload"]) == ("loader", "epoch_s", [])
    assert "bogus" not in at.query_params and "x" not in at.query_params


def test_share_link_round_trips_in_a_new_session(seeded, open_page, no_problems):
    db, ids = seeded
    at = open_page("explore", x="host", color="loader", workload="tensor", sel=ids[0])
    [button] = [b for b in at.button if b.label == "Copy share link"]
    button.click().run()
    no_problems(at)
    link = next(c.value for c in at.code if c.value.startswith("/explore?"))  # the link, not the fastest's code
    view_id = re.fullmatch(r"/explore\?view=([A-Za-z0-9_-]+)", link).group(1)
    assert api.load_view(view_id)["params"]["x"] == "host"

    fresh = open_page("explore", view=view_id)
    no_problems(fresh)
    assert _widgets(fresh) == _widgets(at)
    assert "view" not in fresh.query_params and fresh.query_params["color"] == "loader"
    assert ids[0] in " ".join(m.value for m in fresh.markdown)  # the selected run came back too
    pd.testing.assert_frame_equal(_groups(fresh), _groups(at))


def test_malformed_and_unknown_view_ids_are_errors(seeded, open_page):
    for bad in ("../../x", "'; DROP TABLE views; --", "zzzzzzzz"):
        at = open_page("explore", view=bad)
        assert not at.exception
        assert len(at.error) == 1 and "shared view" in at.error[0].value, bad
        assert at.dataframe, "the page still draws its default chart"


def test_selected_runs_link_to_their_details(seeded, open_page, no_problems):
    db, ids = seeded
    at = open_page("explore", sel=f"{ids[0]},{ids[1]}")
    no_problems(at)
    text = " ".join(m.value for m in at.markdown)
    assert f"/runs?run={ids[0]}" in text and f"/runs?compare={ids[0]},{ids[1]}" in text


def test_empty_filter_result_says_what_to_do(seeded, open_page):
    at = open_page("explore", date_to="2000-01-01")
    assert not at.exception and not at.error
    assert "No finished runs match" in at.info[0].value


def test_summary_aggregates_in_duckdb_with_a_ci_for_repeats(seeded):
    db, ids = seeded
    df = api.explore_summary("host", color="loader", filters={"tag": ["seed"]})
    repeats = df[df["host"] == "other-host"].iloc[0]
    assert repeats["n"] == 6
    assert repeats["lo"] <= repeats["median"] <= repeats["hi"] and repeats["lo"] < repeats["hi"]
    runs = list_runs(filters={"host": "other-host"})
    assert repeats["median"] == runs["epoch_s"].median()
    assert set(repeats["run_ids"].split(",")) == set(runs["run_id"])
    assert pd.isna(repeats["interval_note"])
    single = df[df["n"] == 1]
    assert not single.empty and single["lo"].isna().all() and single["hi"].isna().all()  # never [min, max]
    assert (single["interval_note"] == "no interval: 1 run").all()
    assert api.explore_summary("loader", filters={"workload": ["nope"]}).empty


def test_chart_points_carry_the_run_ids(seeded):
    df = api.explore_summary("loader", color="host")
    fig = api.metric_chart(df, x="loader", color="host")
    carried = {i for trace in fig.data for row in trace.customdata for i in row[0].split(",")}
    assert carried == {i for ids in df["run_ids"] for i in ids.split(",")}
    assert any(trace.error_y.array is not None and max(trace.error_y.array) > 0 for trace in fig.data)


def test_the_interval_is_the_exact_binomial_one_from_six_runs(seeded):
    """n = 6 takes ranks (1, 6); fewer runs get no interval, whatever the error-bar setting."""
    from engine.store import connect

    db, ids = seeded
    with connect(db, read_only=False) as conn:  # one of the six repeats gone: five is too few for 95 %
        conn.execute("UPDATE runs SET deleted = true WHERE run_id = ?", [ids[-1]])
    for interval in ("ci", "quantiles"):
        row = api.explore_summary("host", filters={"tag": ["seed"]}, interval=interval)
        row = row[row["host"] == "other-host"].iloc[0]
        assert row["n"] == 5 and pd.isna(row["lo"]) and pd.isna(row["hi"])
        assert row["interval_note"] == "no interval: 5 runs"
    with connect(db, read_only=False) as conn:
        conn.execute("UPDATE runs SET deleted = false")
    row = api.explore_summary("host", filters={"tag": ["seed"]}).set_index("host").loc["other-host"]
    times = sorted(list_runs(filters={"host": "other-host"})["epoch_s"])
    assert (row["lo"], row["hi"]) == (times[0], times[5])


def test_a_point_that_pools_configs_says_so_in_table_hover_and_banner(seeded, open_page, no_problems):
    """x = workload puts the sync and threads runs of `tensor` in one point: two configs, loader differs."""
    df = api.explore_summary("workload")
    row = df.set_index("workload").loc["tensor"]
    assert row["n_configs"] == 2 and "loader" in row["differs"].split(", ")
    assert "workers" in row["differs"] and "tag" not in row["differs"]
    fig = api.metric_chart(df, x="workload")
    hover = [str(v) for trace in fig.data for v in trace.customdata.ravel()]
    assert any(v.startswith("2, POOLED: differ in") and "loader" in v for v in hover)
    by_loader = api.metric_chart(api.explore_summary("loader"), x="loader")
    hover = [str(v) for trace in by_loader.data for v in trace.customdata.ravel()]
    assert "no interval: 1 run" in hover  # the threads run's point: no [min, max] posing as an interval

    at = open_page("explore", x="workload")
    no_problems(at)
    assert any("pool several distinct configs" in w.value and "loader" in w.value for w in at.warning)
    table = _groups(at)
    assert table.set_index("workload").loc["tensor", "n_configs"] == 2

    apart = open_page("explore", x="workload", color="loader", facet="workers")  # one config per point
    no_problems(apart)
    assert not any("pool several" in w.value for w in apart.warning)
    assert (_groups(apart)["n_configs"] == 1).all()


def test_explore_ranks_are_the_stats_modules_ranks():
    """One CI method everywhere: Explore's fast ranks for big groups equal engine.analysis.stats' exact ones."""
    from engine.store._explore_sql import _exact_ranks
    from engine.analysis.stats import median_ci_ranks

    for n in (*range(1, 60), 99, 100, 257, 400, 401, 777):
        assert _exact_ranks(n, 0.95) == median_ci_ranks(n, 0.95), n


def test_predicted_runs_get_a_predicted_vs_measured_chart_and_table_columns(seeded, open_page, no_problems):
    from engine.store import connect

    db, ids = seeded
    with connect(db, read_only=False) as conn:  # the real sync run predicted itself (own); say a repeat was prior
        conn.execute("UPDATE runs SET predicted_from = 'prior' WHERE run_id = ?", [ids[2]])
    runs = api.explore_predictions()
    assert set(runs["predicted_from"]) == {"own", "prior"} and (runs["predicted_epoch_s"] > 0).all()
    assert ids[1] not in set(runs["run_id"])  # the threads run had no bound: never predicted
    fig = api.prediction_chart(runs)
    assert {t.name for t in fig.data} >= {"own", "prior", "predicted = measured"}
    carried = {row[0] for t in fig.data if t.customdata is not None for row in t.customdata}
    assert carried == set(runs["run_id"])  # a point hands back its run

    at = open_page("explore")
    no_problems(at)
    assert [s.value for s in at.subheader if "Fastest" not in s.value] == ["Predicted vs measured"]
    assert len(at.get("plotly_chart")) == 2
    assert {"predicted_epoch_s", "predicted_from"} <= set(_groups(at).columns)


def test_no_predictions_no_prediction_chart_and_nothing_breaks(seeded, open_page, no_problems):
    from engine.store import connect

    db, _ = seeded
    with connect(db, read_only=False) as conn:  # runs stored before schema v5, or of modes the model lacks
        conn.execute("UPDATE runs SET predicted_epoch_s = NULL, predicted_from = NULL, predicted_limit = NULL")
    assert api.explore_predictions().empty
    assert api.prediction_chart(api.explore_predictions()).layout.title.text.startswith("Predicted")
    at = open_page("explore")
    no_problems(at)
    assert not [h for h in at.subheader if "Predicted" in h.value] and len(at.get("plotly_chart")) == 1
    assert at.dataframe


# ---------------------------------------------------------------------------- observed runs, hosts (issue 39)


def test_an_observed_run_never_breaks_explore_with_every_pipeline_in_view(seeded, open_page, no_problems):
    """`/explore?workload=&model=` with a real observed run stored: it read 'single positional indexer is
    out-of-bounds' (the observed run has no model of the lab's)."""
    from tests.app.test_observed import _observed_run  # noqa: PLC0415

    db, _ = seeded
    run_id = _observed_run(db)
    at = open_page("explore", workload="", model="")
    no_problems(at)
    heads = [seen(s.value) for s in at.subheader if s.value.startswith("Fastest for")]
    assert "Fastest for tensor + mlp" in heads
    assert any(h.endswith("+ your model") for h in heads), heads  # the observed run's pipeline, ranked on its own
    assert run_id in ",".join(_groups(at)["run_ids"])  # and charted


def test_one_machine_is_one_host_and_no_config_name_shows_a_hash(seeded, open_page, no_problems):
    """A real run at 1 intra-op thread beside runs at torch's default: one host (no 'several hosts' banner), the
    threads a setting in the config names, and no hash in them."""
    from engine.run.runner import launch  # noqa: PLC0415
    from tests.app.conftest import _tiny  # noqa: PLC0415

    db, ids = seeded
    one = launch(_tiny(threads=1, bound=False), db=db)
    assert one.status == "done", one.error
    api.bump_data_version(db=db)
    with connect(db, read_only=True) as conn:
        fps = {
            r[0]
            for r in conn.execute(
                "SELECT host_fingerprint FROM runs WHERE run_id IN (?, ?)", [one.run_id, ids[0]]
            ).fetchall()
        }
    assert len(fps) == 1
    at = open_page("explore", workload="tensor")
    no_problems(at)
    assert not [w for w in at.warning if "several hosts" in seen(w.value)]
    names = [seen(str(c)) for t in at.table for c in t.value["config"]]
    assert any("threads=1" in n for n in names) and any("threads=auto" in n for n in names), names
    page = " ".join(names + [seen(m.value) for m in at.markdown])
    assert not re.search(r"\b[0-9a-f]{12}\b", page), page
    assert "host_fingerprint" not in page


def test_the_advisor_answers_for_an_observed_pipeline_that_the_headline_ranks(seeded, open_page, no_problems):
    """The headline ranked an observed run's pipeline as '<workload> + your model' while the Advisor beside it, asked
    for that model, found no runs ('No finished single-model runs of ...'): one story, two answers."""
    from tests.app.test_observed import _observed_run  # noqa: PLC0415

    db, _ = seeded
    run_id = _observed_run(db)
    workload = api.get_run(run_id, db=db)["workload"]
    at = open_page("explore", workload=workload, model="")
    no_problems(at)
    heads = [seen(s.value) for s in at.subheader if s.value.startswith("Fastest for")]
    assert heads == [f"Fastest for {workload} + your model"], heads
    text = " ".join(seen(m.value) for m in at.markdown)
    assert "No finished" not in text, text
