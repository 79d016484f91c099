"""History: SQL console results, auto chart and downloads; saved queries; bad and hostile SQL are an
st.error and leave the store file byte-identical."""

from __future__ import annotations

import pytest

from engine import api
from engine.store import BUILTIN_QUERIES, list_runs
from tests._markup import seen


def _run_sql(at, sql: str):
    at.text_area(key="history.editor").set_value(sql)
    return at.button(key="history.run").click().run()


def test_query_shows_rows_chart_and_downloads(seeded, open_page, no_problems):
    db, ids = seeded
    at = _run_sql(open_page("history"), "SELECT loader, count(*) AS runs FROM runs GROUP BY loader ORDER BY loader")
    no_problems(at)
    result = at.dataframe[-1].value
    assert result.to_dict("list") == {"loader": ["sync", "threads"], "runs": [len(ids) - 1, 1]}
    assert len(at.get("plotly_chart")) == 1  # categorical + numeric -> a bar chart
    assert {b.label for b in at.get("download_button")} == {"Download CSV", "Download Parquet"}
    assert at.query_params["sql"].startswith("SELECT loader")


def test_sql_in_the_url_is_restored_and_run(seeded, open_page, no_problems):
    at = open_page("history", sql="SELECT count(*) AS n FROM runs")
    no_problems(at)
    assert at.text_area(key="history.editor").value == "SELECT count(*) AS n FROM runs"
    assert at.dataframe[-1].value["n"].tolist() == [len(seeded[1])]


def test_builtin_queries_load_and_run(seeded, open_page, no_problems):
    at = open_page("history")
    names = at.selectbox(key="history.pick").options
    for name in ("median epoch time by loader", "data-bound runs", "best config per workload/model", "runs per host"):
        assert name in names
        at.selectbox(key="history.pick").set_value(name)
        at.button(key="history.load").click().run()
        no_problems(at)
        assert at.text_area(key="history.editor").value == BUILTIN_QUERIES[name]


def test_save_a_query(seeded, open_page, no_problems):
    at = open_page("history")
    at.text_area(key="history.editor").set_value("SELECT host, count(*) FROM runs GROUP BY host")
    at.text_input(key="history.name").set_value("my hosts")
    at.button(key="history.save").click().run()
    no_problems(at)
    saved = api.list_saved_queries().set_index("name")
    assert saved.loc["my hosts", "sql"] == "SELECT host, count(*) FROM runs GROUP BY host"
    assert not saved.loc["my hosts", "builtin"]
    at.text_input(key="history.name").set_value("data-bound runs")  # a built-in name is refused
    at.button(key="history.save").click().run()
    assert "built-in" in seen(at.error[0].value)


@pytest.mark.parametrize(
    "sql",
    [
        "SELEC nonsense FROM",
        "SELECT * FROM no_such_table",
        "DROP TABLE runs",
        "DELETE FROM runs",
        "COPY runs TO '/tmp/loaderlab-leak.csv'",
        "SELECT 1; SELECT 2",
        "SELECT 1; DROP TABLE runs",
        "ATTACH '/tmp/other.duckdb' AS o",
        "SELECT * FROM read_csv('/etc/passwd')",
        "INSTALL httpfs",
        "SET enable_external_access = true",
        "CREATE TABLE x AS SELECT 1",
    ],
)
def test_bad_and_hostile_sql_is_an_error_and_changes_nothing(seeded, open_page, file_hash, sql):
    db, ids = seeded
    at = open_page("history")
    before = file_hash(db)
    at = _run_sql(at, sql)
    assert not at.exception
    assert len(at.error) == 1 and at.error[0].value.startswith("Query not run:"), [e.value for e in at.error]
    assert file_hash(db) == before
    assert len(list_runs()) == len(ids)


def test_schema_browser_lists_tables(seeded, open_page):
    at = open_page("history")
    schema = at.dataframe[0].value
    assert {"runs", "epochs", "steps", "views", "saved_queries"} <= set(schema["table"])
    assert ("runs", "epoch_s") in set(zip(schema["table"], schema["column"]))


def test_wide_characters_come_back_and_never_hide_a_refused_name(seeded, open_page, file_hash, no_problems):
    """The History page goes through the same filter as `query`: DuckDB's token offsets are bytes, so characters
    of 2, 3 and 4 bytes before a name must neither break the page nor hide read_text from the filter."""
    db, _ = seeded
    at = _run_sql(open_page("history"), "SELECT 'é 中文 🚀' AS u")
    no_problems(at)
    assert at.dataframe[-1].value["u"].tolist() == ["é 中文 🚀"]
    before = file_hash(db)
    at = _run_sql(at, "SELECT 'é 中文 🚀' AS u, * FROM read_text('/etc/passwd')")
    assert not at.exception
    assert len(at.error) == 1 and seen(at.error[0].value).startswith("Query not run: read_text()"), at.error[0].value
    assert file_hash(db) == before


def _figure(at):
    import plotly.io

    return plotly.io.from_json(at.get("plotly_chart")[0].proto.spec)


def _values(v) -> list:
    """A trace's x or y as values: Plotly sends numbers as {"dtype", "bdata"} (base64) in the browser's JSON."""
    import base64

    import numpy as np

    if isinstance(v, dict) and "bdata" in v:
        return np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"]).tolist()
    return list(v)


def test_the_automatic_chart_puts_the_measure_on_y_and_never_sums_a_setting(seeded, open_page, no_problems):
    """Issue 39: "median epoch by loader and workers" drew workers summed by loader, one bar for 8 runs. The measure
    is y, the first category x, the setting (workers) the colour: one bar per row of the result."""
    at = _run_sql(
        open_page("history"),
        "SELECT loader, workers, median(epoch_s) AS median_epoch_s FROM runs GROUP BY ALL ORDER BY ALL",
    )
    no_problems(at)
    result, fig = at.dataframe[-1].value, _figure(at)
    assert (fig.layout.xaxis.title.text, fig.layout.yaxis.title.text) == ("loader", "median_epoch_s")
    bars = [(x, y, t.name) for t in fig.data for x, y in zip(_values(t.x), _values(t.y))]
    assert sorted(bars) == sorted(zip(result["loader"], result["median_epoch_s"], result["workers"].astype(str)))


@pytest.mark.parametrize(
    "rows, kind",
    [
        # the query on a 4 x 2 sweep: 8 rows, 8 bars, workers as the colour
        (
            [
                (lo, w, 0.1 * i + 0.2)
                for i, (lo, w) in enumerate(
                    (lo, w) for lo in ("sync", "prefetch", "threads", "processes") for w in (2, 4)
                )
            ],
            "bar",
        ),
        # one row per run, several per (loader, workers): each a point, never stacked into a sum
        ([("sync", 0, 1.0), ("sync", 0, 1.2), ("threads", 2, 0.5), ("threads", 2, 0.6)], "box"),
    ],
)
def test_auto_chart_draws_each_row_of_a_measure_by_its_settings(rows, kind):
    import pandas as pd

    df = pd.DataFrame(rows, columns=["loader", "workers", "epoch_s"])
    fig = api.auto_chart(df)
    assert {t.type for t in fig.data} == {kind}
    drawn = sorted((x, float(y)) for t in fig.data for x, y in zip(t.x, t.y))
    assert drawn == sorted(zip(df["loader"], df["epoch_s"]))  # every row once, at its own value: no sum
    assert sorted({t.name for t in fig.data}) == sorted(set(df["workers"].astype(str)))
    assert fig.layout.yaxis.title.text == "epoch_s"
