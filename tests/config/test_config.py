"""Config: presets compose, params.yaml is the default composition, bad keys/values fail in one line."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from draftlab.errors import ConfigError
from draftlab.params import build_params, compose_params, load_params


def test_committed_params_is_default_composition(root):
    committed = OmegaConf.to_container(OmegaConf.load(root / "params.yaml"))
    assert committed == compose_params([], root / "conf"), "params.yaml is stale: run `make params`"


@pytest.mark.parametrize("target", ["smollm2-135m", "qwen3-4b", "qwen3-8b", "llama-3.1-8b", "tiny-random"])
@pytest.mark.parametrize("profile", ["smoke", "cpu", "cpu-long", "gpu"])
def test_every_preset_composes_and_validates(root, target, profile):
    from draftlab.arms.grammar import arm_names

    raw = compose_params([f"target={target}", f"profile={profile}"], root / "conf")
    params = build_params(raw, arms=arm_names())  # arm names too: the method arms match seeded.methods
    assert params.target.name == target and params.profile.name == profile


def test_unknown_key_names_valid_choices(root):
    with pytest.raises(ConfigError, match=r"unknown key 'reference.batch_sze' \(did you mean 'batch_size'\?\)"):
        load_params(root / "params.yaml", ["reference.batch_sze=3"])
    with pytest.raises(ConfigError, match="unknown key 'nosuch'"):
        build_params({"nosuch": {"a": 1}})


def test_a_moved_key_names_its_new_place(root):
    """corrector.dim etc. moved under corrector.families.<family> (each family's own settings): the old spelling,
    as an override or in a saved params file, names the new key instead of listing corrector's keys."""
    with pytest.raises(ConfigError, match=r"'corrector.dim' has moved: it is now corrector.families.dcoco.dim"):
        load_params(root / "params.yaml", ["corrector.dim=64"])
    with pytest.raises(ConfigError, match=r"'corrector.seq_rank' has moved: .*corrector.families.dspark.rank"):
        build_params({"corrector": {"seq_rank": 8}})
    dcoco = load_params(root / "params.yaml", ["corrector.families.dcoco.dim=64"]).corrector.families["dcoco"]
    assert (dcoco["dim"] if isinstance(dcoco, dict) else dcoco.dim) == 64


def test_wrong_type_and_impossible_values(root):
    with pytest.raises(ConfigError, match="reference.batch_size"):
        load_params(root / "params.yaml", ["reference.batch_size=abc"])
    with pytest.raises(ConfigError, match=r"reference.batch_size=-1 must be > 0"):
        load_params(root / "params.yaml", ["reference.batch_size=-1"])
    with pytest.raises(ConfigError, match="choose one of: auto, float32, bfloat16, float16"):
        load_params(root / "params.yaml", ["target.dtype=fp8"])
    with pytest.raises(ConfigError, match="target.path must name"):
        load_params(root / "params.yaml", ["target.source=local"])
    with pytest.raises(ConfigError, match=r"specopd.temperature=0.0 must be > 0"):  # E2E-TV needs a distribution
        load_params(root / "params.yaml", ["specopd.temperature=0.0"])
    with pytest.raises(ConfigError, match=r"corrector.grad_hidden=1.5 must lie in \[0, 1\]"):
        load_params(root / "params.yaml", ["corrector.grad_hidden=1.5"])
    with pytest.raises(ConfigError, match=r"corrector.frozen_warmup=1.0 must lie in \[0, 1\)"):
        load_params(root / "params.yaml", ["corrector.frozen_warmup=1.0"])


def test_unknown_preset_lists_presets(root):
    with pytest.raises(ConfigError, match="choose one of: cpu, cpu-long, drift, gpu, gpu-small, smoke, toy"):
        compose_params(["profile=fast"], root / "conf")


def test_stage_cli_prints_one_line_error(root, tmp_path):
    (tmp_path / "params.yaml").write_text((root / "params.yaml").read_text().replace("batch_size:", "batch_sise:", 1))
    r = subprocess.run([sys.executable, "-m", "draftlab.pipeline", "reference"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 2
    lines = [l for l in r.stderr.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and "unknown key 'reference.batch_sise'" in lines[0], r.stderr


# ---- names checked in the schema: arms against the arm table, suites against packaged + local ----------------


def test_method_names_are_checked_against_the_methods_tables(root):
    """The corrector's variants and path rules and SpecOPD's baselines are checked against the tables their
    packages own, handed in by the caller (the configuration imports no method); the default baselines are all."""
    from draftlab.corrector.families import variant_table
    from draftlab.pipeline.names import method_names
    from draftlab.specopd.objectives import BASELINES

    names = method_names()
    assert (tuple(names.variants), tuple(names.baselines)) == (tuple(variant_table()), BASELINES)
    from draftlab.config import SpecOPDConfig

    assert tuple(SpecOPDConfig().baselines) == BASELINES
    for override, key in (("corrector.variants=[dcoco,dccoo]", "corrector.variants[]='dccoo'"),
                          ("corrector.families.dcoco.path_rule=greedier", "corrector.families.dcoco.path_rule='greedier'"),
                          ("specopd.baselines=[offpolicy]", "specopd.baselines[]='offpolicy'")):
        with pytest.raises(ConfigError, match=rf"^{re.escape(key)} is not valid; choose one of: "):
            load_params(root / "params.yaml", [override], names=names)
        load_params(root / "params.yaml", [override])  # without the tables the names are not checked


def test_arm_names_are_checked_against_the_arm_table(root):
    from draftlab.arms.grammar import ARM_TABLE, arm_names

    known = arm_names()
    assert known == tuple(ARM_TABLE) and "dflash-specopd" in known
    with pytest.raises(ConfigError, match=r"benchmark.arms names unknown arm 'nosuch'; known arms: ") as e:
        load_params(root / "params.yaml", ["benchmark.arms=[ar,dflash,nosuch]"], arms=known)
    assert all(name in str(e.value) for name in ARM_TABLE) and "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"benchmark.arms names unknown arm 'nosuch'"):  # not concurrency_arms
        load_params(root / "params.yaml", ["benchmark.arms=[nosuch]"], arms=known)
    with pytest.raises(ConfigError, match=r"unknown arm 'dcocoo' \(did you mean 'dcoco'\?\)"):
        compose_params(["benchmark.arms=[ar,dcocoo]"], root / "conf", arms=known)
    # the sweep may name arms that do not run (they are skipped): the two-arm preset is valid
    two = ["benchmark.arms=[ar,dflash]", "benchmark.ablation_arms=[]", "benchmark.pairs=[[dflash,ar]]",
           "benchmark.sampled_arms=[]"]
    p = load_params(root / "params.yaml", two, arms=known)
    assert {"dcoco-seeded", "pld"} <= set(p.benchmark.concurrency_arms)  # swept arms outside `arms`
    assert compose_params(["benchmark/arms=two"], root / "conf", arms=known)["benchmark"]["arms"] == ["ar", "dflash"]
    with pytest.raises(ConfigError, match=r"benchmark.concurrency_arms names unknown arm 'nosuch'"):
        load_params(root / "params.yaml", ["benchmark.concurrency_arms=[ar,nosuch]"], arms=known)
    with pytest.raises(ConfigError, match=r"benchmark.concurrency_base names unknown arm 'dflsh'"):
        load_params(root / "params.yaml", ["benchmark.concurrency_base=dflsh"], arms=known)
    with pytest.raises(ConfigError, match=r"benchmark.arms names 'ar' 2 times"):
        load_params(root / "params.yaml", ["benchmark.arms=[ar,dflash,ar]", *two[1:]], arms=known)
    # a new entry in the table is a valid name at once (issue 13's arms need no config edit)
    assert load_params(root / "params.yaml", ["benchmark.arms=[ar,dflash,pld]", *two[1:]],
                       arms=[*known, "pld"]).benchmark.arms == ["ar", "dflash", "pld"]


def test_headline_ablation_and_pairs_fail_in_one_line(root):
    """Issue 23's bad input: an arm in both lists, an ablation arm not in the table, a pair (or a T>0 arm) naming
    an arm that does not run, a subsample larger than the sample."""
    from draftlab.arms.grammar import arm_names

    known = arm_names()
    cases = [
        (["benchmark.ablation_arms=[dflash-long-seeded,specopd-dcoco-seeded,dcoco-seeded]"],
         r"^benchmark: arm 'dcoco-seeded' is in both benchmark.arms and benchmark.ablation_arms; keep it in one list"),
        (["benchmark.ablation_arms=[dflash-long-seeded,specopd-dcoco-seeded,nosuch]"],
         r"^benchmark.ablation_arms names unknown arm 'nosuch'; known arms: "),
        (["benchmark.pairs=[[dcoco-seeded,dcoco-nopair-seeded]]", "benchmark.ablation_arms=[]"],
         r"^benchmark.pairs names 'dcoco-nopair-seeded', which does not run; add it to benchmark.arms or "
         r"benchmark.ablation_arms, or drop it from benchmark.pairs"),
        (["benchmark.sampled_arms=[ar,dcoco-nopair-seeded]",
          "benchmark.ablation_arms=[dflash-long-seeded,specopd-dcoco-seeded]"],
         r"^benchmark.sampled_arms names 'dcoco-nopair-seeded', which does not run"),
        (["benchmark.prompts_per_suite=5", "benchmark.ablation_prompts_per_suite=9"],
         r"^benchmark.ablation_prompts_per_suite=9 exceeds benchmark.prompts_per_suite=5; they are the first prompts"),
        # a pair's extra prompts (pair_prompts_per_suite): a listed pair of named headline arms, above the sample
        (["benchmark.pair_prompts_per_suite={pld vs hf-generte-pld: 9}"],
         r"^benchmark.pair_prompts_per_suite names unknown arm 'hf-generte-pld' \(did you mean 'hf-generate-pld'\?\)"),
        (["benchmark.pair_prompts_per_suite={pld and hf-generate-pld: 9}"],
         r"^benchmark.pair_prompts_per_suite: key 'pld and hf-generate-pld' must name a pair as 'a vs b'"),
        (["benchmark.prompts_per_suite=3", "benchmark.pair_prompts_per_suite={pld vs hf-generate-pld: 3}"],
         r"^benchmark.pair_prompts_per_suite\['pld vs hf-generate-pld'\]=3 must be an integer above "
         r"benchmark.prompts_per_suite=3"),
        (["benchmark.pairs=[[best,pld]]", "benchmark.pair_prompts_per_suite={best vs pld: 9}"],
         r"^benchmark.pair_prompts_per_suite: 'best vs pld' names `best`, which is chosen after the run"),
        (["benchmark.ablation_arms=[dflash-long-seeded]", "benchmark.pairs=[[dflash-long-seeded,pld]]",
          "benchmark.pair_prompts_per_suite={dflash-long-seeded vs pld: 9}"],
         r"^benchmark.pair_prompts_per_suite: 'dflash-long-seeded vs pld' has the ablation arm 'dflash-long-seeded'"),
    ]
    for overrides, msg in cases:
        with pytest.raises(ConfigError, match=msg) as e:
            load_params(root / "params.yaml", overrides, arms=known)
        assert "\n" not in str(e.value)
    p = load_params(root / "params.yaml", arms=known).benchmark  # the cpu default: every pair's arms run
    assert p.pair_extra() == p.pair_prompts_per_suite and p.prompts_selected() > p.prompts_per_suite
    # a pair no longer listed (pairs overridden) keeps its entry but decodes no extra prompt; either order counts
    q = load_params(root / "params.yaml", ["benchmark.pairs=[[pld,dflash-seeded]]"], arms=known).benchmark
    n = p.pair_prompts_per_suite["dflash-seeded vs pld"]
    assert q.pair_extra() == {"dflash-seeded vs pld": n} and q.t0_prompts("dcoco-seeded") == q.prompts_per_suite
    assert not set(p.arms) & set(p.ablation_arms) and p.running_arms() == [*p.arms, *p.ablation_arms]


def test_local_suites_in_the_config(root, tmp_path):
    good = tmp_path / "mine.jsonl"
    good.write_text('{"prompt": "Summarise the plot of Hamlet."}\n{"prompt": "What is 17 * 23?"}\n')
    ok = [f"data.local_suites.mine={good}", "benchmark.suites=[mt-bench,mine]"]
    p = load_params(root / "params.yaml", ok)
    assert p.data.local_suites == {"mine": str(good)} and p.benchmark.suites == ["mt-bench", "mine"]
    assert load_params(root / "params.yaml", [*ok, "data.eval_suites=[humaneval,mine]"]).data.eval_suites[-1] == "mine"
    with pytest.raises(ConfigError, match=r"benchmark.suites names unknown suite 'mien'; packaged: .*; local "
                                          r"\(data.local_suites\): mine; add your own file with data.local_suites.mien="):
        load_params(root / "params.yaml", [f"data.local_suites.mine={good}", "benchmark.suites=[mien]"])
    with pytest.raises(ConfigError, match=r"data.eval_suites names unknown suite 'sharegpt'"):
        load_params(root / "params.yaml", ["data.eval_suites=[sharegpt]"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": 5}\n')
    with pytest.raises(ConfigError, match=rf"^{bad}:2: 'prompt' must be a string, got int \(5\)$"):
        load_params(root / "params.yaml", [f"data.local_suites.mine={bad}"])
    with pytest.raises(ConfigError, match=rf"{tmp_path}/nope.jsonl not found \(data.local_suites.mine\)"):
        load_params(root / "params.yaml", [f"data.local_suites.mine={tmp_path}/nope.jsonl"])
    with pytest.raises(ConfigError, match=rf"^{bad}:2: 'prompt' must be a string"):  # training prompts too
        load_params(root / "params.yaml", [f"data.local_jsonl={bad}"])
    with pytest.raises(ConfigError, match=r"'mt-bench' is a packaged suite's name"):
        load_params(root / "params.yaml", [f"data.local_suites.mt-bench={good}"])


def test_dvc_style_overrides_fail_in_one_line(root, tmp_path):
    """`strict` composition follows Hydra's key rules as `dvc exp run -S` does, each error as one line."""
    def err(*ovs):
        with pytest.raises(ConfigError) as e:
            compose_params(list(ovs), root / "conf", strict=True)
        assert "\n" not in str(e.value)
        return str(e.value)

    assert "unknown key 'pretrain.lrr' (did you mean 'lr'?)" in err("pretrain.lrr=1")
    assert err("profile=nosuch") == "profile='nosuch' is not a preset; choose one of: cpu, cpu-long, drift, gpu, gpu-small, smoke, toy"
    assert "add it with +benchmark.batch_size=2" in err("benchmark.batch_size=2")
    assert "drop the '+' (pretrain.lr=0.002)" in err("+pretrain.lr=0.002")
    f = tmp_path / "mine.jsonl"
    f.write_text('{"prompt": "hello"}\n')
    assert "add it with +data.local_suites.mine=" in err(f"data.local_suites.mine={f}")
    raw = compose_params([f"+data.local_suites.mine={f}", "benchmark.suites=[mt-bench,mine]",
                          "+benchmark.batch_size=2", "params.yaml:pretrain.lr=0.002"], root / "conf", strict=True)
    assert raw["data"]["local_suites"] == {"mine": str(f)} and raw["benchmark"]["batch_size"] == 2
    assert raw["pretrain"]["lr"] == 0.002


@pytest.mark.parametrize("override, line", [
    ("target.toy.frozen_hash=null", "target.toy.frozen_hash=null is not valid: target.toy.frozen_hash takes text (write '' "
                                    "for none)"),
    ("pretrain.lr=null", "pretrain.lr=null is not valid: pretrain.lr takes a number"),
    ("pretrain.max_steps=abc", "pretrain.max_steps=abc is not valid: pretrain.max_steps takes a whole number")])
def test_a_value_of_the_wrong_type_is_our_line_not_omegaconfs(root, override, line):
    """The schema's refusals in the workbench's words (the key, the value, what it takes), never OmegaConf's
    ("Incompatible value 'None' for field of type 'str'")."""
    with pytest.raises(ConfigError) as e:
        build_params(compose_params(["target=toy", override], root / "conf"))
    assert str(e.value) == line and "Incompatible" not in str(e.value) and "field of type" not in str(e.value)


def test_composing_where_there_are_no_presets_is_one_line(tmp_path):
    """Hydra's "Primary config directory not found." never reaches a user: the folder and the fix, in one line."""
    with pytest.raises(ConfigError, match=r"no presets folder .*conf \(its config.yaml\); run from the repository root, "
                                          r"or in a world's folder give the root's: --conf ../../conf") as e:
        compose_params(["profile=toy"], tmp_path / "conf")
    assert "\n" not in str(e.value)


def test_seeded_section_resolves_and_fails_in_one_line(root):
    """The `seeded` section (issue 20): overrides of drafter / pretrain with seed=lookup implied; bad keys, types
    and values name `seeded.<section>.<key>`; a disabled seeded drafter refuses the dflash-seeded arm."""
    p = load_params(root / "params.yaml")
    assert p.seeded.enabled and "dflash-seeded" in p.benchmark.arms  # the cpu default trains and benchmarks it
    d, t = p.seeded.resolve(p.drafter, p.pretrain)
    assert d.seed == "lookup" and p.drafter.seed == "none" and d.seed_logit and d.block_size == p.drafter.block_size
    q = load_params(root / "params.yaml", ["seeded.pretrain={max_minutes: 2, lr: 0.002}",
                                           "seeded.drafter={draft_vocab_size: 0}"])
    d, t = q.seeded.resolve(q.drafter, q.pretrain)
    assert (t.max_minutes, t.lr, t.batch_size, d.draft_vocab_size) == (2.0, 0.002, p.pretrain.batch_size, 0)
    assert isinstance(t.max_minutes, float) and q.pretrain.max_minutes == p.pretrain.max_minutes
    cases = [
        (["seeded.pretrain={lrr: 1}"], r"^unknown key 'seeded.pretrain.lrr' \(did you mean 'lr'\?\)"),
        (["seeded.pretrain={lr: -1}"], r"^seeded.pretrain.lr=-1.0 must be > 0"),
        (["seeded.drafter={num_layers: two}"], r"^seeded.drafter.num_layers='two' must be of type int"),
        (["seeded.drafter={seed_logit: 1}"], r"^seeded.drafter.seed_logit=1 must be of type bool"),
        (["seeded.drafter={seed_min_match: 5}"], r"^seeded.drafter.seed_min_match=5 must lie in 1..seeded.drafter"),
        (["seeded.drafter={seed: none}"], r"^seeded.drafter.seed='none': the seeded drafter always seeds"),
        (["seeded.drafter={block_size: 6}"], r"^seeded.drafter.block_size=6 differs from drafter.block_size=8"),
        (["seeded.enabled=false", "seeded.methods=false"],
         r"^benchmark.arms names 'dflash-seeded' but seeded.enabled=false .*set seeded.enabled=true or drop it from "
         r"benchmark.arms"),
        (["seeded.enabled=false", "seeded.methods=false", "benchmark.arms=[ar,dflash-tree16-seeded]",
          "benchmark.sampled_arms=[ar]", "benchmark.pairs=[]", "benchmark.concurrency_arms=[ar]"],
         r"^benchmark.arms names 'dflash-tree16-seeded' but seeded.enabled=false"),  # the seeded drafter's tree
    ]
    for overrides, msg in cases:
        with pytest.raises(ConfigError, match=msg) as e:
            load_params(root / "params.yaml", overrides)
        assert "\n" not in str(e.value)
    gpu = build_params(compose_params(["profile=gpu"], root / "conf"))
    assert not gpu.seeded.enabled and "dflash-seeded" not in gpu.benchmark.running_arms()
    with pytest.raises(ConfigError, match=r"^benchmark.arms names 'dflash-seeded' but seeded.enabled=false"):
        build_params(compose_params(["profile=gpu", "benchmark/arms=all"], root / "conf"))
    smoke = build_params(compose_params(["profile=smoke"], root / "conf"))
    assert smoke.seeded.enabled and "dflash-seeded" in smoke.benchmark.arms
    assert smoke.seeded.resolve(smoke.drafter, smoke.pretrain)[1].max_steps < smoke.pretrain.max_steps


def test_seeded_methods_name_their_arms_and_fail_in_one_line(root):
    """Issue 20 item 5: seeded.methods (cpu, cpu-long, smoke: true; gpu: false) needs seeded.enabled and another
    configured base; a method arm whose name does not match the base it picks (`-seeded` or not) is one line in any
    list of the benchmark section."""
    from draftlab.arms.grammar import arm_names

    known = arm_names()
    cpu = load_params(root / "params.yaml", arms=known)
    assert cpu.seeded.methods and {"dcoco-seeded", "dflash-specopd-seeded", "dflash"} <= set(cpu.benchmark.arms)
    assert not {"dcoco", "dflash-specopd"} & set(cpu.benchmark.running_arms())
    gpu = build_params(compose_params(["profile=gpu"], root / "conf"), arms=known)
    assert not gpu.seeded.methods and "dcoco" in gpu.benchmark.arms
    plain = build_params(compose_params(["seeded.methods=false", "benchmark/arms=all"], root / "conf"), arms=known)
    assert "dcoco" in plain.benchmark.arms and "dflash-seeded" in plain.benchmark.arms
    small = ["benchmark.ablation_arms=[]", "benchmark.sampled_arms=[]", "benchmark.pairs=[]"]
    cases = [
        (["seeded.enabled=false"], r"^seeded.methods=true needs seeded.enabled=true .*set seeded.enabled=true or "
                                   r"seeded.methods=false$"),
        (["specopd.base_drafter=models/drafter/imported"], r"^specopd.base_drafter='models/drafter/imported' conflicts "
                                                           r"with seeded.methods=true"),
        (["corrector.base_drafter=x"], r"^corrector.base_drafter='x' conflicts with seeded.methods=true"),
        (["benchmark.arms=[ar,dflash,dcoco]", *small],
         r"^benchmark.arms names 'dcoco', a method trained on the plain drafter, but seeded.methods=true .*name it "
         r"'dcoco-seeded' \(benchmark/arms=seeded lists them\) or set seeded.methods=false$"),
        (["benchmark.concurrency_arms=[ar,dspark]"], r"^benchmark.concurrency_arms names 'dspark', a method trained on "
                                                     r"the plain drafter"),
        (["benchmark.pairs=[[dcoco-seeded,dflash-long]]"], r"^benchmark.pairs names 'dflash-long', a method"),
        (["seeded.methods=false"], r"^benchmark.arms names 'dflash2-seeded', a method trained on the seeded drafter, "
                                   r"but seeded.methods=false .*name it 'dflash2' \(benchmark/arms=all lists them\) or set "
                                   r"seeded.methods=true$"),
    ]
    for overrides, msg in cases:
        with pytest.raises(ConfigError, match=msg) as e:
            load_params(root / "params.yaml", overrides, arms=known)
        assert "\n" not in str(e.value)
    # the plain drafter's own arms and the peers are no method: fine under either flag
    for flag in ("true", "false"):
        p = load_params(root / "params.yaml", [f"seeded.methods={flag}", "benchmark.arms=[ar,dflash,dflash-seeded,"
                                               "dflash-pld,dflash-ref,pld]", *small, "benchmark.concurrency_arms=[]"],
                        arms=known)
        assert p.seeded.methods is (flag == "true")
