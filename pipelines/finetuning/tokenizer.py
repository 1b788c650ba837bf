"""ALBERT's input encoding for fine-tuning: SentencePiece from the pretrained directory,
`[CLS] a [SEP] (b [SEP])`, truncated like transformers' `AlbertTokenizer` (longest first)."""

from __future__ import annotations

import json
import os
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import sentencepiece as spm

from ..errors import BadInput, MissingInput
from ..prep.text import normalize_text
from ..storage.models import trained_length


class PairTokenizer:
    """Ids equal to `transformers.AlbertTokenizer.from_pretrained(directory)(a, b, truncation=True)`."""

    def __init__(self, directory: str):
        model_file = os.path.join(directory, "spiece.model")
        if not os.path.exists(model_file):
            raise MissingInput(f"{model_file}: not found (the pretrained directory needs its SentencePiece model)")
        config_file = os.path.join(directory, "tokenizer_config.json")
        config = json.loads(Path(config_file).read_text()) if os.path.exists(config_file) else {}
        self.lowercase = bool(config.get("do_lower_case", True))
        self.keep_accents = bool(config.get("keep_accents", False))
        self.model_max_length = trained_length(config)
        """The length the folder's tokenizer cuts at (None: not recorded), as transformers' does."""
        self.sp = spm.SentencePieceProcessor(model_file=model_file)
        self.cls_id, self.sep_id, self.pad_id = (self.sp.piece_to_id(p) for p in ("[CLS]", "[SEP]", "<pad>"))
        if self.sp.id_to_piece(self.cls_id) != "[CLS]" or self.sp.id_to_piece(self.sep_id) != "[SEP]":
            raise BadInput(f"{model_file}: has no [CLS] and [SEP] pieces; not an ALBERT vocabulary")

    def normalize(self, text: str) -> str:
        if not self.keep_accents:
            return normalize_text(text, self.lowercase)
        text = unicodedata.normalize("NFKC", " ".join(text.split()).replace("``", '"').replace("''", '"'))
        return text.lower() if self.lowercase else text

    def pieces(self, text: str) -> list[int]:
        return self.sp.encode(self.normalize(text))

    def encode(self, text: str, pair: str | None, max_length: int) -> tuple[list[int], list[int]]:
        """(input_ids, token_type_ids) of at most `max_length` tokens."""
        a = self.pieces(text)
        b = self.pieces(pair) if pair is not None else []
        budget = max_length - (3 if pair is not None else 2)
        # longest_first, as the tokenizers library does it: the shorter side keeps up to half the
        # budget, the longer side the rest (so the odd token goes to the longer one).
        if len(a) + len(b) > budget:
            if len(a) > len(b):
                b = b[: budget // 2]
                a = a[: budget - len(b)]
            else:
                a = a[: budget // 2]
                b = b[: budget - len(a)]
        ids = [self.cls_id, *a, self.sep_id]
        types = [0] * len(ids)
        if pair is not None:
            ids += [*b, self.sep_id]
            types += [1] * (len(b) + 1)
        return ids, types


def pad_batch(
    encoded: list[tuple[list[int], list[int]]], pad_id: int, widths: Sequence[int] = ()
) -> dict[str, np.ndarray]:
    """Right-padded `input_ids`, `token_type_ids` and `attention_mask` ([B, width]): width is the
    longest sequence's length, or the smallest of `widths` that holds it, so that a run sees few
    shapes (finetune.cuda_graphs captures a graph per shape)."""
    longest = max(len(ids) for ids, _ in encoded)
    width = min((w for w in widths if w >= longest), default=longest)
    batch = {
        "input_ids": np.full((len(encoded), width), pad_id, np.int64),
        "token_type_ids": np.zeros((len(encoded), width), np.int64),
        "attention_mask": np.zeros((len(encoded), width), np.int64),
    }
    for row, (ids, types) in enumerate(encoded):
        batch["input_ids"][row, : len(ids)] = ids
        batch["token_type_ids"][row, : len(types)] = types
        batch["attention_mask"][row, : len(ids)] = 1
    return batch


__all__ = ["PairTokenizer", "pad_batch"]
