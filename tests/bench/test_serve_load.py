"""bench/serve_load.py end to end on a small size: both servers (today's, from an extract of the
revision before issue #46, and this checkout's) come up on Ray heads of their own, every cell's
requests are answered 200, and the table has a row per server, text kind and client count (its
figures go to BENCHMARKS.md)."""

from pathlib import Path

import torch

from albert_model import AlbertConfig
from albert_model.hf import save_hf_pretrained
from albert_model.model import AlbertForSequenceClassification
from tests.conftest import VOCAB_SIZE

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_the_load_bench_runs_both_servers_and_every_request_is_answered(tiny_pretrained, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))  # as when the script runs: it imports predict_throughput beside it
    from serve_load import TODAY_REVISION, main

    torch.manual_seed(0)
    config = AlbertConfig.from_preset("tiny", vocab_size=VOCAB_SIZE).replace(num_labels=2)
    model = AlbertForSequenceClassification(config).eval()
    classifier_export = str(
        save_hf_pretrained(model, tmp_path / "classifier", spiece_model=Path(tiny_pretrained) / "spiece.model")
    )

    out = tmp_path / "load.json"
    result = main(
        ["--model", classifier_export, "--seq", "32", "--clients", "1", "4", "--texts", "short", "mixed"]
        + ["--requests", "12", "--seconds", "30", "--out", str(out), "--new-env", "RAY_SERVE_HAPROXY_NBTHREAD=2"]
        + ["--today-args", "--cpus-per-replica 1", "--new-args", "--max-batch-size 8"]
    )
    cells = result["cells"]
    assert [(c["texts"], c["clients"], c["server"]) for c in cells] == [
        (kind, clients, server) for kind in ("short", "mixed") for clients in (1, 4) for server in ("today", "new")
    ]
    for c in cells:
        assert c["statuses"] == {"200": 12} and c["rps"] > 0 and 0 < c["p50_ms"] <= c["p99_ms"], c
    # today's server is the revision before issue #46's serving work, run from an extract of it
    assert result["today"] == TODAY_REVISION and result["commands"]["today"].endswith(f"# at serve-{TODAY_REVISION}")
    assert "# at" not in result["commands"]["new"] and Path(out).exists()
    # each server's own options reach its command, and only its
    today, new = result["commands"]["today"], result["commands"]["new"]
    assert "--cpus-per-replica 1" in today and "--cpus-per-replica" not in new
    assert "--max-batch-size 8" in new and "--max-batch-size" not in today
    assert result["new_env"] == {"RAY_SERVE_HAPROXY_NBTHREAD": "2"}  # the new server's head ran with it
