"""A share link's text stays text, in a real chromium (issue 19, section 3): a payload in the URL, or a tag in the
store, produces no link element, no image, and no request to the address it names.

The payloads point at a local HTTP server that records every request it gets, so a fetch is caught whether the
page, an image, a prefetch or anything else made it.

    make test            # runs it (it is marked slow); screenshots of a failure go to test-artifacts/
"""

from __future__ import annotations

import http.server
import threading
import time
from urllib.parse import quote

import pytest

pytestmark = pytest.mark.slow

# every attribute of every element (HTML and SVG) that links to or loads the trap's address (Plotly keeps a label's
# source text in data-unformatted: that one only holds text)
_NAMING = """(base) => Array.from(document.querySelectorAll('*')).flatMap(el => Array.from(el.attributes)
    .filter(a => ['href', 'xlink:href', 'src', 'srcset', 'action', 'formaction', 'poster', 'data', 'style',
                  'background'].includes(a.name) && a.value.includes(base))
    .map(a => `<${el.tagName} ${a.name}="${a.value}">`))"""


@pytest.fixture(scope="module")
def trap():
    """(base URL, paths requested so far) of a local HTTP server that answers every GET and records it."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            hits.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", hits
    server.shutdown()
    server.server_close()


def _open(new_page, url: str, wait_for: str):
    """The page at url once `wait_for` shows and the network is quiet; and the URLs it requested."""
    page, requests = new_page(), []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(url)
    page.get_by_text(wait_for).first.wait_for(timeout=60_000)
    page.wait_for_load_state("networkidle")
    time.sleep(1.0)  # an image or a chart's late draw
    assert page.locator('[data-testid="stException"]').count() == 0, f"{url} raised an exception"
    return page, requests


def _assert_inert(page, requests: list[str], trap) -> None:
    base, hits = trap
    assert not page.evaluate(_NAMING, base), "an element names the payload's address"
    assert not [u for u in requests if u.startswith(base)], "the browser requested the payload's address"
    assert not hits, f"the payload's address was fetched: {hits}"


def _alert_text(page, text: str) -> str:
    """The visible text of the one alert (st.warning/st.error) that shows `text`, word joiners left out."""
    alert = page.locator('[data-testid="stAlert"]').filter(has_text=text)
    assert alert.count() == 1, page.locator('[data-testid="stAlert"]').all_inner_texts()
    assert alert.locator("strong, em, code, del, .katex, img, a").count() == 0, alert.inner_html()
    return alert.inner_text().replace("\u2060", "")


def _payloads(base: str) -> dict[str, str]:
    # URL warnings quote the first 60 characters: each payload fits whole
    return {
        "link": f"[Session expired - log in]({base}/login)",
        "image": f"![p]({base}/p.png)",
        "markup": "__import__ :red[red] $x^2$ <b>b</b> :smile:",
    }


@pytest.mark.parametrize("kind", ["link", "image", "markup"])
def test_a_url_value_on_explore_is_text(dashboard, new_page, trap, kind):
    base, _ = dashboard
    payload = _payloads(trap[0])[kind]
    page, requests = _open(new_page, f"{base}/explore?x={quote(payload)}", "Ignored URL parameter x=")
    assert payload in _alert_text(page, "Ignored URL parameter x=")
    _assert_inert(page, requests, trap)


@pytest.mark.parametrize("query", ["run={link}", "run={image}", "compare={image},{link}", "run={markup}"])
def test_run_ids_in_the_url_are_text(dashboard, new_page, trap, query):
    base, _ = dashboard
    payloads = _payloads(trap[0])
    params = query.format(**{k: quote(v, safe="") for k, v in payloads.items()})
    page, requests = _open(new_page, f"{base}/runs?{params}", "is not a run id")
    shown = _alert_text(page, "is not a run id")
    assert query.split("=")[1].split(",")[0].format(**payloads)[:60] in shown
    _assert_inert(page, requests, trap)


def test_a_query_in_the_url_charts_its_labels_as_text(dashboard, new_page, trap):
    """`/history?sql=` names the bar chart's labels and axis title, where Plotly would draw <a href> as a link."""
    base, _ = dashboard
    anchor = f"<a href='{trap[0]}/chart'>click</a>"
    sql = f"""SELECT '{anchor.replace("'", "''")}' AS "{anchor}", 1 AS n"""
    page, requests = _open(new_page, f"{base}/history?sql={quote(sql)}", "1 rows in")
    page.locator(".js-plotly-plot .xtick").first.wait_for(timeout=60_000)
    time.sleep(1.0)
    _assert_inert(page, requests, trap)
    assert page.locator(".js-plotly-plot").first.get_by_text(anchor).count() >= 1  # the label, as typed


def test_a_tag_on_the_explore_chart_is_text(dashboard, new_page, trap):
    """A tag is anyone's free text (`run --tag`, the Runs page): on the chart's axis it stays text."""
    from engine.config import RunConfig
    from engine.runlog import RunLog
    from engine.store import ingest_run

    base, db = dashboard
    anchor = f"<a href='{trap[0]}/tag'>t</a>"
    folder = db.parent / "runs" / "tagged"
    with RunLog(folder) as rl:
        rl.write("start", run_id="tagged", config=RunConfig(tag=anchor).to_dict(), host={})
        for ep in range(2):
            rl.write(
                "epoch",
                model_idx=0,
                rank=0,
                epoch=ep,
                warmup=ep == 0,
                wall_s=1.5,
                samples=10,
                ttfb_s=0.1,
                data_wait_s=0.1,
                h2d_s=0.0,
                compute_s=1.0,
                n_steps=1,
                steps=[[0, 0.1, 0.0, 1.0, 1.1]],
            )
        rl.write("end", status="done", error=None)
    ingest_run(folder, db=db)
    # its pipeline (RunConfig's default) named: Explore opens on the newest with two settings, in a shared store
    page, requests = _open(new_page, f"{base}/explore?x=tag&workload=tensor&model=mlp", "Explore")
    page.locator(".js-plotly-plot .xtick").first.wait_for(timeout=60_000)
    time.sleep(1.0)
    _assert_inert(page, requests, trap)
    assert page.locator(".js-plotly-plot").first.get_by_text(anchor).count() >= 1  # the tick label, as typed
