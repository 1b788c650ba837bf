"""Exports of a trained model to other runtimes: ONNX (`onnx.py`), behind `albert-ray export`
(`command.py`). Pure: no Ray, no run directory; importing the package does not import torch."""
