"""The token classification family (named entities, chunks, parts of speech): a tag per word from
the word's first piece (transformers' AlbertForTokenClassification, as its run_ner labels them:
the other pieces and the special tokens carry no target), scored at the entity level with
conlleval's rules (precision, recall and F1 of whole spans; accuracy over words), with the
predictions written as conlleval's input (`token gold predicted`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ....config import FinetuneSection
from ....errors import BadInput
from ...family import Baseline, EncodedTask, Evaluation
from ...labels import sorted_names
from ...loop import collate
from ...splits import Units, train_and_eval
from ...tokenizer import PairTokenizer
from . import FAMILY
from .metrics import conll_scores
from .reading import Sentences, read_sentences, sample_sentences, split_sentences

IGNORED = -100
"""The target of a position that is not a word's first piece (torch's and transformers' ignore index)."""
OUTSIDE = "O"
"""The tag predicted for a word cut off by finetune.max_seq_length (counted in the metrics)."""
WORD_START = "first_piece"
"""Where a word's tag is read (and trained): its first piece, each word tokenized alone."""


def tag_scheme(sentences: Sequence[Sequence[str]]) -> str:
    """How the tags mark entities: IOBES where some tag is S- or E-; IOB1 where an I- opens an entity
    (at a sentence's start, after O or after another type: B- then only separates adjacent entities
    of one type, as in CoNLL-2003's original files); IOB2 where every entity opens with B-; none where
    no tag has these prefixes (parts of speech). conlleval reads each by the same rules."""
    prefixes, opened_by_inside = set(), False
    for tags in sentences:
        before = (OUTSIDE, "")
        for tag in tags:
            prefix, _, kind = tag.partition("-")
            prefixes.add(prefix)
            opened_by_inside |= prefix == "I" and (before[0] == OUTSIDE or before[1] != kind)
            before = (prefix, kind)
    if prefixes & {"S", "E"}:
        return "IOBES"
    if prefixes & {"B", "I"}:
        return "IOB1" if opened_by_inside else "IOB2"
    return "none"


@dataclass(frozen=True)
class TaggedSentences:
    """What evaluation reads besides the scores: each eval sentence's words and gold tags, and the
    position of each kept word's first piece (the words after the last are cut off)."""

    tokens: list[list[str]]
    tags: list[list[str]]
    starts: list[list[int]]
    scheme: str
    """The tag scheme of the training and eval tags (tag_scheme)."""


def encode_words(tokenizer: PairTokenizer, words: Sequence[str], max_length: int) -> tuple[list[int], list[int]]:
    """(input_ids, first-piece positions) of `[CLS] words [SEP]`, each word's pieces as the tokenizer
    gives them for that word alone (a word with no piece gets the unknown piece, so that every word
    is tagged); words that do not fit in `max_length` are cut off."""
    ids, starts = [tokenizer.cls_id], []
    for word in words:
        pieces = tokenizer.pieces(word) or [tokenizer.sp.unk_id()]
        if len(ids) + len(pieces) > max_length - 1:
            break
        starts.append(len(ids))
        ids += pieces
    return [*ids, tokenizer.sep_id], starts


def encode_split(tokenizer: PairTokenizer, sentences: Sentences, ids: dict[str, int], length: int):
    """Features, targets [N, length] and first-piece positions of one split; an unseen tag is an error."""
    features, starts = [], []
    targets = np.full((len(sentences), length), IGNORED, dtype=np.int64)
    for i, (words, tags) in enumerate(zip(sentences.tokens, sentences.tags)):
        unknown = [t for t in tags if t not in ids]
        if unknown:
            raise BadInput(
                f"{sentences.source} {sentences.places[i]}: tag {unknown[0]!r} never appears in the training "
                f"data; the training tags are {', '.join(ids)}"
            )
        input_ids, first = encode_words(tokenizer, words, length)
        features.append((input_ids, [0] * len(input_ids)))
        starts.append(first)
        targets[i, first] = [ids[t] for t in tags[: len(first)]]
    return features, targets, starts


class TokenClassificationFamily:
    model_class = FAMILY.model_class
    problem_type = None
    target_dtype = torch.long

    @staticmethod
    def collate(encoded, indices, pad_id, targets=None, pin=False, widths=()) -> dict[str, torch.Tensor]:
        """loop.collate, with each row's targets cut to the batch's width."""
        batch = collate(encoded, indices, pad_id, None, False, widths)
        if targets is not None:
            width = batch["input_ids"].shape[1]
            batch["labels"] = targets[torch.as_tensor(indices, dtype=torch.long), :width]
        return {k: v.pin_memory() for k, v in batch.items()} if pin else batch

    def encode(self, cfg: FinetuneSection, tokenizer: PairTokenizer) -> EncodedTask:
        units = Units(lambda path: read_sentences(path, cfg), split_sentences, sample_sentences, "sentences")
        splits = train_and_eval(cfg, units)
        train, evaluation = splits.train, splits.evaluation
        names = sorted_names({t for tags in train.tags for t in tags})
        ids = {name: i for i, name in enumerate(names)}
        length = cfg.max_seq_length
        train_features, train_targets, train_starts = encode_split(tokenizer, train, ids, length)
        eval_features, eval_targets, eval_starts = encode_split(tokenizer, evaluation, ids, length)

        def cut(split: Sentences, starts: list[list[int]]) -> int:
            return sum(len(words) - len(first) for words, first in zip(split.tokens, starts))

        return EncodedTask(
            train=train_features,
            train_targets=train_targets,
            eval=eval_features,
            eval_targets=eval_targets,
            reference=TaggedSentences(
                evaluation.tokens, evaluation.tags, eval_starts, tag_scheme([*train.tags, *evaluation.tags])
            ),
            label_names=names,
            num_labels=len(names),
            accounting=splits.accounting,
            truncated={  # words cut off by finetune.max_seq_length (sentences as words: see `cut`)
                "train_words": cut(train, train_starts),
                "eval_words": cut(evaluation, eval_starts),
            },
            eval_examples=len(evaluation),
        )

    def loss_sum(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy summed over the batch's tagged positions (fp32)."""
        logits = outputs.float()
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORED, reduction="sum")

    def scores(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs  # logits [B, S, num_labels]

    def evaluate(self, cfg: FinetuneSection, task: EncodedTask, scores: np.ndarray) -> Evaluation:
        reference: TaggedSentences = task.reference
        names = task.label_names
        predicted = []
        for i, (words, first) in enumerate(zip(reference.tokens, reference.starts)):
            tags = [names[k] for k in scores[i, first].argmax(-1)] if first else []
            predicted.append(tags + [OUTSIDE] * (len(words) - len(first)))
        result = conll_scores(reference.tags, predicted)
        metrics = {k: float(result[k]) for k in ("precision", "recall", "f1", "accuracy")}
        metrics["eval_loss"] = eval_loss(scores, task.eval_targets)
        lines = []
        for words, gold, tags in zip(reference.tokens, reference.tags, predicted):
            lines += [f"{w} {g} {p}\n" for w, g, p in zip(words, gold, tags)] + ["\n"]
        usage = {"tag_scheme": reference.scheme, "word_start": WORD_START}
        return Evaluation(metrics, {"predictions.conll": "".join(lines)}, usage)

    def baseline(self, cfg: FinetuneSection, task: EncodedTask) -> Baseline:
        reference: TaggedSentences = task.reference
        result = conll_scores(reference.tags, [[OUTSIDE] * len(words) for words in reference.tokens])
        metrics = {k: float(result[k]) for k in ("precision", "recall", "f1", "accuracy")}
        return Baseline(f"every word tagged {OUTSIDE} (no entity)", metrics)


def eval_loss(scores: np.ndarray, targets: np.ndarray) -> float:
    """Mean cross-entropy over the tagged positions (scores are zero-padded past each feature)."""
    width = min(scores.shape[1], targets.shape[1])
    logits, gold = torch.from_numpy(scores[:, :width]).double(), torch.from_numpy(targets[:, :width])
    tagged = gold != IGNORED
    if not bool(tagged.any()):
        return 0.0
    return float(F.cross_entropy(logits[tagged], gold[tagged]))


TOKEN_CLASSIFICATION = TokenClassificationFamily()

__all__ = ["TOKEN_CLASSIFICATION", "TaggedSentences", "TokenClassificationFamily", "encode_words", "tag_scheme"]
