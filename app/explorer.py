"""draftlab explorer: why a method wins (candidate grid, acceptance, speed, MLflow runs, DVC plots).

    streamlit run app/explorer.py --server.headless true --server.address 127.0.0.1     # or: make explore

It only reads stage outputs (results/, plots/, data/benchmark_rounds.parquet, models/target tokenizer), the
MLflow store named by params.yaml and, for the Compare page and the data's revision, git / `dvc exp show`;
it never trains or writes. The root folder is the sidebar's "root" field (default: $DRAFTLAB_ROOT, else the
current directory); `?page=<name>` in the address opens a page; "Reload data" re-reads every file.
"""
from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

APP = Path(__file__).resolve().parent
if str(APP) not in sys.path:
    sys.path.insert(0, str(APP))

import cached  # noqa: E402
from draftlab.explore import loaders as L  # noqa: E402
import pages  # noqa: E402

st.set_page_config(page_title="draftlab explorer", layout="wide")

# Deep links: ?page=Acceptance opens a page; these widget keys can be preset the same way on a session's first
# run (e.g. ?page=Candidate+grid&grid_arm=dcoco&grid_temp=0); a value a widget does not offer is ignored.
DEEP_LINK_KEYS = {"grid_arm": str, "grid_suite": str, "grid_temp": float, "grid_prompt": str, "grid_round": int,
                  "grid_heat_value": str,
                  "acc_temp": str, "speed_temp": str, "speed_conc_t": str, "plots_temp": str,
                  "cmp_A_kind": str, "cmp_B_kind": str, "cmp_A_folder": str, "cmp_B_folder": str, "cmp_A_rev": str,
                  "cmp_B_rev": str, "cmp_temp": str, "cmp_metric": str}
names = list(pages.PAGES)
if "page" not in st.session_state:
    if st.query_params.get("page") in names:
        st.session_state["page"] = st.query_params["page"]
    for key, conv in DEEP_LINK_KEYS.items():
        if key in st.query_params:
            try:
                st.session_state[key] = conv(st.query_params[key])
            except ValueError:
                pass
with st.sidebar:
    st.title("draftlab")
    root_text = st.text_input("root (folder with results/, plots/, data/)", str(L.default_root()), key="root")
    page = st.radio("page", names, key="page")
    cached.reload_button()
if st.query_params.get("page") != page:
    st.query_params["page"] = page  # the address names the page (shareable; the screenshot tool opens pages so)

root = Path(root_text).expanduser()
if not root.is_dir():
    st.info(f"The root `{root}` is not a folder: set the sidebar's root field or DRAFTLAB_ROOT to the repository.")
else:
    pages.PAGES[page](root.resolve())
