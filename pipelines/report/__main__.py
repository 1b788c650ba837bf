"""`python -m pipelines.report`: the report stage on its own."""
import sys

from ..cli import stage_main
from .stage import run_report

stage_main(run_report, "Write {run_dir}/report.md from the stages' outputs.", sys.argv[1:])
