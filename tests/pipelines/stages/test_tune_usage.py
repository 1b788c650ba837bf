"""A search's ray.tune.run records its callbacks in Ray's usage tags as Ray's own telemetry does,
without importing Ray's MLflow and W&B integrations to do so (tune_search.tag_own_callbacks)."""

import builtins
import json
from unittest import mock

import ray.tune
from ray._common.usage.usage_lib import TagKey
from ray.air._internal import usage
from ray.tune.logger import CSVLoggerCallback, LoggerCallback

from pipelines.stages import tune_search


class Journal(ray.tune.Callback):
    pass


class Tracker(LoggerCallback):
    pass


def imports_of(call) -> list[str]:
    """The modules `call()` imports (a cached module's import statement included)."""
    imported, real = [], builtins.__import__

    def spying(name, *args, **kwargs):
        imported.append(name)
        return real(name, *args, **kwargs)

    with mock.patch("builtins.__import__", spying):
        call()
    return imported


def test_a_search_records_its_callbacks_as_ray_counts_them_without_importing_its_integrations(monkeypatch):
    recorded = []
    monkeypatch.setattr(tune_search, "record_extra_usage_tag", lambda key, value: recorded.append((key, value)))
    ours = [Journal(), Journal(), Tracker(), "not a callback"]
    assert imports_of(lambda: tune_search.tag_own_callbacks(ours)) == []
    tune_search.tag_own_callbacks([])  # none: no tag, as Ray's
    assert recorded == [(TagKey.AIR_CALLBACKS, json.dumps({"CustomCallback": 2, "CustomLoggerCallback": 1}))]
    # the tag Ray's telemetry would have written, which imports the integrations to count
    rays = []
    assert "ray.air.integrations.mlflow" in imports_of(lambda: rays.append(usage._count_callbacks(ours)))
    assert json.loads(recorded[0][1]) == dict(rays[0])

    # a callback of Ray's own: Ray's count
    monkeypatch.setattr(tune_search, "RAY_TAG_CALLBACKS", lambda callbacks: recorded.append(("ray's", callbacks)))
    callbacks = [CSVLoggerCallback(), Journal()]
    tune_search.tag_own_callbacks(callbacks)
    assert recorded[-1] == ("ray's", callbacks)
