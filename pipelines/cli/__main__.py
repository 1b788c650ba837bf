"""`python -m pipelines.cli <command> ...`: the `albert-ray` command where it is not installed (a job
submitted with `ray job submit --working-dir .` runs from the uploaded checkout)."""

import sys

from .command import main

sys.exit(main())
