"""Benchmarks and learning experiments (run as scripts; see docs/BENCHMARKS.md). A package so that
tests can import the experiments' tasks."""
