"""`python -m pipelines.report`: the report stage on its own."""

import sys

from ..cli import stage_main

sys.exit(stage_main("report", "Write {run_dir}/report/report.md from the stages' outputs."))
