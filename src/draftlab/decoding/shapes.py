"""The shapes a compiled engine meets in one run, declared before anything compiles (docs/decisions.md "A bounded
compiled engine").

With `engine.compile` on, every static-shape step (`forward.stream_step`, the drafter's `context_step` and
`block_step`, a corrector's `propose_step`, the verify-width rule's `span_cut`) compiles one graph per shape, and
torch turns the graph after its recompile limit into a hard failure (`fullgraph=True`). So a run declares its shapes:
- one capacity: slots per stream of the target's KV and of the drafter's context, for every request of the run
  (the longest prompt it can take + its most new tokens + two blocks + the scratch slot, `verifier.slots.capacity_for`,
  rounded up to a bucket);
- its batch sizes (ascending): the sizes the run asks for, and those the user adds (`engine.batch_sizes`). A smaller
  request is padded up to the next declared size with retired rows (copies of its first prompt that emit nothing);
  as streams finish, a batch shrinks only to a smaller declared size that holds its live rows;
- its verify widths (ascending, 1 first): a round verifying T tokens runs the smallest declared width >= T; the
  extra slots are never kept (powers of two up to the block, and the block, unless `engine.verify_widths` says);
- its tree budgets: a tree round's pass runs one graph per node budget its arms use (`decoding.tree.BUDGETS`), and
  the capacity holds the largest tree after the longest request;
- the drafter's context widths: S, and 2S for a proposal step that can skip a round's draft (its context joins the
  next round's). A wider context (a prompt's, at prefill) runs the eager step, as every prefill does.

`plan_graphs` enumerates, for the requests of a run (arm, batch, temperature), every (step, key) a compiled engine
can meet: the count per step is the formula the run records and refuses past `engine.max_graphs` in one line
(`admit`), and the graphs the process has planned set torch's recompile limit (`compiling.plan_limit`);
`draftlab.decoding.warm` compiles each of them on scratch buffers before any timed generation and reports the seconds
per step. Whatever path
compiles — a declared run (`prepare_run`), or the library's own surface (`compile_steps("on")`, then the engine's
`generate`) —, every decode plans its request's graphs before its first compiled call (`run_shapes`). The keys say
what a graph depends on: the target pass on (batch, width, taps); a drafter pass on the drafter's structure (two
drafters of one architecture share graphs: their weights are inputs), batch and width; a proposal step on its
module's structure, its constants and the batch; the process's count adds the run's capacity and the target.
"""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field

from draftlab.compiling import MAX_GRAPHS
from draftlab.decoding.tree import tree_nodes
from draftlab.decoding.verify import SamplingParams
from draftlab.decoding.warm import warm
from draftlab.errors import DraftlabError
from draftlab.verifier.slots import capacity_for

CAPACITY_BUCKET = 128  # a capacity is rounded up to a multiple: a few tokens more do not make a new run shape


def default_widths(block: int) -> tuple[int, ...]:
    """Powers of two below the block, and the block: (1, 2, 4, 8, 16) for S=16, (1, 2, 4, 8, 12) for S=12."""
    out, w = [], 1
    while w < block:
        out.append(w)
        w *= 2
    return tuple(out + [block])


@dataclass(frozen=True)
class Shapes:
    capacity: int  # slots per stream (target KV and drafter context), one per run
    batches: tuple[int, ...]  # declared batch sizes, ascending
    widths: tuple[int, ...]  # declared verify widths (tokens per stream in one target pass), ascending, 1 first
    where: str = "engine"  # the config section a refusal names

    def __post_init__(self):
        if not self.batches or min(self.batches) < 1 or list(self.batches) != sorted(set(self.batches)):
            raise DraftlabError(f"{self.where}.batch_sizes: {list(self.batches)} must be distinct sizes >= 1")
        if not self.widths or self.widths[0] != 1 or list(self.widths) != sorted(set(self.widths)):
            raise DraftlabError(f"{self.where}.verify_widths: {list(self.widths)} must be distinct, ascending, from 1")

    def batch(self, n: int) -> int:
        """The declared batch a request of n streams runs at (padded up); one line when none holds it."""
        for b in self.batches:
            if b >= n:
                return b
        raise DraftlabError(f"a request of {n} streams is larger than every declared batch size {list(self.batches)}; "
                            f"add it to {self.where}.batch_sizes")

    def shrink(self, alive: int, current: int) -> int:
        """The batch a run of `current` rows with `alive` live ones continues at: the smallest declared size that
        holds the live rows (never larger than `current`)."""
        return min([b for b in self.batches if alive <= b <= current] or [current])

    def width(self, T: int) -> int:
        """The declared verify width for T tokens (the smallest >= T); one line when none is wide enough."""
        for w in self.widths:
            if w >= T:
                return w
        raise DraftlabError(f"a round verifies {T} tokens, wider than every declared verify width {list(self.widths)}; "
                            f"add {T} to {self.where}.verify_widths (or leave it empty: powers of two up to the block)")

    def fits(self, prompt_tokens: int, new_tokens: int, block: int) -> None:
        """One line when a request cannot fit the run's capacity."""
        need = capacity_for([prompt_tokens], new_tokens, block)
        if need > self.capacity:
            raise DraftlabError(f"a request of a {prompt_tokens}-token prompt and {new_tokens} new tokens needs {need} "
                                f"slots per stream, more than the run's declared capacity {self.capacity}; raise "
                                f"{self.where}.kv_capacity or lower the prompt / new tokens")


def declare(prompt_tokens: int, new_tokens: int, block: int, batches, widths=(), extra_batches=(), kv_capacity: int = 0,
            where: str = "engine") -> Shapes:
    """The shapes of a run whose prompts have at most `prompt_tokens` tokens, that decodes at most `new_tokens` per
    request with blocks of at most `block` slots, at the batch sizes `batches` (+ `extra_batches`, the user's);
    `widths` empty = powers of two up to the block; `kv_capacity` 0 = sized from the rest (bucketed)."""
    need = capacity_for([prompt_tokens], new_tokens, block)
    cap = kv_capacity or -(-need // CAPACITY_BUCKET) * CAPACITY_BUCKET
    if cap < need:
        raise DraftlabError(f"{where}.kv_capacity={kv_capacity} is smaller than the longest request needs ({need}: "
                            f"{prompt_tokens} prompt tokens + {new_tokens} new + two blocks of {block} + a scratch "
                            f"slot)")
    ws = tuple(sorted(set(widths))) if widths else default_widths(block)
    if ws[-1] < block:
        raise DraftlabError(f"{where}.verify_widths={list(widths)} must reach the block size {block} (a full block "
                            f"is verified {block} wide)")
    return Shapes(cap, tuple(sorted({int(b) for b in (*batches, *extra_batches)})), ws, where)


# ---- what a compiled run meets ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Part:
    """What one decode of an arm runs: `drafter` (None: no drafter pass) and `proposer` (None: AR)."""

    drafter: object = None
    proposer: object = None


def parts(arm, temperature: float) -> list[Part]:
    """The engine parts an arm decodes with at `temperature` (an arm keeping one drafter per temperature gives the
    one it uses; a peer run by other code — Hugging Face `generate`, the authors' loop — none; None: an AR decode; a
    Part: itself, the engine's own request)."""
    if arm is None:
        return [Part()]
    if isinstance(arm, Part):
        return [arm]
    if hasattr(arm, "greedy") and hasattr(arm, "sampled"):
        return parts(arm.greedy if temperature == 0 else arm.sampled, temperature)
    if getattr(arm, "speculative", False) and hasattr(arm, "proposer"):
        return [Part(arm.drafter, arm.proposer)]
    if not getattr(arm, "speculative", True) and hasattr(arm, "target") and type(arm).__name__ == "ARArm":
        return [Part()]
    return []


INIT_ONLY = ("initializer_range", "target_name", "out_norm_init", "init_block_heads", "format")  # read at init only
HEAD_ONLY = ("draft_vocab_size", "mask_token_id", "seed", "seed_max_ngram", "seed_min_match", "seed_logit",
             "seed_bias")  # read by the block pass and the head, never by the context's projection


def signature(module, neutral: tuple[str, ...] = INIT_ONLY) -> tuple:
    """What a module's compiled graph depends on besides shapes: its class and the architecture fields the step
    reads (`neutral`: the fields it does not, reset — two modules differing only there share a graph, their weights
    being graph inputs), its dtype and draft vocabulary."""
    from dataclasses import fields, is_dataclass, replace

    arch = getattr(module, "arch", None)
    if is_dataclass(arch):
        names = {f.name for f in fields(arch)}
        arch = replace(arch, **{k: type(arch).__dataclass_fields__[k].default for k in neutral if k in names
                                and type(arch).__dataclass_fields__[k].default is not MISSING})
    vocab = getattr(module, "draft_vocab", None)
    if "draft_vocab_size" in neutral:
        vocab = None
    dtype = next((p.dtype for p in module.parameters()), None) if hasattr(module, "parameters") else None
    return (type(module).__name__, repr(arch), str(dtype), None if vocab is None else int(vocab.numel()))


def span(block: int, arms) -> int:
    """The most slots one round of these arms appends per stream: the block, or the largest tree an arm verifies (the
    `block` a run's declaration sizes its capacity with)."""
    return max([block, *(n for a in arms for t in (0.0, 1.0) for p in parts(a, t) for n in tree_nodes(p.proposer))])


def verify_tokens(proposer, block: int) -> tuple[int, ...]:
    """The tokens T = proposals + 1 a round of `proposer` can verify (its own `verify_tokens`, else a full block)."""
    fn = getattr(proposer, "verify_tokens", None)
    return tuple(fn(block)) if fn is not None else (block,)


def can_skip_drafts(proposer) -> bool:
    fn = getattr(proposer, "can_skip_drafts", None)
    return bool(fn()) if fn is not None else False


@dataclass
class GraphPlan:
    """Every (step, key) a run's compiled steps meet, with what to call to compile each (`warm`)."""

    keys: dict[str, set] = field(default_factory=dict)  # step -> keys
    jobs: list = field(default_factory=list)  # (step, key, job): job = ("target", batch, width, taps) or
    # (kind, drafter, batch, width | proposal step) for kind context | block | propose | cut

    def add(self, step: str, key: tuple, job) -> None:
        if key not in self.keys.setdefault(step, set()):
            self.keys[step].add(key)
            self.jobs.append((step, key, job))

    @property
    def counts(self) -> dict[str, int]:
        return {s: len(k) for s, k in self.keys.items()}

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def without(self, *steps: str) -> "GraphPlan":
        """The plan less the graphs of `steps` (steps that run eagerly)."""
        out = GraphPlan()
        for step, key, job in self.jobs:
            if step not in steps:
                out.add(step, key, job)
        return out


def plan_graphs(shapes: Shapes, requests, target) -> GraphPlan:
    """requests: (arm, streams, temperature or SamplingParams) of a run -> the graphs its compiled steps meet (a formula
    of the config: the arms' parts, the declared batches at or below each request's, the widths of each proposal step,
    and a sampled walk's sampling setting)."""
    plan = GraphPlan()
    for arm, n, temp in requests:
        sp = temp if isinstance(temp, SamplingParams) else SamplingParams(float(temp))
        top = shapes.batch(n)
        for part in parts(arm, sp.temperature):
            for b in (x for x in shapes.batches if x <= top):
                _plan_part(plan, shapes, target, part, b, sp)
    return plan


def _plan_part(plan: GraphPlan, shapes: Shapes, target, part: Part, b: int,
               sp: SamplingParams = SamplingParams()) -> None:
    d, prop = part.drafter, part.proposer
    if prop is None:  # AR: one token per stream, no taps
        plan.add("stream_step", (b, 1, ()), ("target", b, 1, ()))
        return
    S = d.block_size if d is not None else prop.block_size
    taps = tuple(d.target_layer_ids) if d is not None else ()
    for N in tree_nodes(prop):  # a tree round's pass: one graph per node budget (`decoding.tree.BUDGETS`)
        plan.add("tree_step", (b, N, taps), ("tree", b, N, taps))
    for T in () if tree_nodes(prop) else verify_tokens(prop, S):
        w = shapes.width(T)
        plan.add("stream_step", (b, w, taps), ("target", b, w, taps))
    if d is None:
        return
    if getattr(d, "compiled", "off") != "off" and hasattr(d, "_steps"):
        for w in (S, 2 * S) if can_skip_drafts(prop) else (S,):
            plan.add("context_step", (signature(d, INIT_ONLY + HEAD_ONLY), b, w), ("context", d, b, w))
        plan.add("block_step", (signature(d), b), ("block", d, b))
    corr = getattr(prop, "corrector", None) or getattr(getattr(prop, "inner", None), "corrector", None)
    step = prop if corr is not None and hasattr(prop, "rule") else getattr(prop, "inner", None)
    if corr is not None and getattr(step, "compiled", "off") != "off":
        walks = getattr(step, "walk", "") and not sp.greedy  # a sampled walk: one graph per sampling setting
        plan.add("propose_step", (signature(corr), step.rule, step.lam, b, sp if walks else None),
                 ("propose", d, b, step, sp if walks else None))
    if hasattr(prop, "_cut") and getattr(prop, "compiled", "off") != "off":
        plan.add("span_cut", (prop.mask_token_id, prop.rule, prop.extra, prop.min_prob, S - 1, b), ("cut", d, b, prop))


def pad_batch(prompts: list[list[int]], b: int) -> tuple[list[list[int]], list[int]]:
    """Prompts padded to `b` streams with copies of the first (retired rows: they emit nothing); -> (prompts, rows)
    with rows = each stream's output index, -1 for a padding row."""
    n = len(prompts)
    return prompts + [prompts[0]] * (b - n), list(range(n)) + [-1] * (b - n)


def halvings(n: int) -> tuple[int, ...]:
    out = {n}
    while n > 1:
        n //= 2
        out.add(n)
    return tuple(sorted(out))


def compiles(target, part: Part) -> bool:
    """Whether a decode of `part` on `target` runs a compiled step: the target's, the drafter's or a proposal
    step's (its own, or its inner step's)."""
    prop = part.proposer
    steps = (target, part.drafter, prop, getattr(prop, "inner", None))
    return any(getattr(x, "compiled", "off") != "off" for x in steps)


def run_shapes(target, prompts: list[list[int]], max_new_tokens: int, block: int, part: Part = Part(),
               sp: SamplingParams = SamplingParams()) -> Shapes | None:
    """The shapes a decode of `part` (default: AR) runs under, its graphs planned before the first compiled call:
    None when every step runs eagerly; else the run's declared shapes (`target.shapes`, set before anything compiles),
    or — no declaration (the library's own surface, one request of `draftlab decode`, a test) — the request's own:
    its capacity bucketed, its batch and its halvings. The request's graphs are planned (`plan_graphs`) and admitted
    under `target.max_graphs` (`admit`: the recompile limit raised to what the process planned). A request the
    declaration cannot hold, or a plan over the cap, is one line before anything runs."""
    if not compiles(target, part):
        return None
    longest = max(len(p) for p in prompts)
    s = getattr(target, "shapes", None)
    if s is None:
        s = declare(longest, max_new_tokens, block, halvings(len(prompts)))
    else:
        s.batch(len(prompts))
        s.fits(longest, max_new_tokens, block)
    plan = plan_graphs(s, [(part, len(prompts), sp)], target)
    if getattr(target, "compiled", "off") == "off":  # a compiled drafter or proposal step beside an eager target
        plan = plan.without("stream_step", "tree_step")
    admit(target, s, plan, getattr(target, "max_graphs", MAX_GRAPHS))
    return s


def admit(target, shapes: Shapes, plan: GraphPlan, max_graphs: int, where: str = "engine") -> int:
    """A run's plan before anything compiles: one line when it holds more than `max_graphs` graphs; else its graphs
    join the process's (keyed by what each depends on beyond the plan's key: the run's capacity, the target and the
    step's backend) and torch's recompile limit is raised to the most one step has planned (`compiling.plan_limit`).
    -> the limit."""
    from draftlab.compiling import backend_key, plan_limit

    if plan.total > max_graphs:
        per = ", ".join(f"{k} {v}" for k, v in sorted(plan.counts.items()))
        raise DraftlabError(f"the run declares {plan.total} compiled graphs ({per}), more than {where}.max_graphs="
                            f"{max_graphs}; run fewer batch sizes, widths or arms compiled, raise {where}.max_graphs, "
                            f"or set {where}.compile=off")
    model = (repr(getattr(target, "config", None)), str(getattr(target, "dtype", None)), str(target.device))
    graphs: dict[str, set] = {}
    for step, key, job in plan.jobs:
        graphs.setdefault(step, set()).add((shapes.capacity, model, backend_key(_compiled(job, target)), key))
    return plan_limit(graphs)


def _compiled(job, target):
    """The compiled function a planned graph belongs to (a job of `GraphPlan.jobs`)."""
    kind = job[0]
    if kind in ("target", "tree"):
        return target.step if kind == "target" else target.tree
    if kind in ("context", "block"):
        return job[1]._steps[0 if kind == "context" else 1]
    return job[3].step if kind == "propose" else job[3]._cut


def prepare_run(target, shapes: Shapes, requests, max_graphs: int, where: str = "engine") -> dict:
    """Before a compiled run: plan its graphs (one line when a request lies outside the declared shapes, or when
    they number more than `max_graphs`), raise torch's recompile limit to what the process planned (`admit`), hand
    the target its shapes and cap, and compile every graph on scratch buffers. -> the record the run keeps: the
    shapes, the graphs per step and in all, the limit, the compile seconds per step (apart from every timing) and
    inductor's CUDA-graph fallbacks (`compiling.cudagraph_skips`)."""
    from draftlab.compiling import cudagraph_skips, graph_memory

    plan = plan_graphs(shapes, requests, target)
    limit = admit(target, shapes, plan, max_graphs, where)
    target.shapes, target.max_graphs = shapes, max_graphs  # each decode of the run plans within them (`run_shapes`)
    skips = cudagraph_skips()
    seconds = warm(plan, shapes, target)
    return {"shapes": {"capacity": shapes.capacity, "batches": list(shapes.batches), "widths": list(shapes.widths)},
            "graphs": dict(sorted(plan.counts.items())), "graphs_total": plan.total, "recompile_limit": limit,
            "compile_s": seconds, "cudagraph_skips": cudagraph_skips() - skips,
            "graph_memory_emulated": graph_memory() is not None}  # CPU: CUDA graphs' memory rule (compiling)
