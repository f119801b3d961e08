"""Which drafter the methods train on (issue 20 item 5): the stages' base folder (`seeded.methods`), the record they
write, the arm table's suffix rule (every method arm as `<name>` and `<name>-seeded`) and the one-line refusal of
an arm whose name does not match the base its checkpoint was trained on."""
from __future__ import annotations

import pytest

from draftlab.arms.grammar import ARM_TABLE, ArmContext, Checkpoints, arm_name, build_arm, grammar, trained_base
from draftlab.config import BenchmarkConfig
from draftlab.config.seeded import SEEDED_ARM, SEEDED_SUFFIX, method_arm_base, plain_name
from draftlab.decoding.tree import OPTIONS as TREE_OPTIONS
from draftlab.drafter import load_drafter, save_drafter
from draftlab.errors import DraftlabError
from draftlab.pipeline.layout import PLAIN_DRAFTER, SEEDED_DRAFTER, MethodBase, method_base
from conftest import arms_preset
from test_seeded import make_seeded

pytestmark = pytest.mark.usefixtures("one_thread")


def test_every_method_arm_is_in_the_table_under_both_names(root):
    names = list(ARM_TABLE)
    METHOD_ARMS = [arm_name(n, o) for n, m in grammar().items() for o in m.trained]  # what a method stage trained
    for m in METHOD_ARMS:
        assert m in ARM_TABLE and m + SEEDED_SUFFIX in ARM_TABLE
        assert (method_arm_base(m, names), method_arm_base(m + SEEDED_SUFFIX, names)) == ("plain", "seeded")
        assert plain_name(m + SEEDED_SUFFIX) == m
    seeded = {a for a in names if a.endswith(SEEDED_SUFFIX)}
    trees = {f"dflash-{o}{SEEDED_SUFFIX}" for o in TREE_OPTIONS}  # the seeded drafter's own trees
    assert seeded == {SEEDED_ARM} | trees | {m + SEEDED_SUFFIX for m in METHOD_ARMS}  # no other -seeded name
    for other in ("ar", "dflash", SEEDED_ARM, "pld", "dflash-pld", "dflash-ref", "hf-generate", "dflash-tree16",
                  *trees):
        assert method_arm_base(other, names) is None  # the drafters' own arms and the peers are no method
    # the presets: `seeded` names the methods on the seeded drafter only, `all` / `paper` on the plain one only
    for preset, want in (("seeded", "seeded"), ("smoke", "seeded"), ("all", "plain"), ("paper", "plain")):
        p = arms_preset(preset)
        used = [*p["arms"], *p["ablation_arms"], *p["sampled_arms"], *p["concurrency_arms"],
                *[a for pair in p["pairs"] for a in pair if a != "best"]]
        bases = {method_arm_base(a, names) for a in used} - {None}
        assert bases == {want}, preset


def test_the_stages_base_folder_follows_seeded_methods(llama_target, tmp_path):
    plain, seeded = method_base(False), method_base(True, "models/drafter/imported")
    assert (plain.kind, plain.folder, plain.stage) == ("plain", PLAIN_DRAFTER, "pretrain_drafter")
    assert (seeded.kind, seeded.folder, seeded.stage) == ("seeded", SEEDED_DRAFTER, "pretrain_seeded")
    assert method_base(False, "models/drafter/imported").folder == "models/drafter/imported"  # the configured one
    assert seeded.record() == {"base_kind": "seeded", "base_folder": SEEDED_DRAFTER}
    t = llama_target
    folder = save_drafter(make_seeded(t, 4, seed_mode="none", mask=t.vocab_size - 1), tmp_path / "plain")
    method_base(False, str(folder)).check()  # a plain drafter as the plain base: fine
    MethodBase("seeded", str(tmp_path / "none")).check()  # no folder: left to the recipe's own message
    with pytest.raises(DraftlabError, match=r"holds a plain drafter, but seeded.methods=true trains the methods on the "
                                            r"seeded one; re-run the pretrain_seeded stage") as e:
        MethodBase("seeded", str(folder)).check()
    assert "\n" not in str(e.value)


def _folders(t, root, kinds: dict[str, tuple[str, str | None]]) -> None:
    """root/<sub>: a drafter of arch `seed` ('lookup' | 'none') whose info records `record` (None: no record)."""
    for sub, (seed, record) in kinds.items():
        info = {} if record is None else {"base_kind": record, "base_folder": "models/drafter/x"}
        save_drafter(make_seeded(t, 4, seed_mode=seed, mask=t.vocab_size - 1), root / sub, info=info)


def test_an_arm_refuses_a_checkpoint_trained_on_the_other_base(llama_target, tmp_path):
    t = llama_target
    _folders(t, tmp_path, {"long-plain": ("none", "plain"), "long-seeded": ("lookup", "seeded"),
                           "long-old": ("none", None), "sopd/t0": ("lookup", "seeded"), "sopd/t1": ("none", "plain")})

    def ctx(long: str) -> ArmContext:
        return ArmContext(t, BenchmarkConfig(), Checkpoints("", str(tmp_path / "sopd"), str(tmp_path / long), ""),
                          load_drafter=lambda f: load_drafter(f, t))

    assert build_arm("dflash-long", ctx("long-plain")).drafter.arch.seed == "none"
    assert build_arm("dflash-long-seeded", ctx("long-seeded")).drafter.arch.seeded
    assert build_arm("dflash-long", ctx("long-old")).name == "dflash-long"  # no record (an older stage): its arch
    assert (trained_base(str(tmp_path / "long-old")), trained_base(str(tmp_path / "long-seeded"))) == ("plain", "seeded")
    cases = [
        ("dflash-long-seeded", "long-plain", r"^arm dflash-long-seeded: .*long-plain was trained on the plain drafter, but "
                                             r"the arm's name says the seeded one; benchmark it as 'dflash-long' "
                                             r"\(benchmark/arms=all\), or set seeded.methods=true"),
        ("dflash-long", "long-seeded", r"^arm dflash-long: .*long-seeded was trained on the seeded drafter, but the arm's "
                                       r"name says the plain one; benchmark it as 'dflash-long-seeded' "
                                       r"\(benchmark/arms=seeded\), or set seeded.methods=false"),
        ("dflash-long-seeded", "long-old", r"^arm dflash-long-seeded: .*long-old was trained on the plain drafter"),
        # SpecOPD's two states are both checked: t1 here was trained on the other base than t0
        ("dflash-specopd-seeded", "long-plain", r"^arm dflash-specopd-seeded: .*sopd/t1 was trained on the plain"),
        ("dflash-specopd", "long-plain", r"^arm dflash-specopd: .*sopd/t0 was trained on the seeded drafter"),
    ]
    for name, long, msg in cases:
        with pytest.raises(DraftlabError, match=msg) as e:
            build_arm(name, ctx(long))
        assert "\n" not in str(e.value)
    # a drafter that no folder records (a test stub) is not checked
    stub = object()
    arm = build_arm("dflash-long-seeded", ArmContext(t, BenchmarkConfig(), Checkpoints("", "", "nowhere", ""),
                                                     load_drafter=lambda f: stub))
    assert arm.drafter is stub


def test_the_corrector_stage_refuses_a_specopd_state_on_the_other_base(root, llama_target, tmp_path, monkeypatch):
    from draftlab.pipeline.steps import corrector as stage

    t = llama_target
    _folders(t, tmp_path, {"t0": ("none", "plain"), "t1": ("none", "plain")})
    specopd = {"specopd": str(tmp_path / "t0"), "specopd-t1": str(tmp_path / "t1")}
    stage.check_specopd_base(specopd, method_base(False), ["dcoco", "specopd-dcoco", "specopd-dcoco-t1"])
    stage.check_specopd_base(specopd, method_base(True), ["dcoco", "dspark"])  # no composed variant: not read
    with pytest.raises(DraftlabError, match=r"t0 \(SpecOPD's state for the specopd variants\) was trained on the plain "
                                            r"drafter, but this stage trains on the seeded one \(models/drafter/seeded\); "
                                            r"re-run the specopd stage") as e:
        stage.check_specopd_base(specopd, method_base(True), ["specopd-dcoco"])
    assert "\n" not in str(e.value)


def test_sizing_proxies_a_seeded_method_by_its_plain_twin(root, tmp_path, capsys):
    """tools/size_benchmark.py --paired --proxy-twins on a pilot from before the seeded methods: a `-seeded` method
    arm is sized by its plain twin's rows (said so), the seeded drafter's own arm gets none."""
    import json
    import sys

    from draftlab.measure.sizing import pair_sizes, with_proxies
    from draftlab.params import load_params

    pilot = json.loads((root / "results" / "benchmark.json").read_text())

    def strip(table: dict) -> dict:
        """A pilot from before the seeded methods: no seeded arm; method arms the committed run has only on the seeded
        drafter stand in under their plain names (their rows are only sizing input here)."""
        out = {k: v for k, v in table.items() if not k.endswith(SEEDED_SUFFIX)}
        for k, v in table.items():
            if k.endswith(SEEDED_SUFFIX) and k != "dflash" + SEEDED_SUFFIX:
                out.setdefault(k[: -len(SEEDED_SUFFIX)], v)
        return out

    pilot = {**pilot, "summary": strip(pilot["summary"]), "simulated": strip(pilot.get("simulated") or {}),
             "suites": {s: {tk: strip(a) for tk, a in temps.items()} for s, temps in pilot["suites"].items()},
             "concurrency": {tk: strip(a) for tk, a in (pilot.get("concurrency") or {}).items()}}
    proxied = with_proxies(pilot, {"dspark-seeded": "dspark"})
    assert proxied["suites"]["mt-bench"]["t0"]["dspark-seeded"] is pilot["suites"]["mt-bench"]["t0"]["dspark"]
    assert "dspark-seeded" not in pilot["suites"]["mt-bench"]["t0"]  # the pilot itself is not changed
    f = tmp_path / "pilot.json"
    f.write_text(json.dumps(pilot))
    sys.path.insert(0, str(root / "tools"))
    import size_benchmark

    args = [str(f), "--paired", "--params", str(root / "params.yaml"), "--json"]
    plans = []
    for extra in ([], ["--proxy-twins"]):
        assert size_benchmark.main([*args, *extra]) == 0
        plans.append(json.loads(capsys.readouterr().out)["pairs"])
    pair, own = "dspark-seeded vs dcoco-seeded (t0)", "dflash-seeded vs pld (t0)"
    assert plans[0][pair]["missing"] and not plans[1][pair]["missing"]
    suites = load_params(root / "params.yaml").benchmark.suites
    plain = pair_sizes(pilot, [["dspark", "dcoco"]], [0.0], suites=suites)["dspark vs dcoco (t0)"]
    assert plans[1][pair]["tau_sd_by_suite"] == plain["tau_sd_by_suite"]  # the twins' spreads, as they were measured
    assert plans[0][own]["missing"] and plans[1][own]["missing"]  # dflash-seeded is another drafter, not a method
    assert size_benchmark.main(args[:-1] + ["--proxy-twins"]) == 0
    assert "dspark-seeded by dspark" in capsys.readouterr().out
