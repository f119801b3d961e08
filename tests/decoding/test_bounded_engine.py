"""The compiled engine meets only the shapes a run declared (issue 49, item 3; docs/decisions.md "A bounded compiled
engine").

The `cpu` and `gpu-small` profiles' arm lists run as their benchmark runs them — their real prompt counts per suite,
prompt lengths up to data.max_prompt_tokens, batch sizes, concurrency levels, temperatures and new tokens; on as few of
their suites as fill the largest concurrency level with distinct prompts (every suite makes the same requests, so
the same graphs: the others only repeat those decodes) —, in ONE
process with no dynamo reset between arms or profiles, every step compiled with a counting backend: the graphs
compiled equal the declared formula (`decoding.shapes.plan_graphs`), all of them compiled by the warm-up before the
first generation (the run adds none), and the count is <= 40. The world: a random Llama target made a cycler (its
greedy next token is a fixed permutation of the last one, `checks.seeded.make_cycler`) and drafters whose block
predictions copy it except at pseudo-random positions, so every accepted length 0..S-1 occurs. Greedy output of
every arm equals AR's. Requests outside the declaration are one line before anything runs.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT
from draftlab.errors import DraftlabError

pytestmark = pytest.mark.usefixtures("one_thread")

V, HIDDEN, LAYERS, TAPS = 101, 48, 4, [0, 2]


def profile_params(name: str):
    from draftlab.params import build_params, compose_params
    from draftlab.pipeline.names import arm_names, method_names

    arms, names = arm_names(), method_names()
    raw = compose_params([f"profile={name}", "tracking.enabled=false"], ROOT / "conf", arms=arms, names=names)
    return build_params(raw, arms=arms, names=names)


def cycler_target():
    """A random Llama (untied head) whose greedy next token is sigma(last token), sigma one cycle over ids 1..V-2."""
    from draftlab.checks.models import build_target
    from draftlab.checks.seeded import make_cycler

    t = build_target(torch.device("cpu"), torch.float32, "llama", V, HIDDEN, LAYERS, 4, 2, 96, tie=False, seed=11)
    order = torch.randperm(V - 2, generator=torch.Generator().manual_seed(5)) + 1  # never 0 (pad) or V-1 (MASK)
    make_cycler(t, [order.tolist()])
    return t


def sigma_table(target) -> torch.Tensor:
    """[V] the target's greedy successor of each id (read off its head, as make_cycler built it)."""
    emb = target.model.get_input_embeddings().weight
    head = target.model.get_output_embeddings().weight
    h = target.model.model.norm(emb)  # the residual stream of a token is its embedding (projections zeroed)
    return (h @ head.T).argmax(-1)


def make_copying(d, sigma: torch.Tensor):
    """Patch a drafter so its block predicts sigma^j(slot 0) at slot j, wrong (another id) at ~6% of slots
    (a hash of the position and slot 0): every accepted length occurs. Its real passes still run (their output is replaced)."""
    S = d.block_size
    pows = [torch.arange(V)]
    for _ in range(S - 1):
        pows.append(sigma[pows[-1]])
    table = torch.stack(pows)  # [S, V]
    run, logits = d.run_blocks, d.logits

    def run_blocks(ids, pos, *a, **kw):
        h = run(ids, pos, *a, **kw)
        j = torch.arange(ids.shape[-1], device=ids.device)
        pred = table[j, ids[..., :1].expand_as(ids)]  # [..., S]
        wrong = (pos * 2654435761 + ids[..., :1] * 40503) % 97 < 6  # a hash of (position, slot 0)
        pred = torch.where(wrong, (pred + 7) % (V - 1), pred)
        return torch.cat([pred[..., None].to(h.dtype), h[..., 1:]], -1)

    def copied(hidden, *a, **kw):
        base = logits(hidden, *a, **kw)
        tok = hidden[..., 0].round().long().clamp(0, base.shape[-1] - 1)
        return base * 0.0 + 30.0 * F.one_hot(tok, base.shape[-1]).to(base.dtype)

    d.run_blocks, d.logits = run_blocks, copied
    return d


def write_checkpoints(root, target, S: int, layers: int, seeded_methods: bool, params):
    """Every folder the profile's arms read: the plain and seeded drafters, SpecOPD's t0/t1, the correctors (on the
    seeded drafter when the methods train there, `seeded.methods`)."""
    from draftlab.corrector.families import build_corrector
    from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target, save_drafter
    from draftlab.paths import Checkpoints
    from test_corrector_seeded import ccfg, perturbed

    def drafter(seed_mode: str, seed: int):
        sd = params.seeded.drafter
        arch = arch_from_target(target, DrafterDesign(S, layers, TAPS, V - 1, 0, seed=seed_mode,
                                seed_bias=float(sd.get("seed_bias", 0.0)) if seed_mode == "lookup" else 0.0))
        torch.manual_seed(seed)
        return DFlashDrafter.from_target(arch, target).eval()

    plain, seeded = drafter("none", 1), drafter("lookup", 2)
    base_kind = "seeded" if seeded_methods else "plain"
    base = seeded if seeded_methods else plain
    save_drafter(plain, root / "plain", info={"base_kind": "plain"})
    save_drafter(seeded, root / "seeded", info={"base_kind": "seeded"})
    for sub in ("t0", "t1"):
        save_drafter(base, root / "specopd" / sub, info={"base_kind": base_kind})
    for variant in ("dcoco", "dspark", "domino", "dflash2"):
        corr = perturbed(build_corrector(ccfg(k=4), base, variant), std=0.1 if variant == "dspark" else 3.0)
        save_drafter(base, root / "corr" / variant / "drafter", info={"base_kind": base_kind})
        corr.save(root / "corr" / variant / "corrector", info={"lam": 0.75, "kernels": "torch"})
    return Checkpoints(str(root / "plain"), str(root / "specopd"), str(root / "plain"), str(root / "corr"),
                       str(root / "seeded"))


def prompt_sets(cfg, max_tokens: int, seed: int):
    """Per suite the prompts the profile selects (its headline sample and the pairs' extras), lengths spread up to
    max_tokens; and the concurrency sweep's pool."""
    from draftlab.bench.runner import PromptItem

    g = torch.Generator().manual_seed(seed)
    k = cfg.prompts_selected() or 8
    suites = {}
    for s in cfg.suites:
        lens = torch.randint(8, max_tokens + 1, (k,), generator=g).tolist()
        lens[0] = max_tokens  # the longest prompt the run keeps
        suites[s] = [PromptItem(f"{s}/{i}", s, torch.randint(1, V - 1, (n,), generator=g).tolist())
                     for i, n in enumerate(lens)]
    pool = [p for ps in zip(*suites.values()) for p in ps][: max(cfg.concurrency or [0])]
    return suites, pool


def build_profile_arms(target, params, ck, sigma):
    from draftlab.arms.grammar import ArmContext, build_arm
    from draftlab.drafter import load_drafter

    cache: dict = {}

    def load(folder: str):
        if folder not in cache:
            cache[folder] = make_copying(load_drafter(folder, target), sigma)
        return cache[folder]

    cfg = params.benchmark
    ctx = ArmContext(target, cfg, ck, 0, load, pld=params.pld, block_size=params.drafter.block_size,
                     seeded_verify=params.seeded.verify)
    return {name: build_arm(name, ctx) for name in cfg.running_arms()}


def fewest_suites(cfg):
    """The benchmark section on its first suites, as few as fill the largest concurrency level with distinct prompts
    (the real run's sweep pool: the suites' prompts round-robin). Every suite makes the same requests (its prompt
    count, batches, temperatures and arms), so the graphs planned are those of all suites (the test checks that);
    the other suites only repeat the same decodes."""
    from dataclasses import replace

    n = max(1, -(-max(cfg.concurrency or [1]) // (cfg.prompts_selected() or 8)))
    return replace(cfg, suites=list(cfg.suites[:n]))


@pytest.fixture(scope="module")
def world():
    t = cycler_target()
    return t, sigma_table(t)


@pytest.mark.parametrize("profiles", [("gpu-small", "cpu")])
def test_the_profiles_arm_lists_compile_exactly_their_declared_graphs(world, tmp_path, profiles):
    """One process, both profiles in turn, no dynamo reset: each run's graphs = its formula <= 40, all compiled by
    the warm-up; greedy output of every arm = AR's; every accepted length 0..S-1 occurs."""
    from dataclasses import replace

    from torch._dynamo.testing import CompileCounter

    from draftlab.bench.runner import requests, run_benchmark
    from draftlab.decoding.shapes import declare, plan_graphs, prepare_run, span
    from draftlab.pipeline.benchmark import prompt_budget

    target, sigma = world
    counter = CompileCounter()
    target.compile_steps("on", backend=counter)
    try:
        for name in profiles:
            params = profile_params(name)
            full = replace(params.benchmark, interleave="batches")  # lockstep threads: same shapes, slower here
            cfg = fewest_suites(full)
            S, layers = params.drafter.block_size, params.drafter.num_layers
            ck = write_checkpoints(tmp_path / name, target, S, layers, params.seeded.methods, params)
            arms = build_profile_arms(target, replace(params, benchmark=cfg), ck, sigma)
            budget = prompt_budget(cfg, params.data, 4096)
            suites, pool = prompt_sets(cfg, budget, seed=len(name))
            shapes = declare(budget, max(cfg.max_new_tokens, cfg.concurrency_max_new_tokens), span(S, arms.values()),
                             [cfg.batch_size, *cfg.concurrency], params.engine.verify_widths)
            reqs = requests(cfg, arms, suites, pool)
            plan = plan_graphs(shapes, reqs, target)
            every = prompt_sets(full, budget, seed=len(name))
            assert plan.keys == plan_graphs(shapes, requests(full, arms, *every), target).keys, name  # all suites'
            before = counter.frame_count
            record = prepare_run(target, shapes, reqs, params.engine.max_graphs)
            assert record["graphs_total"] == plan.total <= 40, (name, record["graphs"])
            assert counter.frame_count - before == plan.total, (name, counter.frame_count - before, record["graphs"])
            out = run_benchmark(arms, suites, cfg, [], target.device, sweep_pool=pool)
            assert counter.frame_count - before == plan.total, (name, "the run compiled graphs the warm-up did not")
            ar = {(r.suite, r.sweep, tuple(r.prompt_ids)): r.result.tokens for r in out.runs + out.extra
                  if r.arm == "ar" and r.temperature == 0}
            accepted = set()
            for r in out.runs + out.extra:
                if r.temperature == 0 and (r.suite, r.sweep, tuple(r.prompt_ids)) in ar:
                    assert r.result.tokens == ar[(r.suite, r.sweep, tuple(r.prompt_ids))], (name, r.arm, r.suite)
                if r.arm == "dflash":
                    accepted |= {a for acc in r.result.accepted for a in acc}
            assert accepted == set(range(S)), (name, sorted(accepted))
        from draftlab.decoding import generate_ar

        p = suites[cfg.suites[0]][0].ids
        t_eager = cycler_target()
        assert generate_ar(t_eager, [p], 24, eos_ids=[]).tokens[0] == [int(x) for x in _walk(sigma, p[-1], 24)]
    finally:
        target.compile_steps("off")


def _walk(sigma, x, n):
    out = []
    for _ in range(n):
        x = int(sigma[x])
        out.append(x)
    return out


def test_requests_outside_the_declaration_are_one_line(world):
    """A batch larger than every declared size, a width past the declared ones, a prompt past the capacity, a plan
    over engine.max_graphs: each one line, before anything compiles."""
    from torch._dynamo.testing import CompileCounter

    from draftlab.arms.grammar import ARArm
    from draftlab.decoding import generate_ar
    from draftlab.decoding.shapes import Shapes, declare, prepare_run

    target, _ = world
    counter = CompileCounter()
    target.compile_steps("on", backend=counter)
    try:
        shapes = declare(40, 16, 4, [1, 4])
        assert shapes.capacity == 128 and shapes.widths == (1, 2, 4)
        target.shapes = shapes
        for call, msg in ((lambda: generate_ar(target, [[3] * 5] * 6, 4, eos_ids=[]), "larger than every declared"),
                          (lambda: generate_ar(target, [[3] * 125], 4, eos_ids=[]), "declared capacity 128"),
                          (lambda: shapes.width(5), "wider than every declared verify width"),
                          (lambda: prepare_run(target, shapes, [(ARArm(target), 4, 0.0)], 1), None),
                          (lambda: declare(40, 16, 8, [1], widths=[1, 4]), "must reach the block size 8"),
                          (lambda: Shapes(128, (4, 1), (1,)), "batch_sizes")):
            if msg is None:
                prepare_run(target, shapes, [(ARArm(target), 4, 0.0)], 2)  # AR at 4 and 1: two graphs fit 2
                with pytest.raises(DraftlabError, match="more than engine.max_graphs=1") as e:
                    call()
            else:
                with pytest.raises(DraftlabError, match=msg) as e:
                    call()
            assert "\n" not in str(e.value)
        assert counter.frame_count == 2  # only the plan that fitted compiled (AR at batches 1 and 4)
    finally:
        target.compile_steps("off")


# ---- the CUDA-graph memory rule, emulated on CPU (issue 49, item 4) -------------------------------------------


def _compile_arms(target, arms: dict, mode: str, backend=None) -> None:
    from draftlab.decoding.shapes import parts

    target.compile_steps(mode, backend=backend)
    for arm in arms.values():
        for temp in (0.0, 1.0):
            for part in parts(arm, temp):
                for x in (part.drafter, part.proposer):
                    if hasattr(x, "compile_steps") and (mode == "off") == (getattr(x, "compiled", "off") != "off"):
                        x.compile_steps(mode, backend)


def _decode_all(arms: dict, prompts: list[list[int]], new: int) -> dict:
    """arm -> (tokens, accepted per round) of a greedy decode of `prompts` in batches of 4."""
    from draftlab.decoding import SamplingParams

    out = {}
    for name, arm in arms.items():
        res = [arm.generate(prompts[i:i + 4], new, SamplingParams(), [], None) for i in range(0, len(prompts), 4)]
        out[name] = ([t for r in res for t in r.tokens], [a for r in res for a in (r.accepted or [])])
    return out


@pytest.mark.parametrize("planted", [None, "stream_step", "block_step"])
def test_compiled_arms_obey_the_cuda_graph_memory_rule(world, tmp_path, planted):
    """With every compiled call first poisoning (NaN / -1) the outputs of the previous compiled call that are still
    alive — what a CUDA-graph replay does to their memory —, every arm's greedy tokens equal AR's and its rounds
    (accepted lengths) equal those of the same compiled steps without the emulation: nothing crosses a compiled
    call without the boundary's clone.
    `planted`: the clone removed at one step's boundary (the target's pass, whose taps feed the next round's
    context; the drafter's block pass, whose logits the proposal step and the round record read later) — then the
    rounds must differ, or the check would prove nothing."""
    from draftlab.compiling import emulate_graph_memory
    from draftlab.decoding import generate_ar
    from draftlab.decoding.shapes import declare, prepare_run

    target, sigma = world
    params = profile_params("gpu-small")
    S = params.drafter.block_size
    ck = write_checkpoints(tmp_path, target, S, params.drafter.num_layers, False, params)
    names = ["ar", "dflash", "dcoco", "dspark", "domino", "dflash-specopd", "dflash-seeded-cut", "pld", "dflash-pld"]
    from dataclasses import replace

    params = replace(params, benchmark=replace(params.benchmark, arms=names, ablation_arms=[]))
    arms = build_profile_arms(target, params, ck, sigma)
    g = torch.Generator().manual_seed(21)
    prompts = [torch.randint(1, V - 1, (n,), generator=g).tolist() for n in (37, 12, 60, 25, 44, 18, 9, 51)]
    new = 40
    want = [generate_ar(target, [p], new, eos_ids=[]).tokens[0] for p in prompts]
    shapes = declare(max(map(len, prompts)), new, S, [4])
    try:  # the reference: the same compiled steps, without the emulation (a compiled arm may verify other widths
        _compile_arms(target, arms, "on", "eager")  # than its eager decode, `decoding.width`)
        prepare_run(target, shapes, [(arm, 4, 0.0) for arm in arms.values()], 48)
        clean = _decode_all(arms, prompts, new)
    finally:
        _compile_arms(target, arms, "off")
    memory = emulate_graph_memory(True)
    try:
        _compile_arms(target, arms, "on", "eager")
        target.shapes = shapes
        if planted == "stream_step":
            target.step.clones = False
        elif planted == "block_step":
            for arm in arms.values():
                if getattr(arm, "drafter", None) is not None and hasattr(arm.drafter, "_steps"):
                    arm.drafter._steps[1].clones = False
        try:
            got = _decode_all(arms, prompts, new)
        except Exception as e:  # noqa: BLE001 (poisoned indices may also fail outright: also a detection)
            got = {"error": str(e)}
    finally:
        emulate_graph_memory(False)
        _compile_arms(target, arms, "off")
    assert memory.calls > 0 and memory.poisoned > 0  # the emulation ran and overwrote outputs
    same = got.keys() == clean.keys() and all(got[a][0] == want and got[a][1] == clean[a][1] for a in clean)
    if planted is None:
        for a in clean:
            assert got[a][0] == want, a  # greedy = AR
            assert got[a][1] == clean[a][1], a  # the same rounds as without the emulation
        assert memory.read_after == 0  # no caller kept a graph output past the next compiled call
    else:
        assert not same, f"removing the clone at {planted}'s boundary went unnoticed"
