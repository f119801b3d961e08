"""Reference sequences and the frozen target's tap features, computed on the fly or cached on disk.

- `SequenceSet`: the references (prompt + response token ids, prompt length, split, suite) in one
  flat int32 array with offsets.
- `target_features(target, ids, valid, taps)`: one batched, right-padded, causal target pass ->
  tap features [B, T, n_taps*H] and the target's greedy token for every position
  (`greedy[t]` = argmax of the logits at t-1, i.e. the token greedy decoding puts at t; -1 at t=0).
- `batch_features(batch, target, taps, greedy)`: a batch's features, greedy tokens (and logits), from the cache
  the batch carries or a target pass over it.
- `FeatureStore`: the same for every sequence, stored once as fp16 (`feats.npy`, memory-mapped) and
  int32 (`greedy.npy`) under a folder keyed by the target, the taps and the data, so re-runs reuse it.
  Under DDP rank 0 builds it while the other ranks wait at a barrier, then they open it.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import Tensor

from draftlab.errors import DraftlabError
from draftlab.io import temp_dir
from draftlab.verifier.model import causal_mask

FEATURE_DTYPES = {"float16": np.float16, "float32": np.float32}


@dataclass
class SequenceSet:
    tokens: np.ndarray  # [N_tokens] int32, all sequences back to back
    offsets: np.ndarray  # [N+1] int64
    prompt_len: np.ndarray  # [N] int64
    split: np.ndarray  # [N] str: train / heldout / eval
    suite: np.ndarray  # [N] str

    def __len__(self) -> int:
        return len(self.prompt_len)

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def seq(self, i: int) -> np.ndarray:
        return self.tokens[self.offsets[i]:self.offsets[i + 1]]

    def indices(self, split: str, suite: str | None = None) -> list[int]:
        m = self.split == split
        if suite is not None:
            m &= self.suite == suite
        return np.nonzero(m)[0].tolist()

    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for a in (self.tokens.astype(np.int32), self.offsets.astype(np.int64), self.prompt_len.astype(np.int64)):
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()[:16]

    @classmethod
    def from_lists(cls, prompts: list[list[int]], responses: list[list[int]], split: list[str] | None = None,
                   suite: list[str] | None = None) -> "SequenceSet":
        seqs = [list(p) + list(r) for p, r in zip(prompts, responses)]
        lens = np.array([len(s) for s in seqs], dtype=np.int64)
        n = len(seqs)
        return cls(tokens=np.concatenate([np.asarray(s, dtype=np.int32) for s in seqs]) if n else np.zeros(0, np.int32),
                   offsets=np.concatenate([[0], np.cumsum(lens)]).astype(np.int64),
                   prompt_len=np.array([len(p) for p in prompts], dtype=np.int64),
                   split=np.array(split or ["train"] * n), suite=np.array(suite or [""] * n))

    @classmethod
    def from_dataframe(cls, df) -> "SequenceSet":
        """From data/references.parquet (columns prompt_ids, response_ids, split, suite)."""
        return cls.from_lists([list(x) for x in df.prompt_ids], [list(x) for x in df.response_ids],
                              list(df.split.astype(str)), list(df.suite.astype(str)))


@torch.no_grad()
def target_features(target, ids: Tensor, valid: Tensor, taps: list[int], greedy: bool = True) -> tuple[Tensor, Tensor | None]:
    """ids [B, T] right-padded, valid [B, T] bool -> (taps [B, T, n_taps*H] in the target's dtype,
    greedy [B, T] long with greedy[:, t] = argmax logits[:, t-1] and -1 at t=0; None if not asked: the target's
    pass then stops at the deepest tap, skipping the layers above it and the full-vocabulary head).
    Padding sits after every real token, so a causal pass leaves real positions exact."""
    return target_pass(target, ids, valid, taps, greedy)[:2]


def target_pass(target, ids: Tensor, valid: Tensor, taps: list[int],
                greedy: bool = True) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """`target_features` and the target's logits [B, T, V] (those at t predict position t+1; None without greedy)."""
    B, T = ids.shape
    dev = target.device
    ids, valid = ids.to(dev), valid.to(dev)
    mask = causal_mask(torch.zeros(B, 0, dtype=torch.bool, device=dev), T, valid)  # [B, T, T]
    pos = torch.arange(T, device=dev).expand(B, T)
    out = target(ids, position_ids=pos, mask=mask, taps=taps, need_logits=greedy)  # no greedy: stop at the deepest tap
    g = None
    if greedy:
        g = torch.full((B, T), -1, dtype=torch.long, device=dev)
        g[:, 1:] = out.logits[:, :-1].argmax(-1)
    return out.taps, g, out.logits if greedy else None


def batch_features(batch: dict, target, taps: list[int], greedy: bool) -> tuple[Tensor, Tensor | None, Tensor | None]:
    """A training or validation batch's tap features [B, Lc, F], the target's greedy tokens [B, T] and its logits
    [B, T, V]: from the batch (the cache holds features and greedy tokens, no logits) or from a target pass over its
    ids (the whole sequences with `greedy`, else only the context positions)."""
    if "feats" in batch:
        return batch["feats"], batch.get("greedy"), None
    if target is None:
        raise DraftlabError("no feature cache and no target to compute features with")
    Lc = batch["ctx_valid"].shape[1]
    ids = batch["ids"] if greedy else batch["ids"][:, :Lc]
    valid = torch.arange(ids.shape[1], device=ids.device)[None, :] < batch["seq_len"][:, None]
    feats, g, z = target_pass(target, ids, valid, taps, greedy=greedy)
    return feats[:, :Lc], g, z


def _length_batches(lengths: np.ndarray, order: list[int], batch_tokens: int) -> list[list[int]]:
    """Group `order` (sorted by length) into batches whose padded size stays under batch_tokens."""
    batches, cur, longest = [], [], 0
    for i in order:
        L = int(lengths[i])
        if cur and max(longest, L) * (len(cur) + 1) > batch_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, L)
    if cur:
        batches.append(cur)
    return batches


def target_fingerprint(target) -> str:
    """Cheap identity of a target: config + a checksum of a few weight tensors."""
    h = hashlib.sha256(target.config.to_json_string(use_diff=False).encode())
    with torch.no_grad():
        for t in (target.embed_tokens.weight, target.final_norm.weight, target.layers[0].mlp.down_proj.weight):
            h.update(f"{float(t.double().sum()):.10e}/{float(t.double().abs().sum()):.10e}".encode())
    return h.hexdigest()[:16]


class FeatureStore:
    """Cached tap features of a SequenceSet: feats [N_tokens, F] fp16 and greedy [N_tokens] int32."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.meta = json.loads((self.path / "meta.json").read_text())
        self.feats = np.load(self.path / "feats.npy", mmap_mode="r")
        self.greedy_tokens = np.load(self.path / "greedy.npy", mmap_mode="r")
        self.offsets = np.asarray(self.meta["offsets"], dtype=np.int64)

    @property
    def nbytes(self) -> int:
        return int(self.feats.nbytes + self.greedy_tokens.nbytes)

    def features(self, i: int, length: int | None = None) -> np.ndarray:
        """[L_i (or length), F] fp16 of sequence i."""
        lo = self.offsets[i]
        hi = self.offsets[i + 1] if length is None else lo + length
        return self.feats[lo:hi]

    def greedy(self, i: int) -> np.ndarray:
        return self.greedy_tokens[self.offsets[i]:self.offsets[i + 1]]

    @staticmethod
    def key(target_key: str, seqs: SequenceSet, taps: list[int], dtype: str) -> str:
        raw = json.dumps({"target": target_key, "data": seqs.fingerprint(), "taps": list(taps), "dtype": dtype,
                          "version": 1}, sort_keys=True)
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    @classmethod
    def open_or_build(cls, root: str | Path, target, seqs: SequenceSet, taps: list[int], batch_tokens: int = 4096,
                      dtype: str = "float16", target_key: str | None = None, log: Callable[[str], None] = print,
                      reuse: tuple[str | Path, ...] = ()) -> tuple["FeatureStore", dict]:
        """Reuse <folder>/<key>/ when complete, from any of `reuse` (another stage's caches, e.g. pretraining's) and
        then `root`, else compute it in root (atomically). Returns (store, stats). Several processes (DDP): rank 0
        looks and computes first, the others wait and then look (`dist.rank_zero_first`): every rank takes the same
        branch."""
        from draftlab.training.dist import rank_zero_first

        key = cls.key(target_key or target_fingerprint(target), seqs, taps, dtype)
        with rank_zero_first(torch.device(getattr(target, "device", "cpu")).type):
            return cls._open_or_build(root, key, target, seqs, taps, batch_tokens, dtype, log, tuple(reuse))

    @classmethod
    def _open_or_build(cls, root: str | Path, key: str, target, seqs: SequenceSet, taps: list[int], batch_tokens: int,
                       dtype: str, log: Callable[[str], None], reuse: tuple = ()) -> tuple["FeatureStore", dict]:
        for folder in (*reuse, root):
            if (Path(folder) / key / "meta.json").exists():
                store = cls(Path(folder) / key)
                return store, {"feature_cache": str(store.path), "feature_cache_bytes": store.nbytes,
                               "feature_cache_reused": True, "feature_compute_s": 0.0}
        path = Path(root) / key
        Path(root).mkdir(parents=True, exist_ok=True)
        tmp = temp_dir(Path(root), key)
        t0 = time.time()
        try:
            n_tok = int(seqs.offsets[-1])
            F = len(taps) * target.hidden_size
            feats = np.lib.format.open_memmap(tmp / "feats.npy", mode="w+", dtype=FEATURE_DTYPES[dtype], shape=(n_tok, F))
            greedy = np.lib.format.open_memmap(tmp / "greedy.npy", mode="w+", dtype=np.int32, shape=(n_tok,))
            lengths = seqs.lengths
            order = sorted(range(len(seqs)), key=lambda i: int(lengths[i]))
            done, last = 0, time.time()
            for batch in _length_batches(lengths, order, batch_tokens):
                T = int(max(lengths[i] for i in batch))
                ids = torch.zeros(len(batch), T, dtype=torch.long)
                valid = torch.zeros(len(batch), T, dtype=torch.bool)
                for r, i in enumerate(batch):
                    s = torch.from_numpy(seqs.seq(i).astype(np.int64))
                    ids[r, :len(s)] = s
                    valid[r, :len(s)] = True
                f, g = target_features(target, ids, valid, taps)
                f = f.float().cpu().numpy().astype(FEATURE_DTYPES[dtype])
                g = g.cpu().numpy().astype(np.int32)
                for r, i in enumerate(batch):
                    lo, hi = seqs.offsets[i], seqs.offsets[i + 1]
                    feats[lo:hi] = f[r, :hi - lo]
                    greedy[lo:hi] = g[r, :hi - lo]
                done += int(sum(lengths[i] for i in batch))
                if time.time() - last > 30:
                    last = time.time()
                    log(f"features: {done}/{n_tok} tokens ({done / (last - t0):.0f} tok/s)")
            feats.flush()
            greedy.flush()
            del feats, greedy
            meta = {"key": key, "taps": list(taps), "dtype": dtype, "tokens": n_tok, "sequences": len(seqs),
                    "feature_dim": F, "offsets": seqs.offsets.tolist()}
            (tmp / "meta.json").write_text(json.dumps(meta))
            if path.exists():
                shutil.rmtree(path)
            os.replace(tmp, path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        dt = time.time() - t0
        store = cls(path)
        log(f"features: cached {store.nbytes / 2**20:.1f} MiB for {n_tok} tokens in {dt:.1f}s at {path}")
        return store, {"feature_cache": str(path), "feature_cache_bytes": store.nbytes, "feature_cache_reused": False,
                       "feature_compute_s": dt, "feature_tokens_per_s": n_tok / max(dt, 1e-9)}
