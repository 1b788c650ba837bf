"""How many trials run at once: tune.max_concurrent_trials bounds it for both searchers (Tune drops
TuneSection.max_concurrent_trials, with a warning only, when given a BasicVariantGenerator), and
null means as many as the resources fit, optuna included (Tune runs an unlimited searcher's
trials one at a time)."""

import time

import pytest

from pipelines.config import TuneSection


def _trial(config):
    import ray.tune

    started = time.time()
    time.sleep(3)
    ray.tune.report({"x": config["x"], "started": started, "ended": time.time()})


def most_at_once(windows: list[tuple[float, float]]) -> int:
    return max(sum(start <= t < end for start, end in windows) for t, _ in windows)


@pytest.mark.parametrize("search,limit", [("random", 1), ("optuna", 1), ("optuna", None)])
def test_concurrent_trials(ray_session, search, limit, tmp_path):
    import ray.tune

    from pipelines.stages.tune_search import concurrent_trials, search_algorithm, trial_resources

    tc = TuneSection(search=search, max_concurrent_trials=limit, resources_per_trial={"CPU": 1})
    # the test session has 4 logical CPUs: all four trials fit at once
    assert trial_resources(tc) == {"CPU": 1.0} and concurrent_trials(tc) == (limit or 4)
    # two trials show a limit of one: unlimited, both would start at once (each runs 3 s and four
    # CPUs are free); four show that no limit runs more than one (optuna's default is one)
    samples = 2 if limit == 1 else 4
    tuner = ray.tune.Tuner(
        ray.tune.with_resources(_trial, {"cpu": 1}),
        param_space={"x": ray.tune.uniform(0.0, 1.0)},
        tune_config=ray.tune.TuneConfig(
            metric="x",
            mode="max",
            num_samples=samples,
            search_alg=search_algorithm(tc, concurrent_trials(tc)),
            reuse_actors=True,  # as the finetune stage's searches run: a trial after another in its process
        ),
        run_config=ray.tune.RunConfig(name="search", storage_path=str(tmp_path), verbose=0),
    )
    results = tuner.fit()
    assert len(results) == samples and not results.errors
    windows = [(r.metrics["started"], r.metrics["ended"]) for r in results]
    if limit == 1:
        assert most_at_once(windows) == 1, windows
    else:
        assert most_at_once(windows) >= 2, windows


@pytest.mark.parametrize("kind", ["random", "grid"])
def test_a_search_runs_the_draws_its_seed_always_made(kind):
    """A random search draws its configs up front (so that a resumed one knows which are left): the
    very configs Tune's BasicVariantGenerator draws with the same seed, in the same order (and a
    grid's, the repeats' search, in its order)."""
    import ray.tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    from pipelines.stages.tune_search import build_search_space, draw_configs

    space = (
        build_search_space(
            TuneSection(space={"finetune.lr": {"loguniform": [1e-5, 1e-3]}, "finetune.batch_size": [16, 32]})
        )
        if kind == "random"
        else {"finetune.lr": 0.001, "finetune.seed": ray.tune.grid_search([1, 2, 3])}
    )
    samples = 4 if kind == "random" else 1
    ray.tune.register_trainable("draws", lambda config: None)
    generator = BasicVariantGenerator(random_state=7)
    generator.add_configurations({"draws": {"run": "draws", "config": space, "num_samples": samples}})
    drawn = []
    while (trial := generator.next_trial()) is not None:
        drawn.append(trial.config)
    assert draw_configs(space, samples, seed=7) == drawn and len({str(c) for c in drawn}) == len(drawn) >= 3


def test_a_resumed_optuna_search_is_told_the_trials_that_ended():
    """Optuna's TPE, rebuilt for a resumed search, starts from the finished trials' results (as it
    was told them when they ended) and suggests new points of the space."""
    from pipelines.stages.tune_search import build_search_space, is_point, search_algorithm

    tc = TuneSection(
        search="optuna", space={"finetune.lr": {"loguniform": [1e-5, 1e-3]}, "finetune.batch_size": [16, 32]}
    )
    told = [
        ({"finetune.lr": 1e-4, "finetune.batch_size": 16}, 0.4),
        ({"finetune.lr": 5e-4, "finetune.batch_size": 32}, 0.7),
    ]
    searcher = search_algorithm(tc, 2, told=told)
    space = build_search_space(tc)
    assert searcher.set_search_properties("accuracy", "max", space)
    study = searcher.searcher._ot_study
    assert [(t.params, t.value, t.state.name) for t in study.trials] == [(c, v, "COMPLETE") for c, v in told]
    suggested = searcher.suggest("new")
    assert is_point(space)(suggested) and suggested not in [c for c, _ in told]
