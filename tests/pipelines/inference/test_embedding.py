"""Sentence embeddings (pipelines/inference/embedding.py, issue #46): the pooling's definition on
numbers worked by hand, and the Embedder on the torch encoder equal to plain transformers'
`AutoModel` mean-pooled over the attention mask (or read at [CLS], normalised or not) within 1e-5,
for a pretraining export (the encoder alone; one whose tokenizer records a shorter length than its
positions, as the pretrain stage's does, applied at that length) and for a fine-tuned export (its
head ignored)."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from pipelines.errors import BadInput
from pipelines.inference.embedding import Embedder, has_task_head, pooled, sentence_vector

from ..embedding_reference import ROWS, transformers_embeddings


def test_mean_pooling_leaves_padding_out_and_cls_is_the_first_position():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]], [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    out = pooled(hidden, mask).numpy()  # (B, pooling, H)
    np.testing.assert_allclose(out[:, 0], [[2.0, 3.0], [2.0, 3.0]])
    np.testing.assert_allclose(out[:, 1], [[1.0, 2.0], [0.0, 1.0]])
    np.testing.assert_allclose(pooled(hidden[1:], None).numpy(), out[1:])  # no mask: no padding
    assert sentence_vector(out[0], "mean", True) == pytest.approx([2 / 13**0.5, 3 / 13**0.5])
    assert sentence_vector(out[0], "cls", False) == [1.0, 2.0]
    assert sentence_vector(np.zeros((2, 3), np.float32), "mean", True) == [0.0, 0.0, 0.0]


def trained_at(folder: str, length: int, copy: Path) -> str:
    """A copy of the export `folder` whose tokenizer records `length`, as the pretrain stage's export
    records data.max_seq_length (tokenizer_config.json's model_max_length)."""
    shutil.copytree(folder, copy)
    settings = json.loads((copy / "tokenizer_config.json").read_text())
    (copy / "tokenizer_config.json").write_text(json.dumps({**settings, "model_max_length": length}))
    return str(copy)


@pytest.mark.parametrize("which", ["pretrained", "pretrained at 32 tokens", "fine-tuned"])
def test_the_embedder_equals_transformers_automodel_pooled_over_the_attention_mask(
    which, tiny_pretrained, classifier, tmp_path
):
    folder = {"pretrained": tiny_pretrained, "fine-tuned": classifier}.get(which)
    if folder is None:  # transformers cuts the long row at the tokenizer's 32: so must the embedder
        folder = trained_at(tiny_pretrained, 32, tmp_path / "hf")
        assert Embedder.load(folder, device="cpu").use.max_seq_length == 32
    assert has_task_head(json.loads((Path(folder) / "config.json").read_text()), folder) == (which == "fine-tuned")
    expected = transformers_embeddings(folder, ROWS)
    embedder = Embedder.load(folder, batch_size=3, device="cpu")  # 3: two batches, each padded
    for (pooling, normalize), vectors in expected.items():
        embedder.pooling, embedder.normalize = pooling, normalize
        outputs, rejected = embedder.run(ROWS)
        assert rejected == {}
        got = np.array([out["embedding"] for out in outputs])
        np.testing.assert_allclose(got, vectors, atol=1e-5, err_msg=f"{which} {pooling} {normalize}")
    assert not np.allclose(expected["mean", False], expected["cls", False], atol=1e-3)  # the two poolings differ


def test_an_export_of_no_albert_encoder_is_refused_by_name():
    with pytest.raises(BadInput, match="an export of BertModel; embeddings are read from an ALBERT encoder"):
        has_task_head({"architectures": ["BertModel"]}, "elsewhere")


def test_the_embedding_keys_are_refused_where_nothing_embeds():
    from pipelines.config import load_config
    from pipelines.errors import ConfigError

    refused = {
        "predict.pooling='cls': applies to predict.output_kind=embedding only": ["predict.pooling=cls"],
        "predict.normalize=true: applies to predict.output_kind=embedding only": ["predict.normalize=true"],
        "predict.pooling='max': must be one of mean, cls": ["predict.output_kind=embedding", "predict.pooling=max"],
        "predict.output_kind='vector': must be one of prediction, embedding": ["predict.output_kind=vector"],
        "predict.output_kind='embedding': must be prediction with predict.exit_patience": [
            "predict.output_kind=embedding",
            "predict.exit_patience=2",
        ],
    }
    for message, overrides in refused.items():
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            load_config(overrides=overrides)
    section = load_config(overrides=["predict.output_kind=embedding", "predict.pooling=cls", "predict.normalize=true"])
    assert (section.predict.embeds, section.predict.pooling, section.predict.normalize) == (True, "cls", True)
