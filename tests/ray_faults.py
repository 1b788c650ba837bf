"""The Ray Train side of tests/faults.py: the worker callback that RAY_TRAIN_CALLBACKS names. Apart
from tests/faults.py so that the loop tests' plain processes, which import that module, do not
import Ray Train (~2 s in each spawned process)."""

from __future__ import annotations

from tests.faults import Faults, install

try:  # the worker-side callback type of Ray Train 2.60 (a developer API): only where Ray is installed
    from ray.train.v2._internal.execution.callback import WorkerCallback
except ImportError:  # the GPU machine's tests run without Ray
    WorkerCallback = object


class InjectFaults(WorkerCallback):
    """Built by Ray Train where the TorchTrainer is made (RAY_TRAIN_CALLBACKS), sent to every worker,
    and run there after the train context is set up, before the training function starts."""

    def __init__(self):
        self.faults = Faults.from_env()

    def after_init_train_context(self) -> None:
        install(self.faults)


__all__ = ["InjectFaults"]
