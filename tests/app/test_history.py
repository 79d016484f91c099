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


@pytest.mark.parametrize("sql", [
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
])
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
