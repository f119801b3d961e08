"""`draftlab decode`'s body (draftlab.cli checks the options and the arm first): one prompt through one arm of the arm
table on the pipeline's outputs — the target as the benchmark runs it (its measured linear plan, its compiled steps),
the arm built by the benchmark's own `build_arms`, the engine's round records — printed as text with each token's fate
marked (draftlab.bench.marks), then τ and tokens/s. Ctrl-C prints the text decoded so far."""
from __future__ import annotations

import os
import sys

from draftlab import paths


def decode(a, p, echo: str) -> int:
    """Decode `a.prompt` with arm `a.arm` under params `p` (`a`: the command's options: params, arm, prompt,
    max_new_tokens, temperature, seed, color, show_tree, overrides; `echo`: the params line printed when overrides were
    given) -> exit code."""
    from draftlab.omp import configure

    configure(a.params, decoding=True)  # the engine's wait policy (engine.omp_wait_policy), before torch loads
    import time

    import torch
    from transformers.utils import logging as hf_logging

    from draftlab.data.templates import encode_prompt
    from draftlab.decoding.api import DrafterProposal
    from draftlab.decoding.verify import SamplingParams
    from draftlab.pipeline import layout
    from draftlab.pipeline.benchmark import build_arms, drafter_specs
    from draftlab.kernels.linear import install
    from draftlab.verifier.load import load_target

    configure(a.params, p.engine.threads or p.profile.threads)
    hf_logging.disable_progress_bar()  # the output is the decoded text, not loading bars
    t = p.target
    target = load_target(paths.TARGET, t.device, t.dtype, t.attn_implementation)
    install(target.model, t.linear)  # as the benchmark runs it
    target.compile_steps(p.engine.resolved(target.device.type), max_graphs=p.engine.max_graphs)
    tok = target.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else (target.eos_token_ids or [0])[0]
    arm = build_arms(target, p.benchmark, layout.checkpoints(p.benchmark.drafter), pad, p.pld, p.drafter.design().block_size,
                     [a.arm], p.seeded.verify, drafter_specs(p), p.engine)[a.arm]
    ids, _ = encode_prompt(tok, a.prompt, p.data.thinking, p.data.max_prompt_tokens)
    sp = SamplingParams(a.temperature, p.benchmark.top_p, p.benchmark.top_k)
    gen = torch.Generator(device=target.device).manual_seed(a.seed)
    t0 = time.perf_counter()
    if a.overrides:  # echoed once everything loaded (an error stays one line)
        print(f"params: {echo}", file=sys.stderr)
    if sys.stderr.isatty() or os.environ.get("DRAFTLAB_DECODE_PROGRESS"):
        print(f"decoding up to {a.max_new_tokens} tokens with {a.arm} (Ctrl-C stops and prints the text so far)",
              file=sys.stderr, flush=True)
    try:
        with torch.no_grad():
            res = arm.generate([ids], a.max_new_tokens, sp, target.eos_token_ids, gen, record_topk=1)
    except KeyboardInterrupt as e:  # Ctrl-C: the text decoded so far, then the one line (main)
        part = (getattr(e, "partial", None) or [[]])[0]
        print(tok.decode(part, skip_special_tokens=True) if part else "(nothing decoded yet)", flush=True)
        print(f"[{len(part)} tokens decoded in {time.perf_counter() - t0:.1f} s before the interrupt]", flush=True)
        raise
    wall = time.perf_counter() - t0
    corrects = arm.drafter is not None and not isinstance(getattr(arm, "proposer", None), DrafterProposal)
    color = a.color == "always" or (a.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
    dec = lambda x: tok.decode(x, skip_special_tokens=True)  # noqa: E731
    acc = res.accepted[0] if res.accepted else []
    tau = sum(x + 1 for x in acc) / len(acc) if acc else 1.0
    n = len(res.tokens[0])
    from draftlab.bench.marks import legend, mark_tokens, render, seed_counts

    seeds = seed_counts(res)
    tree = any("tree_rejected" in r.extras for r in res.records)
    print(legend(color, seeds is not None, tree, a.show_tree) if arm.speculative else
          "legend: plain = the target's own token (AR)")
    print(render(mark_tokens(res, corrects, show_tree=a.show_tree), dec, color))
    print(f"arm {a.arm} · T={a.temperature:g} · {n} tokens in {len(acc) or n} {'rounds' if acc else 'steps'} · "
          f"τ {tau:.2f} · {n / max(res.wall_s, 1e-9):.1f} tokens/s ({wall:.2f} s incl. prefill "
          f"{res.prefill_s:.2f} s) · finish: {res.finish_reason[0]}"
          + (f" · seeded slots {seeds[0]}, the drafter kept {seeds[1]}" if seeds else ""))
    return 0

