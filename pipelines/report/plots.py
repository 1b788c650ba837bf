"""The report's figures as PNG bytes (matplotlib, no display needed)."""

from __future__ import annotations

import io
import os
import tempfile

# Matplotlib keeps its config and font cache under the home directory unless told otherwise; a
# stage writes only into its run_dir and the node's temp folder (tested on the cluster tests' nodes).
os.environ.setdefault("MPLCONFIGDIR", os.path.join(tempfile.gettempdir(), "albert-ray-matplotlib"))

import matplotlib  # noqa: E402

matplotlib.use("Agg")  # headless: cluster workers have no display
import matplotlib.pyplot as plt  # noqa: E402

from .layers import LayerTransition  # noqa: E402

# (title, training key, validation key or None)
CURVES = [
    ("MLM loss", "mlm_loss", "mlm_loss"),
    ("SOP loss", "sop_loss", "sop_loss"),
    ("MLM accuracy", "mlm_accuracy", "mlm_accuracy"),
    ("SOP accuracy", "sop_accuracy", "sop_accuracy"),
    ("learning rate", "lr", None),
    ("gradient norm (before clipping)", "grad_norm", None),
    ("tokens / s", "tokens_per_s", None),
    ("peak memory (GB)", "peak_memory_gb", None),
]


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def _series(records: list[dict], key: str) -> tuple[list[float], list[float]]:
    points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
    return [s for s, _ in points], [v for _, v in points]


EVENT_COLOURS = {"rollback": "tab:red", "skipped": "tab:orange", "spike": "tab:orange", "collapse": "tab:red"}


def pretraining_curves(
    train: list[dict], validation: list[dict], events: list[dict] = (), objective: str = "sop"
) -> bytes:
    """Every training metric against the step, validation passes as markers on the same axes, and
    training health's events as vertical lines on the losses and accuracies (grey: plateau, notes).
    The sentence objective's panels are named after it (`objective`: sop, nsp; none says it has none)."""
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    for ax, (title, key, val_key) in zip(axes.flat, CURVES):
        if key.startswith("sop_") and objective == "none":
            ax.text(
                0.5, 0.5, "no sentence objective\n(masked LM only)", ha="center", va="center", transform=ax.transAxes
            )
            ax.set_title(title.replace("SOP", "sentence"), fontsize=10)
            ax.set_axis_off()
            continue
        title = title.replace("SOP", objective.upper())
        if val_key is not None:
            for event in events:
                ax.axvline(event["step"], color=EVENT_COLOURS.get(event["event"], "grey"), alpha=0.5, linewidth=0.8)
        steps, values = _series(train, key)
        ax.plot(steps, values, label="train", linewidth=1.2)
        if val_key is not None:
            v_steps, v_values = _series(validation, val_key)
            if v_steps:
                ax.plot(v_steps, v_values, "o-", label="validation", markersize=4)
            ax.legend(fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step", fontsize=8)
        ax.grid(alpha=0.3)
    fig.suptitle("Pretraining")
    fig.tight_layout()
    return _png(fig)


def layer_transitions_figure(transitions: list[LayerTransition], label: str) -> bytes:
    """The paper's Figure 1: L2 distance and cosine similarity of each layer's input and output."""
    layers = [t.step + 1 for t in transitions]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot(layers, [t.l2_distance for t in transitions], "o-", label=label)
    left.set_title("L2 distance between a layer's input and output")
    right.plot(layers, [t.cosine_similarity for t in transitions], "o-", label=label)
    right.set_title("Cosine similarity between a layer's input and output")
    for ax in (left, right):
        ax.set_xlabel("layer")
        ax.set_xticks(layers)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return _png(fig)


def finetune_curve_figure(epochs: list[dict], metric: str) -> bytes:
    """The best fine-tuning trial's eval metric, and its train and eval loss, after each epoch."""
    x = [e.get("epoch") for e in epochs]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    left.plot(x, [e.get(metric) for e in epochs], "o-")
    left.set_title(f"{metric} (eval)")
    for key in ("train_loss", "eval_loss"):
        if any(key in e for e in epochs):
            right.plot(x, [e.get(key) for e in epochs], "o-", label=key.replace("_", " "))
    right.set_title("loss")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.set_xlabel("epoch")
        ax.set_xticks(x)
        ax.grid(alpha=0.3)
    fig.suptitle("The best fine-tuning trial")
    fig.tight_layout()
    return _png(fig)


def tradeoff_figure(arms: list[dict], metric: str) -> bytes:
    """Each way of answering (the distill stage's trade-off) as a point: eval rows/s against the metric."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for arm in arms:
        x, y = arm["rows_per_s"], arm["metrics"].get(metric)
        if x is None or y is None:
            continue
        ax.scatter([x], [y], s=40)
        ax.annotate(
            f"{arm['name']} ({arm['mean_depth']:.2f})", (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8
        )
    ax.set_xlabel("eval rows per second (CPU)")
    ax.set_ylabel(metric)
    ax.set_title("Depth: score against speed (mean depth in brackets)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _png(fig)


def confusion_figure(counts: list[list[int]], names: list[str]) -> bytes:
    """counts[gold][predicted] as a heat map with each cell's count."""
    size = max(4.0, 0.7 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(size, size))
    ax.imshow(counts, cmap="Blues")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    top = max((v for row in counts for v in row), default=0)
    for i, row in enumerate(counts):
        for j, value in enumerate(row):
            ax.text(j, i, str(value), ha="center", va="center", color="white" if value > top / 2 else "black")
    ax.set_title("Confusion matrix (eval examples)")
    fig.tight_layout()
    return _png(fig)
