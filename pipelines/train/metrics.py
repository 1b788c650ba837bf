"""Training metrics: windows of steps to tokens/s and MFU, validation passes, peak memory, the progress line."""

from __future__ import annotations

import resource
import time
from collections.abc import Iterable

import torch

from albert_model import AlbertConfig
from albert_model.flops import mfu, training_flops_per_token
from albert_model.losses import pretraining_sums

from .distributed import all_reduce_sum
from .step import PendingMetrics, StepMetrics

# Dense bf16 peak FLOP/s per device (vendor datasheets), looked up by CUDA device name.
BF16_PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "A10G": 70.0, "L4": 121.0}


def peak_flops(device: torch.device, precision: str, override_tflops: float | None) -> float | None:
    """Peak FLOP/s of one device for MFU: the override, else a bf16 GPU from the table; None if unknown."""
    if override_tflops:
        return override_tflops * 1e12
    if device.type != "cuda" or precision != "bf16":
        return None
    name = torch.cuda.get_device_name(device)
    return next((tf * 1e12 for key, tf in BF16_PEAK_TFLOPS.items() if key in name), None)


def peak_memory_gb(device: torch.device) -> float:
    """Peak accelerator memory allocated, or the process's peak resident memory on CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 1e9
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6  # kB on Linux


class MetricsWindow:
    """Steps since the last log line, summarised as one metrics record."""

    def __init__(self, config: AlbertConfig, world_size: int, peak: float | None):
        self.config, self.world_size, self.peak = config, world_size, peak
        self.reset()

    def reset(self) -> None:
        self.pending: list[PendingMetrics] = []
        self.applied: list[bool] = []
        self.widths: list[float] = []
        self.started = time.perf_counter()

    def add(self, metrics: PendingMetrics, mean_width: float, applied: bool = True) -> None:
        """A step's metrics, read from the device only when the window is summarised. A step that
        training health skipped counts in the throughput, not in the losses and accuracies."""
        self.pending.append(metrics)
        self.applied.append(applied)
        self.widths.append(mean_width)

    def summary(self, step: int, device: torch.device) -> dict:
        every: list[StepMetrics] = [m.get() for m in self.pending]  # waits for the window's last step
        seconds = time.perf_counter() - self.started
        steps = [m for m, applied in zip(every, self.applied) if applied]
        n = len(steps)
        tokens = sum(m.tokens for m in every)
        sequences = sum(m.sequences for m in every)
        last = every[-1]
        masked_share = sum(m.mlm_weight for m in every) / max(tokens, 1)
        flops_per_token = training_flops_per_token(
            self.config, round(sum(self.widths) / len(every)), min(1.0, masked_share)
        )
        tokens_per_s = tokens / seconds

        def mean(key: str) -> float | None:
            values = [getattr(m, key) for m in steps]
            return sum(values) / n if n and None not in values else None

        return {
            "step": step,
            "lr": last.lr,
            "mlm_loss": mean("mlm_loss"),
            "mlm_accuracy": mean("mlm_accuracy"),
            "sop_loss": mean("sop_loss"),
            "sop_accuracy": mean("sop_accuracy"),
            "skipped_steps": len(every) - n,
            "grad_norm": steps[-1].grad_norm if n else None,
            "tokens_per_s": tokens_per_s,
            "sequences_per_s": sequences / seconds,
            "mfu": mfu(tokens_per_s, flops_per_token, self.peak * self.world_size) if self.peak else None,
            "peak_memory_gb": peak_memory_gb(device),
        }


@torch.no_grad()
def evaluate(model: torch.nn.Module, micro_batches: Iterable[dict[str, torch.Tensor]], device: torch.device) -> dict:
    """Validation losses and accuracies over every batch given, summed over ranks."""
    was_training = model.training
    model.eval()
    sums = torch.zeros(6, dtype=torch.float64, device=device)  # mlm_ce, sop_ce, mlm_correct, mlm_weight,
    # sop_correct, sequences: summed on the device (NCCL reduces no host tensors), read once at the end
    sentence = True  # every batch has sentence labels, or none does (data.sentence_objective=none)
    for mb in micro_batches:
        mb = {k: v.to(device) for k, v in mb.items()}
        sentence = "sentence_order_label" in mb
        out = model(mb["input_ids"], mb["token_type_ids"], mb["attention_mask"], mb["masked_positions"])
        s = pretraining_sums(
            out.mlm_logits, out.sop_logits, mb["masked_lm_ids"], mb["masked_lm_weights"], mb.get("sentence_order_label")
        )
        sequences = s.sop_ce.new_full((), float(len(mb["input_ids"])))
        sums += torch.stack([s.mlm_ce, s.sop_ce, s.mlm_correct, s.mlm_weight, s.sop_correct, sequences]).double()
    all_reduce_sum(sums)
    model.train(was_training)
    mlm_ce, sop_ce, mlm_correct, mlm_weight, sop_correct, sequences = sums.tolist()
    if sequences == 0:
        raise ValueError(
            "the validation split is empty: set data.validation_fraction > 0 or train.eval_every beyond train.max_steps"
        )
    return {
        "mlm_loss": mlm_ce / (mlm_weight + 1e-5),
        "mlm_accuracy": mlm_correct / max(mlm_weight, 1.0),
        "sop_loss": sop_ce / sequences if sentence else None,
        "sop_accuracy": sop_correct / sequences if sentence else None,
        "sequences": int(sequences),
    }


def validation_line(step: int, result: dict) -> str:
    """A validation pass's log line."""
    sop = f" sop_acc {result['sop_accuracy']:.3f}" if result.get("sop_accuracy") is not None else ""
    sop_loss = f" sop_loss {result['sop_loss']:.3f}" if result.get("sop_loss") is not None else ""
    return (
        f"step {step} validation: mlm_acc {result['mlm_accuracy']:.3f}{sop} mlm_loss {result['mlm_loss']:.3f}{sop_loss}"
    )


def progress_line(record: dict, max_steps: int, elapsed: float) -> str:
    step = record["step"]
    eta = elapsed / max(step, 1) * (max_steps - step)
    mfu_text = f" mfu {record['mfu']:.1%}" if record.get("mfu") is not None else ""
    skipped = record.get("skipped_steps", 0)
    if record["mlm_loss"] is None:
        losses = f"every step skipped ({skipped})"
    else:
        sop = f" sop_acc {record['sop_accuracy']:.3f}" if record.get("sop_accuracy") is not None else ""
        losses = (
            f"loss {record['mlm_loss'] + (record.get('sop_loss') or 0.0):.3f} mlm_acc {record['mlm_accuracy']:.3f}"
            + sop
            + (f" skipped {skipped}" if skipped else "")
        )
    return (
        f"step {step}/{max_steps} ({step / max_steps:.0%}) {losses} lr {record['lr']:.2e} "
        f"{record['tokens_per_s']:,.0f} tok/s{mfu_text} mem {record['peak_memory_gb']:.2f} GB eta {eta / 60:.1f} min"
    )
