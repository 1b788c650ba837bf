"""`python -m pipelines.export onnx MODEL_DIR OUTPUT.onnx`: `albert-ray export` where it is not installed."""

import sys

from .command import main

sys.exit(main(prog="python -m pipelines.export"))
