"""Training data: batches of whole reference sequences with random anchors (training) or strided
anchors (validation), length-bucketed to limit padding, with the target's tap features from a
`FeatureStore` when one is given.

- `DrafterDataModule`: training batches of whole sequences, each with up to `anchors_per_seq` random
  anchors among response positions that leave room for a full block; validation sets = held-out
  references (`split == "heldout"`), each eval suite (`split == "eval"`) and a small sample of
  training sequences (to see memorisation), with deterministic strided anchors. Tap features come
  from a `FeatureStore` (disk cache) or, when it is None, from the frozen target inside the step.
- A seeded drafter (docs/algorithms.md "Seeded block drafting", `arch.seed != "none"`): `SeedTable` walks each sequence
  once (`draftlab.ngram.seed_starts`, cached per sequence) and every batch carries `seeds` [B, A, n], the
  block inputs of slots 1..n at its anchors (the drafter's `forward_train` takes them). With
  `pretrain.seed_dropout` = p > 0, each *training* block's seeds all become MASK with probability p (drawn per
  block from a generator seeded by `pretrain.seed`); validation batches never drop a seed.
- Resume is the same run: the run's global training batch g (g = 0, 1, ...: one per optimiser step) is a
  function of (`pretrain.seed`, g) alone. `BucketBatchSampler` takes pass p = g // batches-per-pass from the
  permutation of seed + p, an iteration starts at the trainer's global step (the batches consumed so far) and
  runs to the end of that pass; each item's random anchors are drawn under a torch seed derived from (seed, g,
  sequence) (`StepItems`) and each batch's seed-dropout draws from (seed, g) (`StepCollate`). The loader is
  stateful for Lightning (`StepLoader.state_dict`: the next batch, checked against the seed and pass size on
  load), so a run killed after a checkpoint and resumed reads exactly the batches the uninterrupted run reads.
- Data parallel (`trainer.devices` > 1): every rank's loader walks the same global batches (same
  shuffle, and the same anchors and seed-dropout draws, so the random streams match the one-process
  run's), and `Collate` keeps the rank's share, sequences r, r+W, r+2W, ... of each global batch (the
  union over ranks is the one-process batch; the features are read for the share only). A global batch
  with fewer sequences than ranks (the last one of a pass) is skipped by every rank.
SpecOPD's batches (branch anchors, its validation sets, its training collate) are this data module with SpecOPD's
items and settings handed in (`draftlab.recipes.specopd.module.branch_data`), not a subclass.
"""
from __future__ import annotations

import math
from typing import Callable

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from draftlab.config import PretrainConfig
from draftlab.drafter.masks import sample_anchors, strided_anchors
from draftlab.errors import DraftlabError
from draftlab.ngram import gather_seeds, seed_starts
from draftlab.training.features import FeatureStore, SequenceSet


def step_seed(seed: int, step: int, item: int = -1) -> int:
    """A seed for the run's global training batch `step` (and, with `item` >= 0, one sequence of it), a function of
    (seed, step, item) alone (numpy's SeedSequence mixes them; 63 bits, for torch.manual_seed)."""
    words = np.random.SeedSequence([seed & 0xFFFFFFFF, step, item + 1]).generate_state(2, dtype=np.uint32)
    return int(words[0]) << 31 | int(words[1]) >> 1


class BucketBatchSampler(Sampler):
    """Shuffled batches of sequence indices; within windows of `window` batches, sequences are
    sorted by length so a batch pads little. A new shuffle every pass (pass p: the permutation of seed + p). With
    `world` > 1 ranks the batches are the global ones (every rank the same; `Collate` takes the rank's share) and a
    batch smaller than `world` is skipped.

    The run's global batch g is pass g // len(self)'s batch g % len(self): an iteration starts at `start()` (the
    trainer's global step, i.e. the batches consumed so far; 0 without a trainer) — or once at `resume_at`, set by
    `StepLoader.load_state_dict` — and yields that pass's remaining batches, each item keyed (g, sequence index) so
    that its random draws can be derived from (seed, g) too (`StepItems`, `StepCollate`)."""

    def __init__(self, indices: list[int], lengths: np.ndarray, batch_size: int, seed: int, window: int = 50,
                 world: int = 1, start: Callable[[], int] | None = None):
        self.indices, self.lengths, self.batch_size, self.seed, self.window = list(indices), lengths, batch_size, seed, window
        self.world = world
        self.start = start or (lambda: 0)
        self.resume_at: int | None = None

    def __len__(self) -> int:
        n = len(self.indices)
        last = n % self.batch_size
        return n // self.batch_size + (1 if last and last >= self.world else 0)

    def pass_batches(self, p: int) -> list[list[int]]:
        """The batches of pass p, in the order the pass takes them."""
        rng = np.random.default_rng(self.seed + p)
        perm = [self.indices[i] for i in rng.permutation(len(self.indices))]
        span = self.batch_size * self.window
        batches = []
        for w in range(0, len(perm), span):
            chunk = sorted(perm[w:w + span], key=lambda i: int(self.lengths[i]))
            batches += [chunk[j:j + self.batch_size] for j in range(0, len(chunk), self.batch_size)]
        return [batches[j] for j in rng.permutation(len(batches)) if len(batches[j]) >= self.world]

    def __iter__(self):
        g = int(self.start()) if self.resume_at is None else self.resume_at
        self.resume_at = None
        n = len(self)
        if n == 0:
            return
        p, offset = divmod(g, n)
        for k, batch in enumerate(self.pass_batches(p)[offset:]):
            yield [(g + k, i) for i in batch]


class StepItems(Dataset):
    """Training items keyed (global batch g, sequence index i): item i of `items` drawn under the torch seed
    `step_seed(seed, g, i)` (the global generator forked, so nothing else's stream moves), so that its random
    anchors are the same whenever batch g is read — in the uninterrupted run and after a resume. -> (g, item)."""

    def __init__(self, items: Dataset, seed: int):
        self.items, self.seed = items, seed

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, key):
        g, i = key
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(step_seed(self.seed, g, i))
            return g, self.items[i]


class StepCollate:
    """A collate function over `StepItems`' (g, item) pairs: reseeds the wrapped collate's own generator (seed
    dropout) from (seed, g), then collates the items, so a batch's draws depend on its index alone."""

    def __init__(self, collate, seed: int):
        self.collate, self.seed = collate, seed

    def __call__(self, keyed) -> dict:
        gen = getattr(self.collate, "gen", None)
        if gen is not None and keyed:
            gen.manual_seed(step_seed(self.seed, keyed[0][0]))
        return self.collate([item for _, item in keyed])


class StepLoader(DataLoader):
    """The training DataLoader, stateful for Lightning (a resume restores it instead of warning that it is not
    resumable): its state is the index of the next global batch (the trainer's global step when the checkpoint was
    written) with the seed and pass size it was read with; a checkpoint of other data is refused in one line."""

    def state_dict(self) -> dict:
        bs = self.batch_sampler
        return {"next_batch": int(bs.start()), "seed": bs.seed, "batches_per_pass": len(bs)}

    def load_state_dict(self, state: dict) -> None:
        bs = self.batch_sampler
        if (state.get("seed"), state.get("batches_per_pass")) != (bs.seed, len(bs)):
            raise DraftlabError(f"the checkpoint's training data (seed {state.get('seed')}, "
                                f"{state.get('batches_per_pass')} batches per pass) is not this run's (seed {bs.seed}, "
                                f"{len(bs)} batches per pass); remove the run folder's last.ckpt to start afresh")
        bs.resume_at = int(state["next_batch"])


class TrainBlocks(Dataset):
    """Item = (sequence index, random anchors [<=A]); indexed by sequence index. Anchors lie in the
    response (region "response") or anywhere after the first token (region "all")."""

    def __init__(self, seqs: SequenceSet, block_size: int, anchors_per_seq: int, region: str = "response"):
        self.seqs, self.S, self.A, self.region = seqs, block_size, anchors_per_seq, region

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, i: int):
        n = int(self.seqs.lengths[i])
        start = int(self.seqs.prompt_len[i]) if self.region == "response" else 1
        return i, sample_anchors(n, start, self.S, self.A)


class ValBlocks(Dataset):
    """Deterministic validation blocks: every stride-th anchor, chunked by `chunk` per item."""

    def __init__(self, seqs: SequenceSet, indices: list[int], block_size: int, stride: int, chunk: int):
        self.items = []
        for i in indices:
            a = strided_anchors(int(seqs.lengths[i]), int(seqs.prompt_len[i]), block_size, stride)
            self.items += [(i, a[j:j + chunk]) for j in range(0, len(a), chunk)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, k: int):
        return self.items[k]


class SeedTable:
    """The seeding routine's one pass per sequence, cached: starts(i) [len] int64 (`seed_starts`)."""

    def __init__(self, seqs: SequenceSet, arch):
        self.seqs, self.n, self.mask = seqs, arch.block_size - 1, arch.mask_token_id
        self.max_ngram, self.min_match = arch.seed_max_ngram, arch.seed_min_match
        self.cache: dict[int, np.ndarray] = {}

    def starts(self, i: int) -> np.ndarray:
        if i not in self.cache:
            self.cache[i] = np.asarray(seed_starts(self.seqs.seq(i).tolist(), self.max_ngram, self.min_match),
                                       dtype=np.int64)
        return self.cache[i]

    def batch_seeds(self, items, ids, anchors) -> torch.Tensor:
        """seeds [B, A, n] of a padded batch (ids [B, T], anchors [B, A]; padding anchors get some seed)."""
        starts = torch.full(ids.shape, -1, dtype=torch.long)
        for r, (i, _) in enumerate(items):
            st = self.starts(i)
            starts[r, :len(st)] = torch.from_numpy(st)
        return gather_seeds(ids, starts, anchors, self.n, self.mask)


class Collate:
    """Pads a list of (sequence, anchors) into a batch dict:
    ids [B, T], seq_len [B], anchors [B, A] (+ anchor_valid), ctx_valid [B, Lc] (Lc = largest
    anchor + `extra`: blocks never see position >= their anchor; distillation reads the target's
    features at the block's own positions, extra = S-1), and from the store feats [B, Lc, F] fp32
    and greedy [B, T] (target greedy token per position, -1 unknown); with a `SeedTable` seeds [B, A, n], each
    block's seeds MASK with probability `seed_dropout` (training batches only). `share(rank, world)`
    makes it keep the rank's share of each (global) batch, items rank::world."""

    def __init__(self, seqs: SequenceSet, store: FeatureStore | None, extra: int = 0, seeds: SeedTable | None = None,
                 seed_dropout: float = 0.0, dropout_seed: int = 0):
        self.seqs, self.store, self.extra, self.seeds = seqs, store, extra, seeds
        self.seed_dropout = seed_dropout
        self.gen = torch.Generator().manual_seed(dropout_seed) if seed_dropout > 0 else None
        self.rank, self.world = 0, 1

    def share(self, rank: int, world: int) -> "Collate":
        """A copy that keeps the share of rank `rank` among `world` ranks (its own dropout generator)."""
        out = Collate(self.seqs, self.store, self.extra, self.seeds, self.seed_dropout)
        out.gen = None if self.gen is None else torch.Generator().set_state(self.gen.get_state())
        out.rank, out.world = rank, world
        return out

    def __call__(self, items) -> dict:
        drop_all = None
        if self.world > 1:  # the rank's share; the dropout draws stay those of the whole batch
            if self.gen is not None:
                A_all = max(max(len(a) for _, a in items), 1)
                drop_all = torch.rand((len(items), A_all), generator=self.gen) < self.seed_dropout  # [B_all, A_all]
                drop_all = drop_all[self.rank::self.world]
            items = items[self.rank::self.world]
        B = len(items)
        lens = [int(self.seqs.lengths[i]) for i, _ in items]
        T, A = max(lens), max(max(len(a) for _, a in items), 1)
        ids = torch.zeros(B, T, dtype=torch.long)
        anchors = torch.zeros(B, A, dtype=torch.long)
        anchor_valid = torch.zeros(B, A, dtype=torch.bool)
        for r, (i, a) in enumerate(items):
            ids[r, :lens[r]] = torch.from_numpy(self.seqs.seq(i).astype(np.int64))
            anchors[r, :len(a)] = a
            anchor_valid[r, :len(a)] = True
        Lc = min(max(int(anchors.max()), 1) + self.extra, T)
        seq_len = torch.tensor(lens)
        batch = {"seq": torch.tensor([i for i, _ in items]), "ids": ids, "seq_len": seq_len, "anchors": anchors,
                 "anchor_valid": anchor_valid, "ctx_valid": torch.arange(Lc)[None, :] < seq_len[:, None]}
        if self.seeds is not None:
            batch["seeds"] = self.seeds.batch_seeds(items, ids, anchors)  # [B, A, n]
            if self.gen is not None:  # seed dropout: a dropped block carries no seed (an unseeded block)
                drop = (torch.rand(anchors.shape, generator=self.gen) < self.seed_dropout if drop_all is None
                        else drop_all[:, :A])  # [B, A]
                batch["seeds"] = batch["seeds"].masked_fill(drop[..., None], self.seeds.mask)
        if self.store is not None:
            feats = np.zeros((B, Lc, self.store.feats.shape[1]), dtype=np.float32)
            greedy = torch.full((B, T), -1, dtype=torch.long)
            for r, (i, _) in enumerate(items):
                n = min(Lc, lens[r])
                feats[r, :n] = self.store.features(i, n)
                greedy[r, :lens[r]] = torch.from_numpy(self.store.greedy(i).astype(np.int64))
            batch["feats"], batch["greedy"] = torch.from_numpy(feats), greedy
        return batch


class DrafterDataModule(L.LightningDataModule):
    def __init__(self, seqs: SequenceSet, cfg: PretrainConfig, block_size: int, store: FeatureStore | None = None,
                 train_sample: int = 16, arch=None, items: type | None = None, val_sets: list[str] | None = None,
                 train_collate: Collate | None = None):
        """arch: the drafter's `DrafterArch`; a seeded one makes every batch carry its seeds. A method's own batches:
        `items`, the Dataset class of training items, built as items(seqs, block_size, anchors_per_seq) (None:
        pretraining's `TrainBlocks`); `val_sets`, the named validation sets kept (None: all); `train_collate`, the
        training batches' collate (None: pretraining's)."""
        super().__init__()
        self.seqs, self.cfg, self.S, self.store = seqs, cfg, block_size, store
        self.train_idx = seqs.indices("train")
        if not self.train_idx:
            raise DraftlabError("the references have no split=='train' sequences to train the drafter on")
        self.val_sets: dict[str, list[int]] = {}
        if seqs.indices("heldout"):
            self.val_sets["heldout"] = seqs.indices("heldout")
        for suite in sorted(set(seqs.suite[seqs.split == "eval"].tolist())):
            self.val_sets[suite] = seqs.indices("eval", suite)
        if train_sample:
            step = max(len(self.train_idx) // train_sample, 1)
            self.val_sets["train_sample"] = self.train_idx[::step][:train_sample]
        if val_sets:
            self.val_sets = {k: v for k, v in self.val_sets.items() if k in val_sets}
        self.items = items
        seeds = SeedTable(seqs, arch) if arch is not None and arch.seeded else None
        dropout = getattr(cfg, "seed_dropout", 0.0)
        if dropout and seeds is None:
            raise DraftlabError(f"pretrain.seed_dropout={dropout} needs a seeded drafter (drafter.seed=lookup); "
                                f"set pretrain.seed_dropout=0 for a plain one")
        self.collate = Collate(seqs, store, seeds=seeds)
        # distillation (kd_weight > 0) reads the target's last-layer tap at the block's positions a..a+S-2
        extra = block_size - 1 if getattr(cfg, "kd_weight", 0) else 0
        if train_collate is None:
            train_collate = Collate(seqs, store, extra, seeds, dropout, cfg.seed) if extra or dropout else self.collate
        self.train_collate = train_collate

    @property
    def val_names(self) -> list[str]:
        return list(self.val_sets)

    def steps_per_epoch(self) -> int:
        return math.ceil(len(self.train_idx) / self.cfg.batch_size)

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        rank, world = (trainer.global_rank, trainer.world_size) if trainer is not None else (0, 1)
        step = (lambda: int(trainer.global_step)) if trainer is not None else None  # batches consumed so far
        sampler = BucketBatchSampler(self.train_idx, self.seqs.lengths, self.cfg.batch_size, self.cfg.seed, world=world,
                                     start=step)
        if self.items is None:
            items = TrainBlocks(self.seqs, self.S, self.cfg.anchors_per_seq, self.cfg.anchor_region)
        else:
            items = self.items(self.seqs, self.S, self.cfg.anchors_per_seq)
        collate = self.train_collate if world == 1 else self.train_collate.share(rank, world)
        return StepLoader(StepItems(items, self.cfg.seed), batch_sampler=sampler,
                          collate_fn=StepCollate(collate, self.cfg.seed), num_workers=0)

    def val_dataloader(self) -> list[DataLoader]:
        return [DataLoader(ValBlocks(self.seqs, idx, self.S, self.cfg.val_anchor_stride, self.cfg.anchors_per_seq),
                           batch_size=self.cfg.batch_size, shuffle=False, collate_fn=self.collate, num_workers=0)
                for idx in self.val_sets.values()]
