"""draftlab explorer: why a method wins (candidate grid, acceptance, speed, MLflow runs, DVC plots).

    streamlit run app/explorer.py --server.headless true --server.address 127.0.0.1     # or: make explore

It only reads stage outputs (metrics/, plots/, data/benchmark_rounds.parquet, models/target tokenizer) and
the MLflow store named by params.yaml; it never trains or writes. The root folder is the sidebar's
"root" field (default: $DRAFTLAB_ROOT, else the current directory).
"""
from __future__ import annotations

import sys
from pathlib import Path

import streamlit as st

APP = Path(__file__).resolve().parent
if str(APP) not in sys.path:
    sys.path.insert(0, str(APP))

import loaders as L  # noqa: E402
import pages  # noqa: E402

st.set_page_config(page_title="draftlab explorer", layout="wide")

with st.sidebar:
    st.title("draftlab")
    root_text = st.text_input("root (folder with metrics/, plots/, data/)", str(L.default_root()), key="root")
    page = st.radio("page", list(pages.PAGES), key="page")

root = Path(root_text).expanduser()
if not root.is_dir():
    st.info(f"The root `{root}` is not a folder: set the sidebar's root field or DRAFTLAB_ROOT to the repository.")
else:
    pages.PAGES[page](root.resolve())
