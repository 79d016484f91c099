"""Safe sharing: with LOADERLAB_TOKEN set, no page, data or share link is served without the token."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.app.conftest import APP

TOKEN = "s3cret-token-for-tests"


def _texts(at: AppTest) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [t.value for t in at.title]
    parts += [str(e.value) for e in at.error] + [str(i.value) for i in at.info]
    return "\n".join(map(str, parts))


@pytest.fixture
def shared(seeded, monkeypatch):
    monkeypatch.setenv("LOADERLAB_TOKEN", TOKEN)
    return seeded


@pytest.mark.parametrize(
    "page, params",
    [
        ("explore", {}),
        ("runs", {}),
        ("history", {}),
        ("launch", {}),
        ("explore", {"view": "abcd1234"}),
        ("runs", {"run": "x"}),
    ],
)
def test_without_the_token_nothing_is_served(shared, page, params):
    db, ids = shared
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params.update(params)
    at.run()
    assert not at.exception
    text = _texts(at)
    assert "Access token" in [t.label for t in at.text_input]
    assert ids[0] not in text and str(db) not in text  # no run ids, not even the store path
    assert not at.get("plotly_chart") and not at.dataframe
    # switching page without the token still shows only the prompt
    at.switch_page(f"pages/{page}.py").run()
    assert "Access token" in [t.label for t in at.text_input] and not at.dataframe


def test_wrong_token_is_refused(shared):
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["token"] = "nope"
    at.run()
    assert any("not right" in e.value for e in at.error)
    at.text_input(key="_loaderlab_token").input("also wrong").run()
    assert any("not right" in e.value for e in at.error) and not at.dataframe


def test_the_token_opens_every_page_and_leaves_the_url(shared, no_problems):
    db, ids = shared
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["token"] = TOKEN
    at.run()
    no_problems(at)
    assert "token" not in at.query_params
    for page in ("runs", "history"):
        at.switch_page(f"pages/{page}.py").run()
        no_problems(at)
    assert "Access token" not in [t.label for t in at.text_input]


def test_typed_token_works(shared, no_problems):
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.text_input(key="_loaderlab_token").input(TOKEN).run()
    no_problems(at)
    assert "Access token" not in [t.label for t in at.text_input]


def test_no_token_configured_means_no_prompt(seeded, no_problems):
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    no_problems(at)
    assert "Access token" not in [t.label for t in at.text_input]
