"""Several workers on one study: the store's shared state, without engines.

The PostgreSQL tests use the throwaway server `make test` starts (`.ci/with-postgres`), each on a
database of its own.
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from types import SimpleNamespace

import optuna
import pytest
import yaml
from optuna.trial import TrialState
from sqlalchemy import create_engine, text

from tests.conftest import call_tuner
from tuner.search.bridge import Heartbeat, optuna_storage
from tuner.search.recovery import reap_stale
from tuner.spec.study_spec import BudgetSpec
from tuner.store import BudgetSpent, ConfigurationTaken, Store

SPEC = {
    "engine": {"name": "vllm", "args": {}, "env": {}},
    "hardware": {"gpu_type": "H200", "devices": 4},
    "model": {"path": "/models/gpt-oss-120b"},
    "budget": {"n_trials": 3},
}


def _open_store(url: str) -> int:
    Store.open(url).close()
    return 1


def _optuna_setup(url: str) -> int:
    with Store.open(url) as store:
        optuna_storage(url, store=store).engine.dispose()
    return 1


def _claim(url: str, number: int) -> bool:
    with Store.open(url) as store:
        try:
            store.start_trial("s", number, {"n": number}, worker_host="h", worker_pid=number,
                              budget=3)
        except BudgetSpent:
            return False
    return True


def _claim_config(url: str, number: int) -> str:
    """Claim one and the same configuration as trial `number`."""
    with Store.open(url) as store:
        try:
            store.start_trial("s", number, {"max_batch_size": 16}, worker_host="h",
                              worker_pid=number, budget=8)
        except ConfigurationTaken:
            return "taken"
    return "claimed"


def test_workers_opening_a_fresh_postgres_database_at_once_migrate_it_once(pg_url):
    with ProcessPoolExecutor(6) as pool:
        assert list(pool.map(_open_store, [pg_url] * 6)) == [1] * 6
    engine = create_engine(pg_url)
    with engine.connect() as c:
        versions = c.execute(text("SELECT version_num FROM tuner_alembic_version")).all()
    engine.dispose()
    assert len(versions) == 1


def test_workers_setting_up_optunas_tables_at_once_do_not_collide(pg_url):
    # Unlocked, most of these fail with a duplicate key in pg_type (CREATE TABLE races).
    with ProcessPoolExecutor(6) as pool:
        assert list(pool.map(_optuna_setup, [pg_url] * 6)) == [1] * 6


def _empty_study(backend: str, request, tmp_path) -> str:
    """The URL of a database on `backend` holding one empty study "s"."""
    url = request.getfixturevalue("pg_url") if backend == "postgresql" else \
        f"sqlite:///{tmp_path}/tuner.db"
    with Store.open(url) as store:
        store.ensure_study("s", engine="vllm", model="m", gpu_type="cpu", spec={}, space={},
                           tuner_version="test")
    return url


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_concurrent_claims_never_exceed_the_budget(backend, request, tmp_path):
    url = _empty_study(backend, request, tmp_path)
    with ProcessPoolExecutor(8) as pool:
        claimed = list(pool.map(_claim, [url] * 8, range(8)))
    assert sum(claimed) == 3
    with Store.open(url) as store:
        assert store.budget_used("s") == 3
        # An interrupted trial gives its slot back: the study runs another in its place.
        first = next(t for t in store.trials("s"))
        assert store.interrupt_trial(first.id, reason="interrupted: test")
        assert not store.interrupt_trial(first.id, reason="twice")  # another worker was first
        assert store.budget_used("s") == 2
        store.start_trial("s", 100, {"n": 100}, worker_host="h", worker_pid=1, budget=3)
        with pytest.raises(BudgetSpent):
            store.start_trial("s", 101, {"n": 101}, worker_host="h", worker_pid=1, budget=3)


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"])
def test_a_configuration_is_claimed_once_across_workers(backend, request, tmp_path):
    url = _empty_study(backend, request, tmp_path)
    with ProcessPoolExecutor(6) as pool:
        outcomes = list(pool.map(_claim_config, [url] * 6, range(6)))
    assert sorted(outcomes) == ["claimed"] + ["taken"] * 5
    with Store.open(url) as store:
        (running,) = store.trials("s")
        store.finish_trial(running.id, state="complete", objective=1.0, meets_sla=True)
        with pytest.raises(ConfigurationTaken, match=f"trial {running.number} "):
            store.start_trial("s", 50, {"max_batch_size": 16}, worker_host="h", worker_pid=1,
                              budget=8)
        # The same parameters in another order are the same configuration.
        with pytest.raises(ConfigurationTaken):
            store.start_trial("s", 51, {"max_batch_size": 16}, worker_host="h", worker_pid=1,
                              budget=8)
        # Interrupted (not the configuration's fault): it may run again.
        other = store.start_trial("s", 52, {"max_batch_size": 4}, worker_host="h",
                                  worker_pid=1, budget=8)
        assert store.interrupt_trial(other, reason="interrupted: test")
        store.start_trial("s", 53, {"max_batch_size": 4}, worker_host="h", worker_pid=1,
                          budget=8)


def test_each_worker_samples_with_a_seed_of_its_own_and_a_single_run_keeps_the_specs():
    from tuner.search.context import StudyContext
    from tuner.spec.study_spec import StudySpec

    spec = StudySpec.model_validate({**SPEC, "name": "s", "search_space": "gpt-oss-120b",
                                     "workload": {"input_len": 8, "output_len": 8,
                                                  "concurrency": [1], "requests_per_level": 4}})

    def seed(worker):
        return StudyContext(spec=spec, name="s", space=None, adapter=None, inventory=None,
                            shape=None, settings=None, store=None, storage_url="", runs_dir=None,
                            say=print, gpu=None, worker=worker).sampler_seed

    assert seed(None) == spec.sampler.seed
    seeds = {seed(f"node-{n}:{pid}") for n in range(3) for pid in (100, 101)}
    assert len(seeds) == 6
    assert seed("node-0:100") == seed("node-0:100")  # derived, not random


def test_a_trial_whose_worker_stops_beating_is_failed_interrupted_and_retried_once(tmp_path):
    url = f"sqlite:///{tmp_path}/tuner.db"
    store = Store.open(url)
    store.ensure_study("s", engine="vllm", model="m", gpu_type="cpu", spec={}, space={},
                       tuner_version="test")
    budget = BudgetSpec(n_trials=2, heartbeat_interval_s=1, heartbeat_grace_s=2)
    study = optuna.create_study(study_name="s", storage=optuna_storage(url, budget),
                                direction="maximize")
    said: list[str] = []
    ctx = SimpleNamespace(store=store, name="s", say=said.append,
                          inventory=SimpleNamespace(host="another-node"))
    dist = {"max_batch_size": optuna.distributions.CategoricalDistribution([4, 16])}
    for batch in (4, 16):  # two configurations: the store claims each once
        study.enqueue_trial({"max_batch_size": batch})
    alive, dead = study.ask(dist), study.ask(dist)
    ids = {}
    for trial in (alive, dead):
        ids[trial.number] = store.start_trial("s", trial.number, trial.params,
                                              worker_host="node-1", worker_pid=1, budget=2)
    beats = optuna_storage(url, budget)
    with Heartbeat(beats, "s", alive.number, 1, said.append):
        dead_id = beats.get_trial_id_from_study_id_trial_number(
            beats.get_study_id_from_name("s"), dead.number)
        beats.record_heartbeat(dead_id)  # then its worker is SIGKILLed
        time.sleep(3.5)
        reap_stale(ctx, study)
        states = {t.number: t.state for t in study.get_trials()}
        assert states[alive.number] == TrialState.RUNNING  # its heartbeat kept it alive
    assert states[dead.number] == TrialState.FAIL
    record = store.trial("s", dead.number)
    assert (record.state, record.failure_kind) == ("failed", "interrupted")
    assert record.failure_reason == "interrupted: worker node-1 stopped sending heartbeats"
    assert store.trial("s", alive.number).state == "running"
    retry = [t for t in study.get_trials() if t.state == TrialState.WAITING]
    assert len(retry) == 1
    assert retry[0].system_attrs["failed_trial"] == dead.number
    assert retry[0].params == dead.params
    assert store.budget_used("s") == 1  # the retry takes the interrupted trial's place
    assert any("stopped sending heartbeats" in line for line in said)


def test_the_workers_job_reads_the_storage_url_from_a_secret(tmp_path):
    import kubernetes_validate

    url = f"sqlite:///{tmp_path}/tuner.db"
    with Store.open(url) as store:
        store.ensure_study("big", engine="vllm", model="/models/gpt-oss-120b", gpu_type="H200",
                           spec=SPEC, space={}, tuner_version="test")
    proc = call_tuner("export", "--storage", url, "--format", "k8s-workers", "--workers", "4",
                      "--image", "registry.example/tuner:1", "--secret", "db-url",
                      "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.code == 0, proc.stderr
    text_ = (tmp_path / "out" / "k8s-workers.yaml").read_text()
    assert "kubectl create secret generic db-url" in text_
    docs = [d for d in yaml.safe_load_all(text_) if d]
    assert len(docs) == 1
    job = docs[0]
    kubernetes_validate.validate(job, "1.33", strict=True)
    assert job["kind"] == "Job"
    assert job["spec"]["parallelism"] == job["spec"]["completions"] == 4
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["tuner", "worker", "--study", "big"]
    assert container["env"] == [{"name": "TUNER_STORAGE", "valueFrom": {
        "secretKeyRef": {"name": "db-url", "key": "url"}}}]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 4}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H200"}


def test_the_workers_job_needs_an_image(tmp_path):
    url = f"sqlite:///{tmp_path}/tuner.db"
    with Store.open(url) as store:
        store.ensure_study("big", engine="vllm", model="/m", gpu_type="H200", spec=SPEC,
                           space={}, tuner_version="test")
    proc = call_tuner("export", "--storage", url, "--format", "k8s-workers", cwd=tmp_path)
    assert proc.code == 2
    assert "needs --image" in proc.stderr


def test_a_worker_of_a_study_that_does_not_exist_is_bad_input(tmp_path):
    url = f"sqlite:///{tmp_path}/tuner.db"
    Store.open(url).close()
    proc = call_tuner("worker", "--study", "nope", "--storage", url, cwd=tmp_path)
    assert proc.code == 2
    assert "--study nope: no such study" in proc.stderr
    assert "--create-only" in proc.stderr
    proc = call_tuner("worker", "--devices", "first", "--storage", url, cwd=tmp_path)
    assert proc.code == 2
    assert "--devices first: give device indices" in proc.stderr


def test_a_worker_claims_only_devices_the_node_has_and_its_servers_stay_on_them():
    from dataclasses import replace

    from tuner.serve.engines import get_adapter
    from tuner.serve.hardware import Inventory, owned_devices
    from tuner.spec.errors import BadInput

    node = Inventory(kind="cpu", type="cpu", devices=(0, 1, 2, 3), description="4 cores",
                     host="h")
    mine = owned_devices(node, [2, 3])
    assert mine.devices == (2, 3)
    vllm = get_adapter("vllm")
    # A TP1 server of this worker is pinned to its own cores (a rank's worth), not the node's.
    assert vllm.placement_env({"tensor_parallel_size": 1}, replace(mine, per_rank=2),
                              [2, 3]) == {"VLLM_CPU_OMP_THREADS_BIND": "2-3"}
    assert vllm.placement_env({"tensor_parallel_size": 1}, mine, [2, 3]) == {
        "VLLM_CPU_OMP_THREADS_BIND": "2"}
    with pytest.raises(BadInput, match="not among this node's usable CPU cores"):
        owned_devices(node, [4])

