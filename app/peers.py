"""The explorer's view of the training-free peers and reference rows, used by the Acceptance
and Speed pages: where each proposal came from (`pld`, `dflash-pld`: lookup vs drafter), and the peers
table (τ, tokens/s, ratio to AR, whether the greedy tokens equal AR's) from the benchmark detail
(`results/benchmark.json`)."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from draftlab.explore import formats as F
import plots as P
from draftlab import paths
from draftlab.bench.oracles import unmeasured_arms
from draftlab.explore.oracle_view import NOT_REPORTED

REFERENCE_ROWS = ("hf-generate", "hf-generate-pld", "dflash-ref")  # other people's code
TRAINING_FREE = ("pld", "hf-generate-pld")
NO_DRAFTER = ("pld",)  # prompt-lookup decoding alone: a round without an n-gram match proposes nothing
NO_MATCH = "no match"


def kind(arm: str) -> str:
    if arm == "ar":
        return "AR (this engine)"
    if arm in REFERENCE_ROWS:
        return "reference row" + (" (training-free)" if arm in TRAINING_FREE else "")
    return "training-free" if arm in TRAINING_FREE else ("trained + lookup" if arm.endswith("-pld") else "trained")


def peers_frame(detail: dict, tk: str) -> pd.DataFrame:
    """One row per arm at temperature key tk (t0 / t1): τ, tokens/s, ratio to AR, tokens-equal-AR flag (numbers;
    `peers_section` formats them)."""
    rows = []
    unmeasured = unmeasured_arms(detail)  # the Hugging Face rows: τ is no measurement
    for arm, e in (detail.get("summary") or {}).items():
        if e.get(f"tau_{tk}") is None:
            continue
        rows.append({"arm": arm, "kind": kind(arm), "tau": NOT_REPORTED if arm in unmeasured else e.get(f"tau_{tk}"),
                     "tokens_per_s": e.get(f"tokens_per_s_{tk}"),
                     "ratio to AR": e.get(f"speedup_{tk}"),
                     "greedy tokens = AR": e.get("tokens_equal_ar_t0") if tk == "t0" else None})
    return pd.DataFrame(rows, columns=["arm", "kind", "tau", "tokens_per_s", "ratio to AR", "greedy tokens = AR"])


def sources_frame(detail: dict, tk: str) -> pd.DataFrame:
    """(arm, source, rounds, share, accepted per round, accepted tokens) for arms with source records. The benchmark
    calls every round the lookup did not propose "drafter"; an arm without a drafter (`pld`, prompt-lookup decoding
    alone) had no match in those rounds, so they read "no match"."""
    rows = [{"arm": arm, "source": NO_MATCH if arm in NO_DRAFTER and src == "drafter" else src, **vals}
            for arm, e in (detail.get("summary") or {}).items()
            for src, vals in (e.get(f"sources_{tk}") or {}).items()]
    return pd.DataFrame(rows, columns=["arm", "source", "rounds", "share", "accepted_per_round", "accepted_tokens"])


def sources_section(detail: dict, tk: str) -> None:
    st.subheader("Proposal sources (prompt lookup vs drafter, or no match)")
    df = sources_frame(detail, tk)
    if df.empty:
        st.info("No lookup arm with recorded rounds at this temperature: add `pld` / `dflash-pld` to "
                "`benchmark.arms`, then `dvc repro benchmark`.")
        return
    st.dataframe(F.table(df), hide_index=True, width="stretch")
    st.caption("Per (stream, round): which source proposed the block (`dflash-pld`: the lookup when an n-gram of "
               "≥ pld.min_match tokens matched, else its drafter), how many proposals were accepted in those rounds, and "
               "the accepted tokens each source contributed (a spliced block: the lookup's slots first). `pld` is "
               "prompt-lookup decoding alone — it has no drafter: its rounds without a match (*no match*) propose "
               "nothing and commit the verifier's one token.")


def peers_section(detail: dict, tk: str) -> None:
    st.subheader("Training-free peers and reference rows")
    df = peers_frame(detail, tk)
    if df.empty:
        st.info(f"No summary in the benchmark detail (`{paths.BENCH_DETAIL}`): run `dvc repro benchmark`.")
        return
    shown = F.table(df.assign(tau=[v if isinstance(v, str) else F.fmt(v, "tau") for v in df["tau"]]))
    st.dataframe(shown, hide_index=True, width="stretch")
    ratio = df.dropna(subset=["ratio to AR"]).rename(columns={"ratio to AR": "ratio_to_ar"}).assign(
        suite="all suites", temperature=F.temp_label(tk))
    if not ratio.empty:
        st.altair_chart(P.bar_chart(ratio, "ratio_to_ar", f"Tokens/s ratio to AR (total time over suites, {F.temp_label(tk)})",
                                    rule=1.0, y_title="tokens/s ratio to AR"), width="stretch")
    st.caption("`hf-generate`: Hugging Face `generate`, greedy, batch 1 (`-pld`: with prompt_lookup_num_tokens); "
               "`dflash-ref`: the DFlash authors' `dflash_generate` with the pretrained drafter. Reference rows run "
               "at T=0 only, interleaved with the other arms on the same prompts. τ 'not reported': `generate` reports "
               "no rounds, so those rows have no acceptance figure.")
