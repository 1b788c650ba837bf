"""The pretraining export for each sentence objective: it loads in our model and in transformers
with the same weights and logits, and says which objective trained its sentence head."""

import json
from pathlib import Path

import pytest
import torch
import transformers

from albert_model import AlbertConfig, AlbertForPreTraining
from albert_model.hf import load_hf_pretrained
from pipelines.config import TrainSection
from pipelines.train.export import export
from pipelines.train.plan import PretrainPlan


@pytest.mark.parametrize("objective", ["sop", "nsp", "none"])
def test_each_objective_exports_and_imports_exactly(objective, tmp_path):
    config = AlbertConfig(
        vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16,
    )  # fmt: skip
    torch.manual_seed(0)
    model = AlbertForPreTraining(config)
    with torch.no_grad():  # non-trivial values everywhere (LayerNorms start at 1 and 0)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    plan = PretrainPlan(
        albert=config, train=TrainSection(), use_gpu=False, precision="fp32", masking=None, max_predictions=2,
        n_train=8, n_validation=8, batches_per_epoch=1, data_dir=str(tmp_path), out_dir=str(tmp_path),
        spiece_model=None, max_seq_length=16, sentence_objective=objective,
    )  # fmt: skip
    export(plan, model.state_dict(), {"step": 1, "mlm_loss": 1.0})
    hf_dir = tmp_path / "hf"
    assert json.loads((hf_dir / "config.json").read_text())["sentence_objective"] == objective
    assert (hf_dir / "README.md").exists() == (objective == "none")

    ours = load_hf_pretrained(hf_dir)
    assert all(torch.equal(ours.state_dict()[k], v) for k, v in model.state_dict().items())
    theirs, info = transformers.AlbertForPreTraining.from_pretrained(hf_dir, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert theirs.config.sentence_objective == objective
    ids = torch.randint(5, 50, (2, 9))
    types = torch.zeros_like(ids) if objective == "none" else (torch.arange(9) > 4).long().expand(2, 9)
    with torch.no_grad():
        mine, hf = ours.eval()(ids, types), theirs.eval()(input_ids=ids, token_type_ids=types)
    torch.testing.assert_close(mine.mlm_logits, hf.prediction_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(mine.sop_logits, hf.sop_logits, atol=1e-5, rtol=0)


def test_the_export_tokenizer_feeds_segment_ids_and_cuts_at_the_data_length(tiny_pretrained, tmp_path):
    """transformers loads pretrain/hf's tokenizer with the segment ids among its outputs (issue #44:
    transformers 5 leaves them out unless told) and data.max_seq_length as its model_max_length."""
    from pipelines.finetuning.tokenizer import PairTokenizer

    hf = AlbertConfig.from_hf_dict(json.loads((Path(tiny_pretrained) / "config.json").read_text()))
    plan = PretrainPlan(
        albert=hf, train=TrainSection(), use_gpu=False, precision="fp32", masking=None, max_predictions=2,
        n_train=8, n_validation=8, batches_per_epoch=1, data_dir=str(tmp_path), out_dir=str(tmp_path),
        spiece_model=str(Path(tiny_pretrained) / "spiece.model"), max_seq_length=20,
    )  # fmt: skip
    export(plan, AlbertForPreTraining(hf).state_dict(), {"step": 1})
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    pair = ("The first segment of a pair, long enough to be cut.", "The second one, which is about as long.")
    encoded = tokenizer(*pair, truncation=True)
    assert tokenizer.model_max_length == 20
    assert (encoded["input_ids"], encoded["token_type_ids"]) == PairTokenizer(str(tmp_path / "hf")).encode(*pair, 20)
    assert 1 in encoded["token_type_ids"]
