"""Ray stages (vocabulary, examples, pretraining, fine-tuning) and the end-to-end DAG."""

import warnings

# Ray Train's TrainController builds ExecutionOptions(exclude_resources=...) itself, to record the
# run's data settings (ray/train/v2/_internal/state/util.py, `DataConfig.default_ingest_options`), and
# that argument's deprecation warning (ray-project/ray#64632, flagged in its review) then lands in
# every job's log though nothing of ours sets it. The controller imports this package when it
# unpickles the run's config, after its own `import ray` added Ray's filter for
# RayDeprecationWarning, so this one comes first there (a filter added before Ray's import, as in a
# driver, is overridden by Ray's; the warning is not raised in a driver).
warnings.filterwarnings(
    "ignore", message="`ExecutionOptions.exclude_resources` is deprecated", category=DeprecationWarning
)
