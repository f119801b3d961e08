"""The arm grammar (`method[-option][-seeded][-cut]`, draftlab.arms.grammar): one resolver over about a dozen entries
parses every arm name the presets, the README (and the docs pages that took over its text) and the committed results use, and an unknown name is one line."""
from __future__ import annotations

import json
import re

import pytest

from conftest import arms_preset
from draftlab.arms.grammar import ARM_TABLE, GRAMMAR, arm_name, arm_names, parse, resolve
from draftlab.corrector.families import variant_table
from draftlab.errors import DraftlabError


def test_a_dozen_entries_resolve_every_name_once():
    names = arm_names()
    assert len(GRAMMAR) <= 12 and len(names) == len(set(names)) == 83  # 35 + the tree options (dflash-, dcoco-,
    # lilicorr-[-seeded]) + the lilicorr arms (and -seeded) + the sampled walks (six, and -seeded)
    assert all(arm_name(*parse(n)) == n for n in names)  # the grammar writes each name back as it read it
    assert tuple(ARM_TABLE) == names


def test_every_arm_the_presets_the_readme_and_the_results_name_resolves(root):
    used = set()
    for preset in (root / "conf" / "benchmark" / "arms").glob("*.yaml"):
        p = arms_preset(preset.stem)
        used |= {*p["arms"], *p["ablation_arms"], *p.get("sampled_arms", []), *p["concurrency_arms"],
                 *(a for pair in p.get("pairs", []) for a in pair if a != "best")}
    readme = set()  # the README and the pages that took over its reference text (usage, pipeline, benchmark, glossary)
    for page in ("README.md", "docs/usage.md", "docs/pipeline.md", "docs/benchmark.md", "docs/glossary.md"):
        readme |= set(re.findall(r"`([a-z0-9][a-z0-9.-]*)`", (root / page).read_text()))
    used |= {t for t in readme if any(t == m or t.startswith(m + "-") for m in GRAMMAR)} - set(variant_table())
    detail = json.loads((root / "results" / "benchmark.json").read_text())
    used |= set(detail["summary"]) | {a for p in detail["pairs"] for a in (p["a"], p["b"])}
    used |= {f.stem for f in (root / "metrics" / "benchmark").glob("*.json")}
    assert len(used) > 20
    for name in sorted(used):
        assert name in ARM_TABLE and callable(resolve(name)), name


@pytest.mark.parametrize("name", ["dcocoo", "dflash-cut", "ar-seeded", "dflash-ref-seeded", "dflash-pld-seeded", "dflash-tree12",
                                  "dcoco-sg", "pld-seeded-cut"])
def test_an_unknown_arm_is_one_line_naming_the_grammar(name):
    with pytest.raises(DraftlabError) as e:
        resolve(name)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"unknown benchmark arm '{name}'; an arm is method[-option][-seeded][-cut]: ")
    assert ("dcoco[-seeded] (globalsum, geometric, nopair, nocand, frozen, tree8, tree16, tree32, tree64, treecost, "
            "sampled)") in msg
    assert "hf-generate (pld)" in msg


def test_an_arm_needs_the_corrector_variants_it_decodes_trained(root, monkeypatch):
    """An arm that decodes a corrector variant the corrector stage does not train is one line at check time, not a
    failed benchmark after every stage before it (the toy profile once listed dspark, domino and dflash2 without
    training them); every preset combination passes."""
    from draftlab.arms.grammar import check_variants, variants_of
    from draftlab.params import build_params, compose_params

    assert variants_of(resolve("dcoco-nopair")) == ("nopair",)
    assert variants_of(resolve("dcoco-seeded")) == ("dcoco",)
    assert variants_of(resolve("specopd-dcoco")) == ("specopd-dcoco", "specopd-dcoco-t1")
    assert variants_of(resolve("dflash-specopd")) == () and variants_of(resolve("pld")) == ()
    check_variants(["ar", "dcoco", "dcoco-geometric", "dspark-seeded"], ["dcoco", "dspark"])
    with pytest.raises(DraftlabError, match=r"^benchmark arm 'domino' decodes the corrector variant\(s\) domino, which "
                                            r"corrector.variants \(dcoco\) does not train") as e:
        check_variants(["dcoco", "domino"], ["dcoco"])
    assert "\n" not in str(e.value)
    assert variants_of(resolve("dflash-long")) == ("control",)
    check_variants(["dflash-long"], [])
    with pytest.raises(DraftlabError, match=r"^benchmark arm 'dflash-long' decodes the control drafter .* set "
                                            r"corrector.control=true or drop the arm$"):
        check_variants(["dflash-long"], ["dcoco"], control=False)
    for combo in json.loads((root / "tests" / "fixtures" / "effective_params.json").read_text()):
        profile, target = combo.split("/")
        monkeypatch.chdir(root / "worlds" / profile if (root / "worlds" / profile).is_dir() else root)
        p = build_params(compose_params([f"target={target}", f"profile={profile}"], root / "conf"))
        b = p.benchmark
        check_variants([*b.arms, *b.ablation_arms, *b.sampled_arms, *b.concurrency_arms], p.corrector.variants,
                       p.corrector.control)
