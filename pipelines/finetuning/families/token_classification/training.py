"""The token classification family (named entities, chunks, parts of speech): a tag per word from
the word's first piece (transformers' AlbertForTokenClassification, as its run_ner labels them:
the other pieces and the special tokens carry no target), scored at the entity level with
conlleval's rules (precision, recall and F1 of whole spans; accuracy over words), with the
predictions written as conlleval's input (`token gold predicted`). A training sentence is cut at
finetune.max_seq_length; an eval sentence is windowed as inference windows a row (windows.py), so
that every word is tagged and the eval's tags are what predict gives."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ....config import FinetuneSection
from ....errors import BadInput
from ...distill_losses import position_kl_sum
from ...family import Baseline, EncodedTask, Evaluation
from ...labels import sorted_names
from ...loop import collate
from ...splits import Units, train_and_eval
from ...tokenizer import PairTokenizer
from . import FAMILY
from .metrics import predictions_conll, reported_scores
from .reading import Sentences, read_sentences, sample_sentences, split_sentences
from .windows import WordFeatures, encode_sentences, read_tags

IGNORED = -100
"""The target of a position that is not a word's first piece (torch's and transformers' ignore index)."""
OUTSIDE = "O"
"""The tag of a word outside every entity."""
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
    """What evaluation reads besides the scores: each eval sentence's words and gold tags, and
    where each word's tag is read (windows.WordFeatures.places)."""

    tokens: list[list[str]]
    tags: list[list[str]]
    places: list[tuple[np.ndarray, np.ndarray]]
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


def tag_ids(sentences: Sentences, ids: dict[str, int]) -> list[list[int]]:
    """Each sentence's tags as class ids; a tag the training data never had is an error."""
    for i, tags in enumerate(sentences.tags):
        unknown = [t for t in tags if t not in ids]
        if unknown:
            raise BadInput(
                f"{sentences.source} {sentences.places[i]}: tag {unknown[0]!r} never appears in the training "
                f"data; the training tags are {', '.join(ids)}"
            )
    return [[ids[t] for t in tags] for tags in sentences.tags]


def encode_train(tokenizer: PairTokenizer, sentences: Sentences, targets_of: list[list[int]], length: int):
    """Features, targets [N, length] and first-piece positions of the training sentences, each cut
    at `length`."""
    features, starts = [], []
    targets = np.full((len(sentences), length), IGNORED, dtype=np.int64)
    for i, (words, tags) in enumerate(zip(sentences.tokens, targets_of)):
        input_ids, first = encode_words(tokenizer, words, length)
        features.append((input_ids, [0] * len(input_ids)))
        starts.append(first)
        targets[i, first] = tags[: len(first)]
    return features, targets, starts


def encode_eval(tokenizer: PairTokenizer, sentences: Sentences, targets_of: list[list[int]], length: int):
    """The eval sentences windowed (windows.encode_sentences), and targets [features, length]: each
    word's at the one place its tag is read."""
    encoded: WordFeatures = encode_sentences(tokenizer, sentences.tokens, length)
    targets = np.full((len(encoded.features), length), IGNORED, dtype=np.int64)
    for (features, positions), tags in zip(encoded.places, targets_of):
        targets[features, positions] = tags
    return encoded, targets


class TokenClassificationFamily:
    model_class = FAMILY.model_class
    problem_type = None
    target_dtype = torch.long
    targets_by_position = True
    """A target per position (IGNORED where none), cut with the batch to its width (collate)."""

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
        train_features, train_targets, train_starts = encode_train(tokenizer, train, tag_ids(train, ids), length)
        windowed, eval_targets = encode_eval(tokenizer, evaluation, tag_ids(evaluation, ids), length)
        cut = sum(len(words) - len(first) for words, first in zip(train.tokens, train_starts))
        return EncodedTask(
            train=train_features,
            train_targets=train_targets,
            eval=windowed.features,
            eval_targets=eval_targets,
            reference=TaggedSentences(
                evaluation.tokens, evaluation.tags, windowed.places, tag_scheme([*train.tags, *evaluation.tags])
            ),
            label_names=names,
            num_labels=len(names),
            accounting=splits.accounting,
            truncated={"train_words": cut},  # training words past finetune.max_seq_length: no target
            eval_examples=len(evaluation),
        )

    def loss_sum(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Cross-entropy summed over the batch's tagged positions (fp32)."""
        logits = outputs.float()
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORED, reduction="sum")

    def soft_loss_sum(
        self, outputs: torch.Tensor, teacher: torch.Tensor, temperature: float, targets: torch.Tensor
    ) -> torch.Tensor:
        """The per-token KL to the teacher summed over the tokens the cross-entropy counts (each
        word's first piece: not [CLS], [SEP], a word's further pieces or padding), as loss_sum sums
        over them: the two losses keep one scale whatever the sentences' lengths."""
        return position_kl_sum(outputs, teacher, targets != IGNORED, temperature)

    def scores(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs  # logits [B, S, num_labels]

    def evaluate(self, cfg: FinetuneSection, task: EncodedTask, scores: np.ndarray) -> Evaluation:
        reference: TaggedSentences = task.reference
        predicted = read_tags(scores, reference.places, task.label_names)
        metrics = reported_scores(reference.tags, predicted)
        metrics["eval_loss"] = eval_loss(scores, task.eval_targets)
        written = predictions_conll(zip(reference.tokens, reference.tags, predicted))
        usage = {"tag_scheme": reference.scheme, "word_start": WORD_START}
        return Evaluation(metrics, {"predictions.conll": written}, usage)

    def baseline(self, cfg: FinetuneSection, task: EncodedTask) -> Baseline:
        reference: TaggedSentences = task.reference
        metrics = reported_scores(reference.tags, [[OUTSIDE] * len(words) for words in reference.tokens])
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
