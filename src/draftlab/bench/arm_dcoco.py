"""Benchmark arms of the DCOCO corrector (SPEC §2) and its controls, registered without touching the runner.

Every arm decodes with a co-trained drafter and its corrector read from the corrector stage's outputs
(`<root>/<variant>/drafter` and `<root>/<variant>/corrector`, root = `ctx.extra["corrector_root"]`,
default models/corrector):

| arm | checkpoint | path rule |
|---|---|---|
| `dcoco` | dcoco | prefix-first greedy (the method) |
| `dcoco-globalsum` | dcoco | Viterbi over summed scores |
| `dcoco-geometric` | dcoco | Viterbi with λ^p discount (λ from the checkpoint, default 0.75) |
| `dcoco-nopair` / `dcoco-nocand` / `dcoco-frozen` | that variant | greedy |
| `specopd-dcoco` | specopd-dcoco | greedy — registered only when its checkpoint exists |

`dflash-long` is the plain DFlash arm on the control drafter (`ctx.extra["long_drafter"]`, default
models/drafter/long). Proposals are deterministic, so at T>0 the verifier applies the point-mass rule.
Importing any `draftlab.bench.arm_<name>` module of these arms registers all of them.
"""
from __future__ import annotations

from pathlib import Path

from draftlab.bench.arms import ArmContext, SpeculativeArm, register_arm

ROOT = "models/corrector"
LONG = "models/drafter/long"

# arm name -> (checkpoint variant, path rule)
DCOCO_ARMS = {
    "dcoco": ("dcoco", "greedy"),
    "dcoco-globalsum": ("dcoco", "globalsum"),
    "dcoco-geometric": ("dcoco", "geometric"),
    "dcoco-nopair": ("nopair", "greedy"),
    "dcoco-nocand": ("nocand", "greedy"),
    "dcoco-frozen": ("frozen", "greedy"),
    "specopd-dcoco": ("specopd-dcoco", "greedy"),
}


def corrector_root(ctx: ArmContext) -> Path:
    return Path(ctx.extra.get("corrector_root", ROOT))


def variant_folder(name: str, variant: str, ctx: ArmContext) -> Path:
    """<root>/<variant>, with a one-line error when the corrector stage has not written it."""
    from draftlab.errors import DraftlabError

    folder = corrector_root(ctx) / variant
    if not (folder / "corrector" / "config.json").exists():
        raise DraftlabError(f"arm {name}: no corrector checkpoint at {folder}/corrector; run the corrector stage "
                            f"with '{variant}' in corrector.variants")
    return folder


def dcoco_arm(name: str, variant: str, rule: str, ctx: ArmContext) -> SpeculativeArm:
    from draftlab.corrector.model import load_corrector, read_corrector_spec
    from draftlab.corrector.proposal import CorrectorProposal

    folder = variant_folder(name, variant, ctx)
    drafter = ctx.drafter(str(folder / "drafter"))
    _, info = read_corrector_spec(folder / "corrector")
    corrector = load_corrector(folder / "corrector", ctx.target.embed_tokens, drafter.device, drafter.dtype)
    kernels = ctx.extra.get("kernels", info.get("kernels", "auto"))
    prop = CorrectorProposal(corrector, rule, float(info.get("lam", 0.75)), info.get("k"),
                             None if kernels == "auto" else kernels)
    return SpeculativeArm(name, ctx.target, drafter, prop, ctx.pad_id, ctx.cfg.compact_threshold)


def _register(name: str, variant: str, rule: str) -> None:
    register_arm(name, lambda ctx: dcoco_arm(name, variant, rule, ctx))


for _name, (_variant, _rule) in DCOCO_ARMS.items():
    if _name != "specopd-dcoco":
        _register(_name, _variant, _rule)
# the composed arm exists only once its checkpoint does (the SpecOPD stage feeds the corrector stage)
if (Path(ROOT) / "specopd-dcoco" / "corrector" / "config.json").exists():
    _register("specopd-dcoco", *DCOCO_ARMS["specopd-dcoco"])

register_arm("dflash-long", lambda ctx: SpeculativeArm("dflash-long", ctx.target,
                                                       ctx.drafter(str(ctx.extra.get("long_drafter", LONG))), None,
                                                       ctx.pad_id, ctx.cfg.compact_threshold))
