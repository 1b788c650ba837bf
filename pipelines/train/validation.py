"""The pretraining loop's validation passes: this rank's share of the validation batches, read once."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa
import torch

from .distributed import all_reduce_sum
from .loader import rank_micro_batches
from .metrics import evaluate
from .plan import PretrainPlan


class Validation:
    """This rank's share of the validation batches of every pass (whole batches until
    eval_max_sequences), read once and kept, so a pass does not read the data again."""

    def __init__(
        self,
        batches: Callable[[], Iterable[pa.Table]],
        plan: PretrainPlan,
        rank: int,
        world: int,
        count_baseline: bool = False,
    ):
        """`batches`: whole evaluation batches (micro batch x world rows), the same on every rank
        (LoopIO.validation_batches), asked for at the first pass."""
        self.batches, self.plan, self.rank, self.world = batches, plan, rank, world
        self.tables: list[pa.Table] | None = None
        self.count_baseline = count_baseline
        self.baseline: float | None = None
        """The unigram baseline of the validation masks: the share of masked positions whose label is
        the most frequent label (counted on the first pass when count_baseline)."""

    def micro_batches(self) -> Iterator[dict[str, torch.Tensor]]:
        micro, train = self.plan.train.micro_batch(self.world), self.plan.train
        for table in self.tables:
            yield from rank_micro_batches(
                table, 0, 1, micro, self.plan.max_predictions, self.plan.masking, train.seed, 0
            )

    def count_unigram_baseline(self, device: torch.device) -> float:
        counts = torch.zeros(self.plan.albert.vocab_size, dtype=torch.float64)
        for mb in self.micro_batches():
            weights = mb["masked_lm_weights"].flatten().double()
            counts += torch.bincount(mb["masked_lm_ids"].flatten(), weights=weights, minlength=len(counts))
        counts = all_reduce_sum(counts.to(device))
        return (counts.max() / counts.sum().clamp(min=1)).item()

    def run(self, model: torch.nn.Module, device: torch.device) -> dict:
        micro, train = self.plan.train.micro_batch(self.world), self.plan.train
        if self.tables is None:
            limit, seen, self.tables = train.eval_max_sequences or self.plan.n_validation, 0, []
            for table in self.batches():
                if seen >= limit:
                    break
                seen += len(table)
                self.tables.append(table.slice(self.rank * micro, micro))
        if self.count_baseline and self.baseline is None:
            self.baseline = self.count_unigram_baseline(device)
        return evaluate(model, self.micro_batches(), device)


__all__ = ["Validation"]
