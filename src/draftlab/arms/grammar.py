"""Benchmark arms: a grammar of names, `method[-option][-seeded][-cut]`, resolved by `resolve` over the entries of
`grammar()` (the built-in nine, 35 names: `arm_names()`), each to a factory. The corrector families' entries come
from their records (`Family.arms`, `draftlab.corrector.family`), the other methods' from `BEFORE` / `AFTER` here.

A factory takes the arm's name and an `ArmContext` (the target, the benchmark section, where the
stages wrote each checkpoint, a cached drafter loader) and returns an `Arm`. Nothing is registered
by import and nothing checks a path before an arm is built: a missing checkpoint is a one-line
`DraftlabError` when the benchmark builds that arm.

Adding an arm = one option (or method) in `BEFORE` / `AFTER`, or in a corrector family's `arms`, + its name in conf/benchmark/arms/*.yaml (docs/architecture.md
holds the table of every arm's drafter and proposal step). A speculative arm is a drafter (or None) plus a proposal
step (`draftlab.decoding.api.ProposalStep`); `SpeculativeArm` runs them through the engine. A method's `trained`
options (`dflash-specopd`, `dflash-long`, the `dcoco*` rows, `specopd-dcoco`, `dspark`, `domino`, `dflash2`) resolve
twice: the plain name decodes the stages' checkpoints trained on the plain drafter (`seeded.methods=false`), the
name + `-seeded` the same folders trained on the seeded drafter (`seeded.methods=true`); an arm whose name does not
match the base its checkpoint records is one line (`on_base`). `dflash-pld`, `dflash-ref` always use the plain
drafter, `dflash-seeded` (and `-seeded-cut`, its verify-width rule) the seeded one alone.
Corrector and lookup proposals are deterministic, so at T>0 the verifier applies the point-mass rule; a walking
corrector family's `-sampled` option (`dcoco-sampled`, ...) samples its walk at T>0 and reports the rows it drew from
(`draftlab.corrector.walks`). Arms built on
SpecOPD decode each temperature with the state selected by that temperature's metric (`ByTemperature`).
The reference rows (`dflash-ref`, `hf-generate*`) are greedy only: the runner skips them at T>0.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Iterable

from draftlab.config.seeded import SEEDED_SUFFIX, plain_name
from draftlab.corrector.families import load_corrector, read_corrector_info, records
from draftlab.corrector.family import ArmEntry
from draftlab.corrector.proposal import CorrectorProposal
from draftlab.corrector.tree import PairTreeProposal
from draftlab.corrector.variants import RULES
from draftlab.corrector.walks import SUFFIX as SAMPLED
from draftlab.decoding.api import Drafter, DrafterProposal, ProposalStep
from draftlab.decoding.lookup import LookupHybrid, PromptLookup
from draftlab.decoding.tree import OPTIONS as TREES, TreeProposal, option_nodes
from draftlab.decoding.width import SpanProposal
from draftlab.drafter.checkpoint import DISABLED, trained_base
from draftlab.errors import DraftlabError
from draftlab.paths import Checkpoints
# what an arm is and the kinds the factories build, re-exported: the grammar is the arms' face
from draftlab.arms.kinds import (  # noqa: F401
    ARArm, Arm, ArmContext, ArmFactory, ByTemperature, DrafterSpec, SpeculativeArm, check_drafter)


def ar_arm(name: str, ctx: ArmContext) -> Arm:
    return ARArm(ctx.target, ctx.pad_id, ctx.kv_capacity, name)


def drafter_arm(folder: Callable[[Checkpoints], str]) -> ArmFactory:
    """DFlash decoding with the drafter saved in `folder(ctx.checkpoints)`, proposing its own choice."""
    def build(name: str, ctx: ArmContext) -> Arm:
        return SpeculativeArm(name, ctx.target, ctx.drafter(folder(ctx.checkpoints)), None, ctx.pad_id,
                              ctx.kv_capacity)

    return build


def seeded_drafter(name: str, ctx: ArmContext) -> Drafter:
    """The seeded drafter of `ctx.checkpoints.seeded_drafter` (one line when it is absent, disabled or plain)."""
    folder = ctx.checkpoints.seeded_drafter
    if not folder:
        raise DraftlabError(f"arm {name}: no seeded drafter folder given (Checkpoints.seeded_drafter); the benchmark "
                            f"stage passes models/drafter/seeded")
    if (Path(folder) / DISABLED).exists():
        raise DraftlabError(f"arm {name}: {folder} holds no drafter (the pretrain_seeded stage ran with "
                            f"seeded.enabled=false); set seeded.enabled=true and re-run it, or drop {name} from the arms")
    return ctx.drafter(folder, "seeded")


def seeded_arm(name: str, ctx: ArmContext) -> Arm:
    """DFlash decoding with the seeded drafter (its blocks start from the lookup continuation; docs/algorithms.md "Seeded block drafting")."""
    return SpeculativeArm(name, ctx.target, seeded_drafter(name, ctx), None, ctx.pad_id, ctx.kv_capacity)


def seeded_cut_arm(name: str, ctx: ArmContext) -> Arm:
    """The seeded drafter, verifying only its seeded span + the slots it is sure of (`seeded.verify`)."""
    v = ctx.seeded_verify
    if v is None:
        from draftlab.config.seeded import VerifyConfig  # the defaults

        v = VerifyConfig()
    drafter = seeded_drafter(name, ctx)
    step = ctx.like_target(SpanProposal(drafter.mask_token_id, v.rule, v.extra, v.min_prob, full_span=v.full_span))
    return SpeculativeArm(name, ctx.target, drafter, step, ctx.pad_id, ctx.kv_capacity)


def by_temperature(greedy: ArmFactory, sampled: ArmFactory) -> ArmFactory:
    """An arm decoding T=0 with the arm `greedy` builds and T>0 with the arm `sampled` builds."""
    def build(name: str, ctx: ArmContext) -> Arm:
        return ByTemperature(name, greedy(name, ctx), sampled(name, ctx))

    build.variants = (*variants_of(greedy), *variants_of(sampled))
    return build


CONTROL = "control"  # what the dflash-long arm decodes: the corrector stage's control drafter (corrector.control)


def variants_of(factory: ArmFactory) -> tuple[str, ...]:
    """The corrector variants (`corrector.variants`, or CONTROL) whose checkpoints the arm `factory` builds decodes."""
    return tuple(getattr(factory, "variants", ()))


def needs(factory: ArmFactory, *variants: str) -> ArmFactory:
    factory.variants = (*variants_of(factory), *variants)
    return factory


def tree_step(option: str, ranking: TreeProposal, ctx: ArmContext, drafter) -> ProposalStep:
    """The proposal step of a tree option: `tree<N>` verifies the ranking's tree of N nodes every round, `treecost`
    the budget the cost-aware rule picks from this machine's measured costs (`decoding.tree_cost.measure`, at the
    benchmark's batch size, when the arm is built)."""
    if option != "treecost":
        return ranking
    from draftlab.decoding.tree_cost import CostAwareTree, measure

    return CostAwareTree(ranking, measure(ctx.target, drafter, max(1, ctx.cfg.batch_size)))


def tree_arm(option: str, seeded: bool = False) -> ArmFactory:
    """The plain drafter's block (`seeded`: the seeded drafter's) as a tree ranked by its marginals (DDTree),
    verified in one pass per round."""
    def build(name: str, ctx: ArmContext) -> Arm:
        drafter = seeded_drafter(name, ctx) if seeded else ctx.drafter(ctx.checkpoints.drafter)
        ranking = TreeProposal(option_nodes(option), where=f"arm {name}")
        return SpeculativeArm(name, ctx.target, drafter, tree_step(option, ranking, ctx, drafter), ctx.pad_id,
                              ctx.kv_capacity)

    return build


def corrector_arm(variant: str, rule: str = "greedy", walk: str = "") -> ArmFactory:
    """A corrector variant's co-trained drafter + its corrector as the proposal step (any family), read
    from <checkpoints.correctors>/<variant>/{drafter,corrector}; `rule` is DCOCO's path rule, or a tree option
    (`TREES`: the tree ranked by the corrector's pair scores); `walk` "sampled": the family's sampled walk at T>0
    (`draftlab.corrector.walks`)."""
    def build(name: str, ctx: ArmContext) -> Arm:
        folder = Path(ctx.checkpoints.correctors) / variant
        if not (folder / "corrector" / "config.json").exists():
            raise DraftlabError(f"arm {name}: no corrector checkpoint at {folder}/corrector; run the corrector stage "
                                f"with '{variant}' in corrector.variants")
        drafter = ctx.drafter(str(folder / "drafter"))
        _, info = read_corrector_info(folder / "corrector")
        kernels = ctx.kernels or info.get("kernels", "auto")
        corrector = load_corrector(folder / "corrector", drafter)
        if rule in TREES:
            ranking = PairTreeProposal(corrector, option_nodes(rule), f"arm {name}")
            return SpeculativeArm(name, ctx.target, drafter, tree_step(rule, ranking, ctx, drafter), ctx.pad_id,
                                  ctx.kv_capacity)
        prop = ctx.like_target(CorrectorProposal(corrector, rule, float(info.get("lam", 0.75)),
                                                 None if kernels == "auto" else kernels, walk))
        return SpeculativeArm(name, ctx.target, drafter, prop, ctx.pad_id, ctx.kv_capacity)

    build.variants = (variant,)
    return build


def on_base(factory: ArmFactory, base: str) -> ArmFactory:
    """The method arm `factory` builds, checked to decode checkpoints trained on the `base` drafter ('plain' |
    'seeded'): every drafter folder it reads is compared with the stage's record (`trained_base`); a mismatch is
    one line naming the arm and the fix."""
    def build(name: str, ctx: ArmContext) -> Arm:
        def load(folder: str) -> Drafter:  # the kind and shape are checked by the context's `drafter` after this
            if ctx.load_drafter is None:
                raise DraftlabError(f"no drafter loader given; cannot load {folder}")
            drafter = ctx.load_drafter(folder)
            got = trained_base(folder, drafter)
            if got is not None and got != base:
                fix = (f"benchmark it as '{plain_name(name)}' (benchmark/arms=all), or set seeded.methods=true and re-run "
                       f"the specopd and corrector stages" if base == "seeded" else
                       f"benchmark it as '{name}{SEEDED_SUFFIX}' (benchmark/arms=seeded), or set seeded.methods=false "
                       f"and re-run the specopd and corrector stages")
                raise DraftlabError(f"arm {name}: {folder} was trained on the {got} drafter, but the arm's name says the "
                                    f"{base} one; {fix}")
            return drafter

        return factory(name, replace(ctx, load_drafter=load, base=base))

    build.variants = variants_of(factory)
    return build


def _pld(ctx: ArmContext):
    if ctx.pld is None:
        from draftlab.config import PLDConfig  # the defaults

        return PLDConfig()
    return ctx.pld


def pld_arm(name: str, ctx: ArmContext) -> Arm:
    """Prompt lookup without a drafter: the engine runs no drafter pass and requests no taps."""
    p = _pld(ctx)
    return SpeculativeArm(name, ctx.target, None, PromptLookup(ctx.block_size, p.max_ngram, p.num_tokens),
                          ctx.pad_id, ctx.kv_capacity)


def hybrid_arm(mode: str | None = None) -> ArmFactory:
    """The pretrained drafter + prompt lookup (`LookupHybrid`); mode None = `pld.hybrid`."""
    def build(name: str, ctx: ArmContext) -> Arm:
        p, drafter = _pld(ctx), ctx.drafter(ctx.checkpoints.drafter)
        look = PromptLookup(drafter.block_size, p.max_ngram, min(p.num_tokens, drafter.block_size - 1))
        step = LookupHybrid(look, ctx.target.vocab_size, DrafterProposal(), mode or p.hybrid, p.min_match)
        return SpeculativeArm(name, ctx.target, drafter, step, ctx.pad_id, ctx.kv_capacity)

    return build


def reference_arm(kind: str) -> ArmFactory:
    """The peers run by other code: the authors' `dflash_generate` and Hugging Face `generate`."""
    def build(name: str, ctx: ArmContext) -> Arm:
        from draftlab.arms.peers import DFlashRefArm, HFGenerateArm

        if kind == "dflash-ref":
            return DFlashRefArm(name, ctx.target, ctx.drafter(ctx.checkpoints.drafter))
        p = _pld(ctx)
        lookup = kind == "hf-pld"
        return HFGenerateArm(name, ctx.target, p.num_tokens if lookup else 0, ctx.pad_id, p.max_ngram if lookup else 0)

    return build


@dataclass(frozen=True)
class Method:
    """One entry of the arm grammar: the factory of each option it takes, by form. `trained`: what a method stage
    trained (plain name: on the plain drafter; -seeded: on the seeded one; `on_base` checks); `fixed`: one drafter
    or none (no -seeded form); `seeded`: the seeded drafter itself ("" = -seeded, "cut" = -seeded-cut)."""

    trained: dict[str, ArmFactory] = field(default_factory=dict)
    fixed: dict[str, ArmFactory] = field(default_factory=dict)
    seeded: dict[str, ArmFactory] = field(default_factory=dict)


# the methods that are not corrector families, in the grammar's order around the families' entries
BEFORE: dict[str, Method] = {
    "ar": Method(fixed={"": ar_arm}),
    "dflash": Method(
        trained={"specopd": by_temperature(drafter_arm(lambda c: f"{c.specopd_drafter}/t0"),
                                           drafter_arm(lambda c: f"{c.specopd_drafter}/t1")),
                 "long": needs(drafter_arm(lambda c: c.long_drafter), CONTROL)},
        fixed={"": drafter_arm(lambda c: c.drafter), "pld": hybrid_arm(), "pld-switch": hybrid_arm("switch"),
               "pld-splice": hybrid_arm("splice"), "ref": reference_arm("dflash-ref"),
               **{t: tree_arm(t) for t in TREES}},
        seeded={"": seeded_arm, "cut": seeded_cut_arm, **{t: tree_arm(t, seeded=True) for t in TREES}}),
}
AFTER: dict[str, Method] = {
    "pld": Method(fixed={"": pld_arm}),
    "hf-generate": Method(fixed={"": reference_arm("hf"), "pld": reference_arm("hf-pld")}),
}
LEAD = ("ar", "dflash")  # the target alone and the plain drafter: first in the arm table (then the trained arms)


def entry_arm(e: ArmEntry) -> ArmFactory:
    """The factory of a corrector family's arm entry (its variant at T=0, another one at T>0 where it names one)."""
    greedy = corrector_arm(e.variant, e.rule, e.walk)
    return by_temperature(greedy, corrector_arm(e.sampled, e.rule, e.walk)) if e.sampled else greedy


def grammar() -> dict[str, Method]:
    """The grammar: the methods above and, between them, each corrector family's entries (`Family.arms`: trained
    options) of this process's families (`draftlab.corrector.families.records`: the built-in ones and those that
    `corrector.family_modules` names)."""
    fams = {m: Method(trained={o: entry_arm(e) for o, e in opts.items()})
            for f in records().values() for m, opts in f.arms.items()}
    return {**BEFORE, **fams, **AFTER}


GRAMMAR: dict[str, Method] = grammar()  # the built-in families' grammar (nine entries)
FORMS = ("", SEEDED_SUFFIX, SEEDED_SUFFIX + "-cut")  # the plain drafter / the seeded one / its verify-width rule


def arm_name(method: str, option: str = "", form: str = "") -> str:
    return "-".join(p for p in (method, option) if p) + form


def parse(name: str) -> tuple[str, str, str] | None:
    """(method, option, form) of an arm name, or None: the longest method that starts the name, then the form
    (-seeded, -seeded-cut) at its end, the option between."""
    methods = [m for m in grammar() if name == m or name.startswith(m + "-")]
    if not methods:
        return None
    method = max(methods, key=len)
    rest = name[len(method):]
    form = next(f for f in reversed(FORMS) if rest.endswith(f))
    rest = rest[: len(rest) - len(form)]
    if rest and not rest.startswith("-"):
        return None
    return method, rest[1:], form


def grammar_line() -> str:
    """The grammar in one line: each method with its options."""
    def opts(name: str, m: Method) -> str:
        o = [x for x in (*m.fixed, *m.trained) if x] + ["seeded" if not x else "seeded-cut" if x == "cut" else
                                                        f"{x}-seeded" for x in m.seeded]
        return name + ("[-seeded]" if m.trained else "") + (f" ({', '.join(o)})" if o else "")
    return ", ".join(opts(n, m) for n, m in grammar().items())


def resolve(name: str) -> ArmFactory:
    """The factory of arm `name` under the grammar `method[-option][-seeded][-cut]`; an unknown name is one line
    naming the methods and their options."""
    parts = parse(name)
    m, option, form = (grammar()[parts[0]], parts[1], parts[2]) if parts else (None, "", "")
    factory = None
    if m is not None and form == "":
        factory = m.fixed.get(option) or (on_base(m.trained[option], "plain") if option in m.trained else None)
    elif m is not None and form == SEEDED_SUFFIX:
        factory = (on_base(m.trained[option], "seeded") if option in m.trained else
                   m.seeded.get(option) if option != "cut" else None)  # "" the seeded drafter, or a tree of it
    elif m is not None and not option:
        factory = m.seeded.get("cut")
    if factory is None and parts and (parts[1] == SAMPLED or parts[1].endswith("-" + SAMPLED)):
        raise DraftlabError(no_sampled_walk(name, parts[0], parts[1][: -len(SAMPLED)].rstrip("-")))
    if factory is None:
        raise DraftlabError(f"unknown benchmark arm '{name}'; an arm is method[-option][-seeded][-cut]: {grammar_line()} "
                            f"(a new arm is an entry in the grammar, draftlab/arms/grammar.py, or a corrector family's "
                            f"record)")
    return factory


def no_sampled_walk(name: str, method: str, option: str) -> str:
    """Why arm `name` (method[-option]-sampled) has no sampled walk, in one line."""
    walking = [m for m, meth in grammar().items() if SAMPLED in meth.trained]
    if option in RULES:
        return (f"arm '{name}': only the greedy path rule has a sampled walk ({option} picks a whole path by Viterbi; "
                f"its conditionals would need a forward-backward pass); use '{method}-{SAMPLED}'")
    if method not in walking:
        return (f"arm '{name}': {method} has no corrector walk to sample (the families that walk: "
                f"{', '.join(f'{m}-{SAMPLED}' for m in walking)})")
    return f"arm '{name}': option '{option}' has no sampled walk; the sampled arm is '{method}-{SAMPLED}'"


def arm_names() -> tuple[str, ...]:
    """Every name the grammar resolves (what the config checks against): AR and the plain drafter (`LEAD`), the method
    arms on the plain drafter, the seeded drafter's own arms, the method arms on the seeded drafter, then the other
    arms of one drafter or none (the prompt-lookup hybrids, the reference rows, prompt lookup)."""
    g = grammar()
    trained = [arm_name(n, o) for n, m in g.items() for o in m.trained]
    fixed = [arm_name(n, o) for n, m in g.items() for o in m.fixed]
    seeded = [arm_name(n, "" if o == "cut" else o, FORMS[2] if o == "cut" else FORMS[1]) for n, m in g.items()
              for o in m.seeded]
    lead, rest = [a for a in fixed if a in LEAD], [a for a in fixed if a not in LEAD]
    return tuple([*lead, *trained, *seeded, *(t + SEEDED_SUFFIX for t in trained), *rest])


# the expansion of the built-in grammar, name -> factory (a caller may pass its own table to build_arm)
ARM_TABLE: dict[str, ArmFactory] = {name: resolve(name) for name in arm_names()}


def check_variants(arms: Iterable[str], variants: Iterable[str], control: bool = True) -> None:
    """One line when an arm decodes a corrector variant that `corrector.variants` does not train, or the control
    drafter with `corrector.control` off (the benchmark would otherwise stop at that arm, after every stage before
    it has run)."""
    variants = list(variants)
    have = set(variants) | ({CONTROL} if control else set())
    for name in dict.fromkeys(arms):
        missing = [v for v in variants_of(resolve(name)) if v not in have]
        if missing == [CONTROL]:
            raise DraftlabError(f"benchmark arm '{name}' decodes the control drafter (the base drafter trained alone "
                                f"as long as dcoco), which corrector.control=false does not train; set "
                                f"corrector.control=true or drop the arm")
        if missing:
            raise DraftlabError(f"benchmark arm '{name}' decodes the corrector variant(s) {', '.join(missing)}, which "
                                f"corrector.variants ({', '.join(variants) or 'none'}) does not train; add them there "
                                f"or drop the arm")


def check_trained(params) -> None:
    """`check_variants` over every arm the benchmark of `params` decodes (check_params, `draftlab check`)."""
    b = params.benchmark
    check_variants([*b.arms, *b.ablation_arms, *b.sampled_arms, *b.concurrency_arms], params.corrector.variants,
                   params.corrector.control)


def build_arm(name: str, ctx: ArmContext, table: dict[str, ArmFactory] | None = None) -> Arm:
    """The arm `name`: resolved by the grammar, or looked up in the caller's own `table`."""
    if table is not None and name in table:
        return table[name](name, replace(ctx, arm=name))
    return resolve(name)(name, replace(ctx, arm=name))
