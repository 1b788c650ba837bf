"""`albert-ray`, the one command: it lists its subcommands, and each stage, the DAG, restore and the
local head run through it with their own arguments and errors (here in-process; the installed
console script itself runs in test_entry_points.py's `test_the_real_commands`)."""

from pipelines.cli.command import main, subcommands
from pipelines.rundir.registry import STAGES


def test_help_lists_every_subcommand_with_one_line(capsys):
    assert main(["--help"]) == 0
    listed = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line.startswith("  ")}
    assert list(listed) == ["run", *STAGES, "restore", "local", "export", "serve"] == list(subcommands())
    for name, stage in STAGES.items():
        assert stage.summary in listed[name]
    assert main(["tokenize"]) == 2
    assert capsys.readouterr().err.strip() == (
        "albert-ray: error: unknown command 'tokenize'; the commands are " + ", ".join(subcommands())
    )


def test_each_subcommand_runs_with_its_own_arguments(spiece_model, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["vocab", f"run_dir={run_dir}", f"vocab.model={spiece_model}"]) == 0  # a stage that needs no Ray
    assert f"written to {run_dir}/vocab" in capsys.readouterr().out
    assert (run_dir / "vocab" / "manifest.json").exists()
    refused = {  # each one's own checks, through the one command: exit 2, one line named after it
        "data": (["data", f"run_dir={run_dir}", f"corpus.paths=[{tmp_path}/nowhere]"], "nowhere does not exist"),
        "pretrain": (["pretrain", f"run_dir={run_dir}", "train.lr=-1"], "train.lr=-1.0: must be > 0"),
        "finetune": (["finetune", f"run_dir={run_dir}"], "finetune needs the pretrain stage's output"),
        "predict": (["predict", f"run_dir={run_dir}"], "the predict stage needs predict.input"),
        "report": (["report", "run_dir=/"], "run_dir=/: a filesystem root"),
        "restore": (["restore", "vocab", f"run_dir={run_dir}"], "no complete previous output of the vocab stage"),
        "run": (["run", "--dry-run", "--force", "tokenize", f"run_dir={run_dir}"], "--force 'tokenize'"),
        "local": (["local", "run", "--config", "configs/tiny.yaml", "run_dir=/"], "a filesystem root"),
    }
    for name, (argv, message) in refused.items():
        assert main(argv) == 2, name
        captured = capsys.readouterr()
        lines = captured.err.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in captured.out + captured.err, (name, captured)
        assert lines[0].startswith(f"albert-ray {name}: error: ") and message in lines[0], (name, lines)
    assert main(["run", "--dry-run", f"run_dir={run_dir}", f"vocab.model={spiece_model}"]) == 0
    out = capsys.readouterr().out
    assert f"DAG for run_dir={run_dir}" in out and "  vocab: up to date: skipped" in out
