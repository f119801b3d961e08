"""What the explorer (app/, Streamlit) reads and shows, as library code without Streamlit: the stage outputs a run
folder holds (`loaders`), where each came from and when it was made (`provenance`), the decoded
tokens (`tokens`), the candidate grid rendered as HTML (`grid`), the oracle figures'
views (`oracle_view`) and one number format (`formats`). app/ holds the pages and plots over them
(and `runs_data`, which reads MLflow: only draftlab.tracking may import it in the library)."""
