"""LoaderLab dashboard: `streamlit run app.py` (or `make run`). Routes to the pages in pages/; nothing else.

The store is $LOADERLAB_DB (default data/loaderlab.duckdb); the sidebar shows which one and how many runs it holds.
"""

import streamlit as st

from ui import warm
from ui.auth import require_token
from ui.sidebar import store_status

st.set_page_config(page_title="LoaderLab", page_icon=":material/speed:", layout="wide")
require_token()  # with $LOADERLAB_TOKEN set (make share), nothing below runs without it

explore = st.Page("pages/explore.py", title="Explore", url_path="explore", icon=":material/insights:")


def home() -> None:
    # NOTE: Streamlit serves its default page at "/" only, so "/explore?view=..." links would be
    # "page not found"; the root forwards to /explore instead, keeping the query.
    st.switch_page(explore, query_params=st.query_params.to_dict())


page = st.navigation(
    [
        st.Page(home, title="Home", url_path="home", default=True, visibility="hidden"),
        st.Page("pages/launch.py", title="Launch", url_path="launch", icon=":material/rocket_launch:"),
        explore,
        st.Page("pages/runs.py", title="Runs", url_path="runs", icon=":material/table_rows:"),
        st.Page("pages/history.py", title="History", url_path="history", icon=":material/history:"),
    ]
)

with st.sidebar:
    store_status()  # refreshes itself, so the run count keeps up with running jobs

page.run()
warm.start()  # once per server, after the page: the Launch form's registry (torch) is imported in the background
