"""The family contract (draftlab.corrector.base.Contract, declared by a family's corrector class and named by its
record): what draftlab outside a family's own module may read of its correctors is the corrector interface, the
nn.Module API, and the methods of the capabilities its contract declares — nothing probed by attribute.

The proof cannot be dodged by spelling: LiLiCorr (the family that reads the most: the anchor, the teacher's logits;
offers pair rows and a sampled walk) is made strict for the test — any other attribute a draftlab module outside its
class's own modules reads raises `ContractViolation`, which `getattr(x, name, default)` and `hasattr` do not swallow —
and driven through the engine (greedy = AR), its sampled walk, a pair-ranked tree, co-training with the penalty (the
teacher) and the recipe's evaluation. Bad records are one line: a capability declared that the class lacks, an arm
that needs a capability the contract does not offer, a preset missing beside an outside family's module."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from draftlab.corrector.base import OFFERS, PAIR_ROWS, SAMPLED_WALK, TEACHER, Contract, Corrector
from draftlab.corrector.lilicorr import LiLiCorrCorrector
from draftlab.corrector.proposal import CorrectorProposal
from draftlab.decoding import SamplingParams, SpeculativeEngine, generate_ar
from draftlab.errors import DraftlabError
from test_lilicorr import SMALL, lilicorr
from test_sequential import ccfg, make_drafter, pcfg, refs  # noqa: F401 (refs: a fixture)

pytestmark = pytest.mark.usefixtures("one_thread")

INTERFACE = {"propose", "propose_rules", "loss", "save", "parameter_breakdown", "num_parameters", "contract",
             "CONTRACT", "FORMAT", "arch", "dtype", "device"}  # draftlab.corrector.base.Corrector
MODULE_API = {"parameters", "named_parameters", "buffers", "named_buffers", "train", "eval", "training", "to",
              "float", "requires_grad_", "state_dict", "load_state_dict", "modules", "named_modules", "children",
              "named_children", "zero_grad", "forward", "apply"}
BY_CAPABILITY = {**{k: {m} for k, m in OFFERS.items()}, TEACHER: {"teacher_weights"}}


class ContractViolation(Exception):
    """Not an AttributeError: a probe with a default (getattr(x, name, False), hasattr) cannot swallow it."""


def strict_getattribute(self, name):
    get = object.__getattribute__
    if name.startswith("__") or name in INTERFACE or name in MODULE_API:
        return get(self, name)
    caller = sys._getframe(1).f_globals.get("__name__", "")
    if not caller.startswith("draftlab.") or caller in {c.__module__ for c in type(self).__mro__}:
        return get(self, name)  # its own modules, torch, Lightning, this test
    c = get(self, "contract")
    if any(name in BY_CAPABILITY.get(k, ()) for k in (*c.reads, *c.offers)):
        return get(self, name)
    raise ContractViolation(f"{caller} read {name!r} of a {type(self).__name__}: not in its contract {c}")


@pytest.fixture()
def strict(monkeypatch):
    monkeypatch.setattr(LiLiCorrCorrector, "__getattribute__", strict_getattribute)


def probe(obj, name: str):
    """What a draftlab module probing `name` with a default gets (the probe runs in a module named draftlab.*)."""
    scope = {"__name__": "draftlab.somewhere", "obj": obj}
    exec(f"found = getattr(obj, {name!r}, 'absent')", scope)
    return scope["found"]


def test_the_strict_family_catches_a_probe(target, strict):
    c = lilicorr(make_drafter(target, S=5))
    with pytest.raises(ContractViolation, match="'reads_anchor'"):
        probe(c, "reads_anchor")  # what cotrain / evaluate / the proposal step / the tree did before the contract
    with pytest.raises(ContractViolation, match="'scores'"):
        probe(c, "scores")  # its own method, not the interface: only its module calls it
    assert callable(probe(c, "transition_rows")) and callable(probe(c, "sample"))  # declared: PAIR_ROWS, SAMPLED_WALK
    assert probe(c, "contract").reads == c.CONTRACT.reads - {TEACHER}  # the nopen preset: no teacher


def test_a_strict_family_through_the_engine_its_walk_and_a_tree(target, strict):
    from draftlab.corrector.tree import PairTreeProposal

    d = make_drafter(target, S=5, scale=3.0)
    c = lilicorr(d, trained=True)
    prompts = [[5, 9, 17, 3], [44, 2, 8, 61, 7, 30], [12, 90, 4]]
    ar = generate_ar(target, prompts, 12, eos_ids=[]).tokens
    assert SpeculativeEngine(target, d, CorrectorProposal(c)).generate(prompts, 12, eos_ids=[]).tokens == ar
    assert SpeculativeEngine(target, d, PairTreeProposal(c, 16)).generate(prompts, 12, eos_ids=[]).tokens == ar
    res = SpeculativeEngine(target, d, CorrectorProposal(c, walk="sampled")).generate(
        prompts, 12, SamplingParams(temperature=1.0), eos_ids=[], generator=torch.Generator().manual_seed(0))
    assert all(len(t) == 12 for t in res.tokens)


def test_a_strict_family_through_cotraining_with_its_teacher_and_evaluation(target, refs, strict):
    from draftlab.recipes.corrector.recipe import CotrainPaths, cotrain_from_references

    df, tmp = refs
    c = ccfg(variants=["lilicorr"], k=4, max_steps=4, families={"lilicorr": {**SMALL, "preset": "margin"}})
    out = cotrain_from_references(target, df, c, pcfg(), CotrainPaths({"pretrained": tmp / "pretrained"},
                                                                      tmp / "strict"), log=lambda m: None)
    o = out.variants["lilicorr"]
    assert TEACHER in o.corrector.contract.reads  # the margin preset weighs the penalty: the teacher was read
    assert o.report["steps"] == 4 and "sim_tau" in o.report


def test_bad_records_are_one_line(tmp_path, monkeypatch):
    from draftlab.corrector import families

    class NoRows(Corrector):  # declares pair rows without transition_rows
        CONTRACT = Contract(offers=frozenset({PAIR_ROWS}))

    pkg = tmp_path / "badfam"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    src = (Path(__file__).resolve().parents[2] / "examples/families/lastrank/lastrank.py").read_text()
    cases = {
        "offers": (src.replace("class LastRank(Corrector):\n", "class LastRank(Corrector):\n    CONTRACT = Contract("
                                "offers=frozenset({'pair_rows'}))\n").replace(
            "from draftlab.corrector.base import", "from draftlab.corrector.base import Contract,"),
                   "its contract offers pair_rows, but LastRank does not define transition_rows()"),
        "walk": (src.replace('arms={"lastrank": {"": ArmEntry("lastrank", colour="#000000")}}',
                             'arms={"lastrank": {"": ArmEntry("lastrank"), "sampled": ArmEntry("lastrank", walk='
                             '"sampled")}}'), "walks sampled, but its contract does not offer sampled_walk"),
    }
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, (text, msg) in cases.items():
        (pkg / f"{name}.py").write_text(text)
        with pytest.raises(DraftlabError, match=msg) as e:
            families.use((f"badfam.{name}",))
        assert "\n" not in str(e.value)
    families.use(())
    assert NoRows.CONTRACT.offers == {PAIR_ROWS} and SAMPLED_WALK in OFFERS


def test_an_outside_family_without_its_preset_is_one_line_at_check(tmp_path, root):
    """`draftlab check` on params naming a family module with no preset beside it."""
    pkg = tmp_path / "nopreset"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "lastrank.py").write_text((root / "examples/families/lastrank/lastrank.py").read_text())
    params = tmp_path / "params.yaml"
    composed = subprocess.run([sys.executable, "-m", "draftlab.cli", "compose", "target=tiny-random", "profile=smoke"],
                              cwd=root, capture_output=True, text=True, check=True).stdout
    raw = yaml.safe_load(composed)
    raw["corrector"]["family_modules"] = ["nopreset.lastrank"]  # named by hand: compose would refuse it already
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    r = subprocess.run([sys.executable, "-m", "draftlab.cli", "check", "--params", str(params)], cwd=root,
                       capture_output=True, text=True, env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert r.returncode != 0 and "has no preset" in r.stderr and "lastrank.yaml" in r.stderr, r.stderr[-800:]
    assert len([x for x in r.stderr.splitlines() if x.strip()]) == 1, r.stderr
