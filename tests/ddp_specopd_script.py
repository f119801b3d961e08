"""Helper of tests/specopd/test_specopd.py (not collected): one SpecOPD update of a tiny drafter on two
sequences, either in one process (`1`) or split over 2 CPU DDP processes with gloo (`2`, one sequence
per rank, unequal branch counts). Writes the global loss, the local branch count and the drafter's
gradients (after DDP's all-reduce) to OUT/rank<r>.pt."""
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import lightning as L  # noqa: E402
import torch  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from conftest import tiny_target  # noqa: E402
from draftlab.config import PretrainConfig  # noqa: E402
from draftlab.drafter import DFlashDrafter, DrafterDesign, arch_from_target  # noqa: E402
from draftlab.recipes.specopd.module import SpecOPDObjective  # noqa: E402
from draftlab.training.module import TrainModule  # noqa: E402

S, W = 5, 4


def make_batch(rows):
    """rows: (seq id, token list, anchors) -> the collate format (right-padded)."""
    L_ = max(len(t) for _, t, _ in rows)
    A = max(len(a) for _, _, a in rows)
    ids = torch.zeros(len(rows), L_, dtype=torch.long)
    anchors = torch.zeros(len(rows), A, dtype=torch.long)
    valid = torch.zeros(len(rows), A, dtype=torch.bool)
    for r, (_, t, a) in enumerate(rows):
        ids[r, :len(t)] = torch.tensor(t)
        anchors[r, :len(a)] = torch.tensor(a)
        valid[r, :len(a)] = True
    return {"seq": torch.tensor([s for s, _, _ in rows]), "ids": ids, "seq_len": torch.tensor([len(t) for _, t, _ in rows]),
            "anchors": anchors, "anchor_valid": valid}


class Data(L.LightningDataModule):
    def __init__(self, rows, world):
        super().__init__()
        self.rows, self.world = rows, world

    def train_dataloader(self):
        r = self.trainer.global_rank
        mine = self.rows if self.world == 1 else [self.rows[r]]
        return DataLoader([make_batch(mine)], batch_size=None)


class Grads(L.Callback):
    def on_before_optimizer_step(self, trainer, module, optimizer):
        self.grads = {n: p.grad.detach().clone() for n, p in module.drafter.named_parameters()}


def main(world: int, out: Path) -> None:
    torch.set_num_threads(1)
    target = tiny_target("llama")
    torch.manual_seed(0)
    vocab = torch.arange(3, 60)
    drafter = DFlashDrafter.from_target(arch_from_target(target, DrafterDesign(S, 1, [0, 2, 3], 1, len(vocab))), target, vocab)
    with torch.no_grad():
        for m in drafter.modules():
            if isinstance(m, torch.nn.Linear):
                m.weight.normal_(0, 0.2)
    g = torch.Generator().manual_seed(1)
    rows = [(0, torch.randint(3, 97, (20,), generator=g).tolist(), [5, 9, 13, 18]),
            (1, torch.randint(3, 97, (14,), generator=g).tolist(), [4, 10])]
    cfg = PretrainConfig(max_steps=1, max_minutes=0, lr=1e-3, warmup=0.0, grad_clip=0.0, val_every=0, checkpoint_every=0)
    objective = SpecOPDObjective(drafter, cfg, target, "specopd", W, kernels="torch")
    module = TrainModule(objective, 1, [])
    cb = Grads()
    trainer = L.Trainer(accelerator="cpu", devices=world, strategy="ddp" if world > 1 else "auto", max_steps=1,
                        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        use_distributed_sampler=False, num_sanity_val_steps=0, limit_val_batches=0, callbacks=[cb])
    trainer.fit(module, datamodule=Data(rows, world))
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"loss": objective.last_terms["loss"], "counts": [objective.last_terms["branches"]], "grads": cb.grads},
               out / f"rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
