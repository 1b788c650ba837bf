"""Issue #46's reference for sentence embeddings: plain transformers, as its users embed a sentence.
`AutoTokenizer` and `AutoModel` loaded from the folder with no extra argument (a fine-tuned export's
head is left out by AutoModel), the rows tokenized as one padded batch (pairs with their
token_type_ids, cut at the tokenizer's recorded length), and the last hidden state averaged over
the attention mask, or read at [CLS], optionally L2-normalised."""

import numpy as np
import torch
import transformers

ROWS = [
    {"text": "Shares rose after the bank reported strong profits."},
    {"text": "Oil prices fell.", "text_pair": "The price of oil went down."},
    {"text": "The minister said the vote would take place next week, after a long debate in parliament " * 6},
    {"text": "Parliament debated the budget."},
]
"""Texts of unequal lengths (so the batch pads), a pair, and one longer than any model's length here."""


def transformers_embeddings(folder: str, rows: list[dict]) -> dict[tuple[str, bool], np.ndarray]:
    """(pooling, normalize) -> the rows' vectors [N, H], for mean and cls, raw and normalised."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModel.from_pretrained(folder).eval()
    means, firsts = [None] * len(rows), [None] * len(rows)
    for pair in (False, True):  # the tokenizer takes a batch of texts or a batch of pairs
        chosen = [i for i, row in enumerate(rows) if ("text_pair" in row) == pair]
        if not chosen:
            continue
        texts = [rows[i]["text"] for i in chosen]
        pairs = [rows[i]["text_pair"] for i in chosen] if pair else None
        batch = tokenizer(texts, pairs, truncation=True, padding=True, return_tensors="pt")
        with torch.no_grad():
            hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        for j, i in enumerate(chosen):
            means[i] = ((hidden[j] * mask[j]).sum(0) / mask[j].sum()).numpy()
            firsts[i] = hidden[j, 0].numpy()
    vectors = {"mean": np.stack(means), "cls": np.stack(firsts)}
    return {
        (pooling, normalize): v / np.linalg.norm(v, axis=1, keepdims=True) if normalize else v
        for pooling, v in vectors.items()
        for normalize in (False, True)
    }
