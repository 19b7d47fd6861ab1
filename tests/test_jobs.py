"""Durable policy-scoring jobs (far.serve.jobs): the SQLite job table, leases, take-over after a stopped replica,
pruning, and a known job id surviving a restart of the service."""
from __future__ import annotations

import threading
import time

import pytest
from conftest import oracle_models
from far.models.backends import ModelsConfig
from far.serve.app import create_api
from far.serve.backends import LocalBackend
from far.serve.jobs import JobStore, JobWorker
from far.serve.schemas import JobsConfig, ServeConfig
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_job_goes_queued_running_done_and_keeps_request_and_result(tmp_path):
    clock = Clock()
    store = JobStore(tmp_path / "jobs.sqlite", clock=clock)
    created = store.create("a", {"x": 1})
    assert created.status == "queued" and created.created == 1000.0 and created.attempts == 0
    assert store.claim("replica-1") == ("a", {"x": 1})
    assert store.get("a").status == "running" and store.claim("replica-2") is None  # held under a lease
    clock.now += 5
    assert store.finish("a", "replica-1", {"answer": 42})
    done = store.get("a")
    assert done.status == "done" and done.updated == 1005.0 and done.attempts == 1 and done.result == {"answer": 42}
    assert store.get("missing") is None


def test_a_stopped_replicas_job_is_taken_over_and_its_late_answer_ignored(tmp_path):
    clock = Clock()
    store = JobStore(tmp_path / "jobs.sqlite", lease_s=30.0, max_attempts=2, clock=clock)
    store.create("a", {"x": 1})
    assert store.claim("dead")[0] == "a"
    clock.now += 20
    assert store.renew("a", "dead")  # still alive at 20 s: lease to 50 s
    clock.now += 29
    assert store.claim("alive") is None
    clock.now += 2  # the lease ran out: the replica is presumed dead
    assert store.claim("alive") == ("a", {"x": 1})
    assert not store.finish("a", "dead", {"late": True}) and not store.renew("a", "dead")
    assert store.get("a").status == "running" and store.get("a").attempts == 2
    clock.now += 31  # the second holder stopped too: max_attempts reached -> failed, with the reason
    assert store.claim("third") is None
    failed = store.get("a")
    assert failed.status == "failed" and "stopped 2 times" in failed.error


def test_pruning_keeps_unfinished_jobs_and_honours_retention_and_the_cap(tmp_path):
    clock = Clock()
    store = JobStore(tmp_path / "jobs.sqlite", clock=clock)
    for index in range(6):
        store.create(f"j{index}", {"i": index})
        clock.now += 1
    for index in range(4):  # j0..j3 finish at 1006..1009; j4 runs; j5 waits
        store.claim("r")
        clock.now += 1
        store.finish(f"j{index}", "r", {"i": index})
    store.claim("r")
    assert store.prune(retention_s=1e9, max_jobs=4) == 0  # 4 finished: within the cap (unfinished not counted)
    assert store.prune(retention_s=1e9, max_jobs=2) == 2  # the two oldest finished go
    assert [store.get(f"j{i}") is None for i in range(6)] == [True, True, False, False, False, False]
    clock.now += 100
    assert store.prune(retention_s=50, max_jobs=100) == 2  # finished over 50 s ago
    assert store.counts() == {"running": 1, "queued": 1}


@given(st.integers(1, 12), st.integers(2, 4))
def test_replicas_claiming_at_once_run_every_job_exactly_once(jobs, replicas):
    import tempfile
    from pathlib import Path

    store_path = Path(tempfile.mkdtemp()) / "jobs.sqlite"
    JobStore(store_path)
    for index in range(jobs):
        JobStore(store_path).create(f"j{index}", {"i": index})
    ran: list[str] = []
    lock = threading.Lock()

    def replica(name: str) -> None:
        store = JobStore(store_path)  # a connection of its own, as another process would have
        while (claimed := store.claim(name)) is not None:
            with lock:
                ran.append(claimed[0])
            assert store.finish(claimed[0], name, {"by": name})

    threads = [threading.Thread(target=replica, args=(f"r{i}",)) for i in range(replicas)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(ran) == sorted(f"j{i}" for i in range(jobs))
    assert JobStore(store_path).counts() == {"done": jobs}


def test_jobs_are_claimed_only_by_services_of_the_same_config(tmp_path):
    path = tmp_path / "jobs.sqlite"
    JobStore(path, scope="config-a").create("a", {"x": 1})
    assert JobStore(path, scope="config-b").claim("b-replica") is None  # never re-run under another config
    assert JobStore(path, scope="config-b").get("a").status == "queued"  # still known: no 404
    assert JobStore(path, scope="config-a").claim("a-replica") == ("a", {"x": 1})
    a = serve_config(tmp_path)
    assert a.jobs_scope() == serve_config(tmp_path).model_copy(update={"port": 9}).jobs_scope()  # not scoring
    assert a.jobs_scope() != a.model_copy(update={"suites": {}}).jobs_scope()


def test_a_worker_outlives_a_failing_store(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    failures = iter([RuntimeError("database is locked")])
    real_prune = store.prune

    def flaky_prune(*args):
        error = next(failures, None)
        if error is not None:
            raise error
        return real_prune(*args)

    store.prune = flaky_prune
    worker = JobWorker(store, lambda request: {"ok": request}, owner="w", poll_s=0.05).start()
    try:
        time.sleep(0.2)  # the first drain failed; the worker must still be there
        store.create("after", {"n": 1})
        worker.notify()
        deadline = time.time() + 20
        while time.time() < deadline and store.get("after").status != "done":
            time.sleep(0.05)
    finally:
        worker.stop()
    assert store.get("after").status == "done"


def test_a_worker_runs_jobs_and_records_a_failure_with_its_reason(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")

    def run(request):
        if request["fail"]:
            raise ValueError("boom")
        return {"doubled": request["n"] * 2}

    worker = JobWorker(store, run, owner="w", poll_s=0.05).start()
    try:
        store.create("ok", {"fail": False, "n": 21})
        store.create("bad", {"fail": True, "n": 0})
        worker.notify()
        deadline = time.time() + 20
        while time.time() < deadline and store.counts().get("queued", 0) + store.counts().get("running", 0):
            time.sleep(0.05)
    finally:
        worker.stop()
    assert store.get("bad").status == "failed" and store.get("bad").error == "ValueError"
    assert store.get("ok").status == "done"


def serve_config(tmp_path, **jobs) -> ServeConfig:
    return ServeConfig(suites={"small": {"name": "edge_cloud", "seed": 5, "size": 120}}, sync_limit=10,
                       output=str(tmp_path / "serve"), jobs=JobsConfig(**jobs),
                       models=ModelsConfig.model_validate(oracle_models(cache={"enabled": False})))


def wait_done(api: TestClient, job_id: str) -> dict:
    for _ in range(600):
        status = api.get(f"/v1/jobs/{job_id}").json()
        if status["status"] in ("done", "failed"):
            return status
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish: {status}")


def test_a_job_left_running_by_a_stopped_service_is_resumed_by_the_next(tmp_path):
    request = {"policy": {"cloud_threshold": 0.6}, "suite": "small", "split": "train", "limit": 50}
    config = serve_config(tmp_path, lease_s=0.5)
    # the first service accepted the job and stopped mid-run: its record says running, its lease runs out
    store = JobStore(config.jobs_database(), lease_s=0.5, scope=config.jobs_scope())
    store.create("left-behind", request)
    assert store.claim("stopped-replica")[0] == "left-behind"
    api = TestClient(create_api(lambda backend=LocalBackend(config): backend), raise_server_exceptions=False)
    assert api.get("/v1/jobs/left-behind").json()["status"] in ("running", "done")  # known: never a 404
    resumed = wait_done(api, "left-behind")
    assert resumed["status"] == "done" and resumed["attempts"] == 2
    # the same request through the API gives the same result (scoring is deterministic)
    accepted = api.post("/v1/score/policy", json=request)
    assert accepted.status_code == 202 and accepted.json()["status"] == "queued"
    fresh = wait_done(api, accepted.json()["job_id"])
    assert fresh["result"] == resumed["result"]
    # a new service on the same database still answers for both
    again = TestClient(create_api(lambda backend=LocalBackend(config): backend), raise_server_exceptions=False)
    assert again.get(f"/v1/jobs/{accepted.json()['job_id']}").json()["result"] == resumed["result"]
    assert again.get("/v1/jobs/no-such-job").status_code == 404


@pytest.mark.parametrize("database, field", [("postgresql://db/far", "jobs.database"),
                                             ("mysql://x", "jobs.database")])
def test_a_database_that_is_not_sqlite_is_refused_at_load(tmp_path, database, field):
    import yaml
    from far.rollout.errors import FarInputError
    from far.serve.schemas import load_serve_config

    path = tmp_path / "serve.yaml"
    path.write_text(yaml.safe_dump({"jobs": {"database": database}}))
    with pytest.raises(FarInputError) as error:
        load_serve_config(path)
    assert error.value.field == field and "SQLite" in str(error.value)


def test_a_sqlite_url_and_relative_paths_resolve_against_the_working_directory(tmp_path, monkeypatch):
    assert serve_config(tmp_path).jobs_database() == tmp_path / "serve" / "jobs.sqlite"
    relative = ServeConfig(jobs=JobsConfig(database="sqlite:///state/jobs.db"))
    monkeypatch.chdir(tmp_path)
    assert relative.jobs_database() == tmp_path / "state" / "jobs.db"
    assert ServeConfig(output="out").jobs_database() == tmp_path / "out" / "jobs.sqlite"
    fixed = ServeConfig(output="out").with_absolute_paths()
    monkeypatch.chdir("/")
    assert fixed.jobs_database() == tmp_path / "out" / "jobs.sqlite"  # what the replicas will open
