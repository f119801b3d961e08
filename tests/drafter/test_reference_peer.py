"""The authors' DFlash reference (`dflash` 0.1.0) against the project: export / import of the reference
checkpoint format, and — on a tiny random Qwen3 target with a full-vocabulary drafter — identical greedy
tokens AND identical per-round acceptance lengths between their `dflash_generate` (loaded from the
exported folder) and the project's engine. Also the `dflash-ref` and `hf-generate` arms."""
from __future__ import annotations

import json

import pytest
import torch

from conftest import tiny_target
from draftlab.decoding import SamplingParams, SpeculativeEngine, generate_ar
from draftlab.drafter.checkpoint import load_drafter, save_drafter
from draftlab.drafter.model import DFlashDrafter, DrafterDesign, arch_from_target
from draftlab.drafter.refformat import export_reference, import_reference, to_reference_names
from draftlab.errors import DraftlabError

dflash = pytest.importorskip("dflash.model", reason="dflash==0.1.0 (requirements-nodeps.txt) is not installed")

S = 5


@pytest.fixture(scope="module")
def target():
    return tiny_target("qwen3")  # greedy output of a random tiny target loops on a few tokens


def _drafter(t, mask: int, seed: int = 1, vocab=None) -> DFlashDrafter:
    """A full-vocabulary random drafter whose MASK is `mask` (so its proposals are often `mask`: a target
    that loops on it accepts whole blocks, one that does not rejects them — a mix of acceptance lengths).
    The layers' output projections are scaled down, so the context still moves the proposals a little."""
    torch.manual_seed(seed)
    arch = arch_from_target(t, DrafterDesign(block_size=S, num_layers=2, target_layer_ids=[1, 2], mask_token_id=mask,
                            draft_vocab_size=0 if vocab is None else len(vocab)))
    d = DFlashDrafter.from_target(arch, t, vocab).eval()
    with torch.no_grad():
        for layer in d.layers:
            layer.o_proj.weight.mul_(0.5)
            layer.down_proj.weight.mul_(0.5)
    return d


def _prompts(t):
    g = torch.Generator().manual_seed(0)
    return [torch.randint(1, t.vocab_size, (n,), generator=g).tolist() for n in (7, 12, 5, 9)]


def test_names_round_trip():
    ours = {"fc.weight": 1, "layers.0.q_proj.weight": 2, "layers.1.k_norm.weight": 3, "layers.0.down_proj.weight": 4,
            "layers.0.input_layernorm.weight": 5, "norm.weight": 6}
    ref = to_reference_names(ours)
    assert ref["layers.0.self_attn.q_proj.weight"] == 2 and ref["layers.1.self_attn.k_norm.weight"] == 3
    assert ref["layers.0.mlp.down_proj.weight"] == 4 and ref["layers.0.input_layernorm.weight"] == 5
    from draftlab.drafter.refformat import from_reference_names

    assert from_reference_names(ref) == ours


@pytest.mark.filterwarnings("error::FutureWarning")  # dflash's past_key_values: renamed `cache`
def test_tokens_and_per_round_acceptance_equal_the_reference(target, tmp_path):
    """The cross-implementation check: the exported folder, loaded by the reference's own
    `DFlashDraftModel.from_pretrained`, decoded by `dflash_generate`, against our engine."""
    from dflash.model import DFlashDraftModel

    from draftlab.arms.peers import dflash_reference_generate

    t, max_new = target, 30
    lengths_seen: set[int] = set()
    for i, p in enumerate(_prompts(t)):
        ar = generate_ar(t, [p], max_new, eos_ids=[]).tokens[0]
        mask = max(set(ar[5:]), key=ar[5:].count)  # the token it loops on
        d = _drafter(t, mask, seed=i)
        export_reference(d, tmp_path / f"ref{i}")
        ref_model = DFlashDraftModel.from_pretrained(str(tmp_path / f"ref{i}")).eval()
        assert ref_model.block_size == S and list(ref_model.target_layer_ids) == [1, 2] and ref_model.mask_token_id == mask
        ref_tokens, ref_lengths = dflash_reference_generate(ref_model, t, p, max_new, [])
        ours = SpeculativeEngine(t, d).generate([p], max_new, eos_ids=[])
        assert ref_tokens == ours.tokens[0] == ar
        # per round: the reference records the tokens it kept (acc + 1, cut at max_new_tokens)
        emitted, ours_lengths, full = 1, [], []
        for a in ours.accepted[0]:
            remaining = max_new - emitted
            ours_lengths.append(min(a + 1, remaining))
            full.append(remaining + 1 >= S)  # the reference verifies a full block only while it fits
            emitted += ours_lengths[-1]
        assert len(ours_lengths) == len(ref_lengths)
        assert [x for x, f in zip(ours_lengths, full) if f] == [x for x, f in zip(ref_lengths, full) if f]
        lengths_seen |= set(ref_lengths)
    assert len(lengths_seen) >= 3  # partly accepted blocks were compared, not only all-or-nothing


def test_export_import_round_trip_and_refusals(target, tmp_path):
    t = target
    d = _drafter(t, mask=5)
    save_drafter(d, tmp_path / "ours")
    export_reference(load_drafter(tmp_path / "ours", t), tmp_path / "ref")
    cfg = json.loads((tmp_path / "ref" / "config.json").read_text())
    assert cfg["dflash_config"] == {"target_layer_ids": [1, 2], "mask_token_id": 5, "block_size": S}
    import_reference(tmp_path / "ref", tmp_path / "back")
    back = load_drafter(tmp_path / "back", t)
    sd, sd2 = d.state_dict(), back.state_dict()
    assert sd.keys() == sd2.keys() and all(torch.equal(sd[k], sd2[k]) for k in sd)
    # a draft vocabulary has no counterpart in the reference format: one line saying why
    small = _drafter(t, mask=5, vocab=torch.arange(0, t.vocab_size, 2))
    with pytest.raises(DraftlabError, match="draft vocabulary") as e:
        export_reference(small, tmp_path / "no")
    assert "\n" not in str(e.value) and not (tmp_path / "no").exists()
    # what this drafter cannot represent is refused on import
    cfg["dflash_config"]["conv_kernel_size"] = 4
    (tmp_path / "ref" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(DraftlabError, match="DFlash-2"):
        import_reference(tmp_path / "ref", tmp_path / "nope")
    with pytest.raises(DraftlabError, match="cannot import .*missing: no such folder"):
        import_reference(tmp_path / "missing", tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DraftlabError, match="no config.json"):
        import_reference(tmp_path / "empty", tmp_path / "nope")
    # our own drafter folder (even with a reduced draft vocabulary) is no export: said so, not "a reduced vocabulary"
    save_drafter(small, tmp_path / "small")
    for folder in ("ours", "small"):
        with pytest.raises(DraftlabError, match="it is not an export but a draftlab 'draftlab-dflash-v1' folder"):
            import_reference(tmp_path / folder, tmp_path / "nope")
    assert not (tmp_path / "nope").exists()


def test_cli_export_import(target, tmp_path, capsys):
    from draftlab.cli import main

    d = _drafter(target, mask=5)
    save_drafter(d, tmp_path / "ours")
    target.model.save_pretrained(tmp_path / "target")  # the export reads the target's depth and context length
    tgt = ["--target", str(tmp_path / "target")]
    assert main(["export", str(tmp_path / "ours"), str(tmp_path / "ref"), "--dtype", "float32", *tgt]) == 0
    assert main(["import", str(tmp_path / "ref"), str(tmp_path / "back")]) == 0
    back = load_drafter(tmp_path / "back", target)
    assert all(torch.equal(v, back.state_dict()[k]) for k, v in d.state_dict().items())
    small = _drafter(target, mask=5, vocab=torch.arange(0, target.vocab_size, 2))
    save_drafter(small, tmp_path / "small")
    capsys.readouterr()
    assert main(["export", str(tmp_path / "small"), str(tmp_path / "x"), *tgt]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "draft vocabulary" in err[0]


@pytest.mark.filterwarnings("error::FutureWarning")  # dflash's past_key_values: renamed `cache`
def test_reference_arms(target):
    """dflash-ref with a draft-vocabulary drafter (masked full head) and hf-generate: same greedy tokens as
    AR; dflash-ref's τ comes from the reference's own acceptance lengths."""
    from draftlab.arms.peers import DFlashRefArm, HFGenerateArm

    t = target
    prompts = _prompts(t)[:2]
    ar = generate_ar(t, prompts, 12, eos_ids=[]).tokens
    vocab = torch.tensor(sorted(set(range(0, t.vocab_size, 3)) | {a for x in ar for a in x}))
    d = _drafter(t, mask=int(vocab[4]), vocab=vocab)
    ref = DFlashRefArm("dflash-ref", t, d).generate(prompts, 12, SamplingParams(), [], None)
    assert ref.tokens == ar and len(ref.accepted) == 2 and ref.block_size == S
    eng = SpeculativeEngine(t, d).generate(prompts[:1], 12, eos_ids=[])
    assert [a for a in eng.accepted[0]][:2] == ref.accepted[0][:2]
    for k, n in ((0, 0), (3, 0), (3, 3)):  # plain; lookup with HF's n-gram default (2) and with pld.max_ngram's
        hf = HFGenerateArm("hf", t, k, max_ngram=n).generate(prompts, 12, SamplingParams(), [], None)
        assert hf.tokens == ar and hf.wall_s > 0
    eos = ar[0][4]
    hf = HFGenerateArm("hf", t, 0).generate(prompts, 12, SamplingParams(), [eos], None)
    assert hf.tokens == generate_ar(t, prompts, 12, eos_ids=[eos]).tokens
    with pytest.raises(DraftlabError, match="temperature 0"):
        HFGenerateArm("hf", t).generate(prompts, 4, SamplingParams(1.0), [], None)
