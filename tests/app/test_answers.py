"""Explore answers (issue 28): the ranking is engine.analysis.stats' figures, the Advisor follows Explore's filters
and never calls a 1-run config best, the saved "best config" query agrees with the Advisor, the first visit says
what the demo ran and where, and numbers read as a person reads them (ui/text.py)."""

from __future__ import annotations

import datetime as dt
import math

import pandas as pd

from engine import api
from engine.analysis import stats
from engine.store import BUILTIN_QUERIES, connect
from tests._markup import seen


def test_the_ranking_is_the_stats_modules_medians_intervals_and_speedups(seeded):
    ranking = api.explore_ranking(filters={"workload": ["tensor"]})
    with connect(read_only=True) as conn:
        runs = conn.execute("SELECT loader, epoch_s FROM runs WHERE status = 'done' AND workload = 'tensor'").df()
    by = {k: g["epoch_s"].to_numpy() for k, g in runs.groupby("loader")}
    assert list(ranking["median"]) == sorted(ranking["median"])  # fastest first
    for _, row in ranking.iterrows():  # against sync: the default reference, whatever is slowest
        loader = row["config"].split(",")[0]
        med, lo, hi = stats.median_ci(by[loader])
        c = stats.compare(by["sync"], by[loader], margin=0.05)
        assert (row["median"], row["n"]) == (med, len(by[loader]))
        assert row["speedup"] == c["speedup"] and (math.isnan(lo) == math.isnan(row["lo"]))
        assert row["unproven"] == (len(by[loader]) < stats.MIN_FOR_CI)
    [sync] = [r for _, r in ranking.iterrows() if r["config"].split(",")[0] == "sync"]
    assert sync["call"] == "reference" and sync["speedup"] == 1


def test_a_chosen_reference_is_what_every_speedup_is_measured_against(seeded):
    first = api.explore_ranking()
    fastest = first.iloc[0]["config"]
    again = api.explore_ranking(reference=fastest)
    assert set(again["vs"]) == {fastest}
    assert again.set_index("config").loc[fastest, "call"] == "reference"


def test_the_page_names_the_fastest_and_the_advisor_says_the_same_config_in_words(seeded, open_page, no_problems):
    at = open_page("explore", workload="tensor")
    no_problems(at)
    ranking = api.explore_ranking(filters={"workload": ["tensor"]})
    top = ranking.iloc[0]
    sentence = [seen(m.value) for m in at.markdown if seen(m.value).startswith(top["config"])]
    assert sentence, [m.value for m in at.markdown]
    advice = [seen(m.value) for m in at.markdown if "done runs" in seen(m.value)]
    assert advice, "the advisor's words are Markdown text, not a code block"
    if top["unproven"]:  # the seeded threads config ran once
        assert f"is the fastest so far, unproven: {top['n']} run" in sentence[0]
        assert f"fastest so far, unproven: {top['n']} run" in advice[0] and "best:" not in advice[0]
    assert f"{top['config'].split(',')[0]}, " in advice[0].split("unproven")[-1] or "best: " in advice[0]
    assert "python -m engine" not in advice[0] and "--" not in advice[0]  # no CLI in the browser


def test_the_advisor_follows_the_filters_of_explore(seeded, open_page, no_problems):
    at = open_page("explore", workload="tensor", tag="seed")
    no_problems(at)
    assert at.selectbox(key="advisor.workload").options == ["tensor"]
    assert any("Runs tagged seed only" in seen(c.value) for c in at.caption)


def test_the_saved_best_config_query_agrees_with_the_advisor(seeded):
    best = api.run_query(BUILTIN_QUERIES["best config per workload/model"]).df
    row = best[(best["workload"] == "tensor") & (best["model"] == "mlp")].iloc[0]
    advice = api.advise("tensor", "mlp", host="any")
    assert (row["loader"], int(row["workers"])) == (advice.best["loader"], int(advice.best["workers"]))
    assert row["median_epoch_s"] == advice.table.iloc[0]["median"]  # the same statistic: the median over runs
    assert row["called"] == api.best_word(int(row["runs"]))


def test_the_first_visit_says_what_the_demo_ran_and_where(seeded, open_page, no_problems):
    db, _ = seeded
    with connect(db, read_only=False) as conn:
        conn.execute("UPDATE runs SET tag = 'demo'")
        n, host = conn.execute("SELECT count(*), any_value(host) FROM runs WHERE NOT deleted").fetchone()
    api.bump_data_version(db=db)
    at = open_page("explore")
    no_problems(at)
    [start] = [e for e in at.expander if e.label.startswith("Start here")]
    text = " ".join(seen(m.value) for m in start.markdown)
    assert f"The demo ran {n} runs of tensor + mlp (64 samples an epoch; loaders sync, threads) on " in text
    assert "The ranking for tensor + mlp below is its answer." in text and "so far" not in text
    assert " UTC" in text and "cores" in text
    assert [seen(m.value) for m in start.markdown if m.value.startswith("**")] == [
        "**1. Your pipeline**",
        "**2. Tune**",
        "**3. Paste the answer**",
    ]


def test_the_groups_table_gives_reasons_and_three_significant_figures(seeded, open_page, no_problems):
    at = open_page("explore", x="loader")
    no_problems(at)
    groups = next(d.value for d in at.dataframe if "run_ids" in d.value.columns)
    assert not groups.isna().any().any(), groups  # never None: a reason instead
    assert "no interval: 1 run" in set(groups["interval"])
    medians = groups.filter(like="median").iloc[:, 0]
    assert all(len(m.replace(".", "").replace(",", "").lstrip("0")) == 3 for m in medians), list(medians)


def test_numbers_and_timestamps_as_a_person_reads_them():
    from ui.text import readable, sig, when

    assert [sig(v) for v in (0.03, 0.0428, 17589.9255, 1.417472, 2)] == ["0.0300", "0.0428", "17,600", "1.42", "2.00"]
    assert sig(None, missing="not sampled: run shorter than 0.5 s") == "not sampled: run shorter than 0.5 s"
    assert when(dt.datetime(2026, 11, 25, 22, 13, 40, 123456)) == "2026-11-25 22:13:40 UTC"
    df = readable(
        pd.DataFrame({"t": [dt.datetime(2026, 1, 2, 3, 4, 5, 6), None], "x": [1.23456, None]}), {"x": "no bound"}
    )
    assert df.to_dict("list") == {"t": ["2026-01-02 03:04:05 UTC", "not measured"], "x": ["1.23", "no bound"]}


def test_a_one_point_chart_gets_a_readable_axis_and_worker_counts_are_categories():
    epochs = pd.DataFrame(
        {
            "epoch": [1],
            "wall_s": [1.417475],
            "model_idx": [0],
            "rank": [0],
            "warmup": [False],
            "samples_per_s": [361.0],
            "ttfb_s": [0.1],
        }
    )
    lo, hi = api.epoch_chart(epochs).layout.yaxis.range
    assert hi - lo > 0.2  # not 1.417472..1.417478
    summary = pd.DataFrame(
        {
            "loader": ["sync", "threads", "threads"],
            "workers": [0, 1, 2],
            "median": [1.0, 0.6, 0.5],
            "lo": [None, 0.5, 0.4],
            "hi": [None, 0.7, 0.6],
            "n": [1, 6, 6],
            "run_ids": ["a", "b", "c"],
        }
    )
    fig = api.metric_chart(summary, x="workers")
    assert fig.layout.xaxis.type == "category" and list(fig.layout.xaxis.categoryarray) == ["0", "1", "2"]
    dodged = api.metric_chart(summary, x="loader", color="workers")
    assert dodged.layout.scattermode == "group"  # two worker counts at one loader: side by side
    assert api.metric_chart(summary, x="loader", log_y=True).layout.yaxis.type == "log"


# ---------------------------------------------------------------------------- one winner (issue 39)


def _copies(db, run_id: str, n: int, scale: float, **fields) -> list[str]:
    """n copies of a stored run with epoch_s x scale (+-1 %) and `fields` set: repeats of another setting."""
    sets = ", ".join(f'? AS "{k}"' for k in fields)
    ids = [f"{run_id}-{'-'.join(f'{k}{v}' for k, v in fields.items())}-{i}" for i in range(n)]
    with connect(db, read_only=False) as conn:
        for i, new in enumerate(ids):
            conn.execute(
                f"INSERT INTO runs SELECT * REPLACE (? AS run_id, epoch_s * ? AS epoch_s"
                f"{', ' + sets if sets else ''}) FROM runs WHERE run_id = ?",
                [new, scale * (1 + (i - n / 2) / 100), *fields.values(), run_id],
            )
    api.bump_data_version(db=db)
    return ids


def _headline(at) -> list[str]:
    return [seen(m.value) for m in at.markdown if " is the " in seen(m.value) and " an epoch " in seen(m.value)]


def _advice_text(at) -> str:
    [advice] = [seen(m.value) for m in at.markdown if "done runs" in seen(m.value)]
    return advice


def test_the_headline_and_the_advisor_rank_the_same_runs_and_name_the_same_setting(seeded, open_page, no_problems):
    """The issue's store: processes at 1 intra-op thread beat everything, processes at torch's default threads lost.
    The headline and the Advisor both name processes with 1 thread, from the same runs."""
    db, ids = seeded
    _copies(db, ids[0], 7, 0.1, loader="processes", workers=2, threads=1)
    _copies(db, ids[0], 7, 1.6, loader="processes", workers=2)
    at = open_page("explore", workload="tensor")
    no_problems(at)
    ranking = api.explore_ranking(filters={"workload": ["tensor"]})
    advice = api.advise("tensor", "mlp", host="any")
    top = ranking.iloc[0]
    assert top["config"].startswith("processes") and "threads=1" in top["config"]
    assert set(top["run_ids"].split(",")) == set(advice.best_run_ids)  # the same runs
    assert advice.best["threads"] == 1 and advice.best["loader"] == "processes"
    [sentence] = _headline(at)
    assert sentence.startswith(top["config"])
    words = _advice_text(at)
    assert "processes, 2 workers" in words.split("best:")[1].split(":")[0] and "1 intra-op thread" in words
    assert "another machine or other thread settings" not in words


def test_the_advisor_takes_the_pipeline_the_headline_shows_under_multi_select_filters(seeded, open_page, no_problems):
    """Workload {pyloop, tensor} with tag seed: only tensor has seed runs, so the headline and the Advisor are
    tensor's (the Advisor used to take the first workload picked, with "No finished runs")."""
    db, ids = seeded
    _copies(db, ids[0], 3, 1.0, workload="pyloop", tag="other", tags="")
    at = open_page("explore", workload="pyloop,tensor", tag="seed")
    no_problems(at)
    assert at.multiselect(key="explore.workload").value == ["pyloop", "tensor"]
    assert at.selectbox(key="advisor.workload").value == "tensor"
    assert at.selectbox(key="advisor.workload").options == ["tensor"]
    assert "No finished" not in _advice_text(at)


def test_the_advisor_follows_explores_model_filter_including_all(seeded, open_page, no_problems):
    db, ids = seeded
    _copies(db, ids[0], 3, 1.0, model="cnn")
    at = open_page("explore", workload="tensor", model="cnn")
    no_problems(at)
    assert at.selectbox(key="advisor.model").value == "cnn"
    at.multiselect(key="explore.model").set_value(["mlp"]).run()
    assert at.selectbox(key="advisor.model").value == "mlp"
    at.multiselect(key="explore.model").set_value([]).run()  # "all": the headline's first pipeline
    no_problems(at)
    first = api.explore_ranking(filters={"workload": ["tensor"]}).iloc[0]["model"]
    assert at.selectbox(key="advisor.model").value == first
    assert set(at.selectbox(key="advisor.model").options) == {"cnn", "mlp"}
    assert [seen(s.value) for s in at.subheader if s.value.startswith("Fastest for")][
        0
    ] == f"Fastest for tensor + {first}"


def test_a_speedup_whose_interval_spans_one_reads_not_yet_distinguishable(seeded, open_page, no_problems):
    db, ids = seeded
    _copies(db, ids[0], 7, 0.99, loader="processes", workers=2)  # within the sync runs' spread
    at = open_page("explore", workload="tensor")
    no_problems(at)
    ranking = api.explore_ranking(filters={"workload": ["tensor"]})
    row = ranking[ranking["config"].str.startswith("processes")].iloc[0]
    assert row["speedup_lo"] <= 1 <= row["speedup_hi"] and not row["distinguishable"]
    assert row["call"].startswith("not yet distinguishable (7 and ")
    text = " ".join(_headline(at)) + " " + _advice_text(at)
    assert "no clear difference" not in text
    assert "not yet distinguishable" in text
    table = at.table[0].value
    [cells] = [[seen(str(v)) for v in r] for r in table.to_numpy() if seen(str(r[0])).startswith("processes")]
    assert cells[-1].startswith("not yet distinguishable (7 and ") and cells[-2].startswith("not yet distinguishable")
    assert not [c for c in cells if c.startswith("0.99×") or "faster" in c]  # no speedup, then "no difference"


def test_a_runs_page_names_the_measured_better_setting_and_flags_a_wide_spread(seeded, open_page, no_problems):
    """The run page's next step is a setting that was measured faster (with its intra-op threads), and steady epochs
    that differ 3.7x are said beside the figures."""
    db, ids = seeded
    _copies(db, ids[0], 7, 0.1, loader="processes", workers=2, threads=1)
    with connect(db, read_only=False) as conn:
        conn.execute(
            "INSERT INTO epochs BY NAME SELECT * REPLACE (epoch + 10 AS epoch, wall_s * 3.7 AS wall_s) "
            "FROM epochs WHERE run_id = ? AND NOT warmup",
            [ids[0]],
        )
    api.bump_data_version(db=db)
    at = open_page("runs", run=ids[0])
    no_problems(at)
    [nxt] = [seen(m.value) for m in at.markdown if seen(m.value).startswith("Next: ")]
    assert nxt.startswith("Next: Try processes, 2 workers") and "1 intra-op thread" in nxt, nxt
    assert any("Its steady epochs spread 3.7x" in seen(w.value) for w in at.warning)


# ---------------------------------------------------------------------------- the landing page (issue 39)


def _start_here(at) -> str:
    [start] = [e for e in at.expander if e.label.startswith("Start here")]
    return " ".join(seen(m.value) for m in start.markdown)


def test_while_the_demo_runs_the_landing_page_says_what_ran_and_what_is_still_queued(seeded, open_page, no_problems):
    """'The demo ran 5 runs ... The ranking below is its answer' while 30 runs waited in the queue was wrong."""
    from engine.jobs import submit_sweep  # noqa: PLC0415
    from engine.jobs.demo import demo_sweep  # noqa: PLC0415

    db, ids = seeded
    with connect(db, read_only=False) as conn:
        conn.execute("UPDATE runs SET tag = 'demo'")
    queued = len(submit_sweep(demo_sweep(n_samples=32, bound=False), db=db, origin="cli"))
    api.bump_data_version(db=db)
    at = open_page("explore")
    no_problems(at)
    text = _start_here(at)
    assert (
        f"The demo has finished {len(ids)} of its {len(ids) + queued} runs so far ({queued} still queued or "
        "running)" in text
    ), text
    assert "an answer so far, from the finished runs only" in text and "is its answer." not in text


def test_one_run_of_a_new_pipeline_does_not_replace_the_answer_in_view(seeded, open_page, no_problems):
    """After one pyloop run from the form, Explore opened on 'pyloop + mlp, the only config in view'."""
    db, ids = seeded
    with connect(db, read_only=False) as conn:
        conn.execute(
            "INSERT INTO runs SELECT * REPLACE ('one-pyloop' AS run_id, 'pyloop' AS workload, "
            "created_at + INTERVAL 1 HOUR AS created_at) FROM runs WHERE run_id = ?",
            [ids[0]],
        )
    api.bump_data_version(db=db)
    at = open_page("explore")
    no_problems(at)
    assert at.multiselect(key="explore.workload").value == ["tensor"]
    heads = [seen(h.value) for h in at.subheader if h.value.startswith("Fastest for")]
    assert heads == ["Fastest for tensor + mlp"]
    assert not [m for m in at.markdown if "only config in view" in seen(m.value)]
    assert "pyloop" in at.multiselect(key="explore.workload").options  # one click away, not hidden


def test_the_default_reference_is_sync_not_the_slowest_outlier(seeded, open_page, no_problems):
    db, ids = seeded
    _copies(db, ids[0], 2, 30.0, loader="threads", workers=8)  # one oversubscribed setting, far the slowest
    at = open_page("explore", workload="tensor")
    no_problems(at)
    ranking = api.explore_ranking(filters={"workload": ["tensor"]})
    assert set(ranking["vs"]) == {next(c for c in ranking["config"] if c.startswith("sync"))}
    [vs] = [s for s in at.selectbox if s.key == "explore.vs"]
    assert vs.format_func(vs.value).startswith("the default: sync")
    assert [c for c in _groups_cols(at) if c.startswith("speedup over sync")]


def _groups_cols(at) -> list[str]:
    return [str(c) for t in at.table for c in t.value.columns]


def test_your_setup_typed_in_the_advisor_is_explores_reference_too(seeded, open_page, no_problems):
    """The default reference is the user's own setup when they gave one and it was measured, else sync."""
    at = open_page("explore", workload="tensor")
    at.text_input(key="advisor.baseline").input("loader=threads,workers=2").run()
    at.run()  # Explore's ranking sits above the Advisor: the typed setup applies from the next rerun
    no_problems(at)
    [vs] = [s for s in at.selectbox if s.key == "explore.vs"]
    assert vs.format_func(vs.value) == "your setup: threads, workers=2"
    assert [c for t in at.table for c in t.value.columns if seen(str(c)) == "speedup over threads, workers=2"]
    at.text_input(key="advisor.baseline").input("loader=processes,workers=4").run()
    at.run()  # not measured: back to sync
    [vs] = [s for s in at.selectbox if s.key == "explore.vs"]
    assert vs.format_func(vs.value).startswith("the default: sync")
