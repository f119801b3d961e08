"""Benchmark arm `dflash-specopd`: the DFlash engine with the SpecOPD-trained drafter
(models/drafter/specopd, written by the specopd stage). Registered on import by `build_arm`."""
from draftlab.bench.arms import SpeculativeArm, register_arm

SPECOPD_DRAFTER = "models/drafter/specopd"

register_arm("dflash-specopd", lambda ctx: SpeculativeArm("dflash-specopd", ctx.target,
                                                          ctx.drafter(ctx.extra.get("specopd_drafter", SPECOPD_DRAFTER)),
                                                          None, ctx.pad_id, ctx.cfg.compact_threshold))
