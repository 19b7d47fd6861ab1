"""The OpenAI-compatible client against a real local HTTP server that misbehaves on purpose."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from far.models.engines.openai_http import OpenAICompatibleLM
from far.models.lm import GenerateRequest, SamplingParams, ScoreRequest, messages


class Server:
    def __init__(self, script):
        """``script``: a list of behaviours, one per request in order: an int status, "hang", or "ok"."""
        self.script = list(script)
        self.bodies = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append(body)
                behaviour = server.script.pop(0) if server.script else "ok"
                if behaviour == "hang":
                    time.sleep(1.0)
                    return
                if isinstance(behaviour, int):
                    self.send_response(behaviour)
                    self.end_headers()
                    return
                if body.get("logprobs"):
                    content = {"token": "Yes", "logprob": -0.5, "top_logprobs": [
                        {"token": "Yes", "logprob": -0.5}, {"token": " No", "logprob": -1.5},
                        {"token": "no", "logprob": -4.0}]}
                    answer = {"choices": [{"message": {"content": "Yes"}, "logprobs": {"content": [content]}}]}
                else:
                    answer = {"choices": [{"message": {"content": '{"verdict": "execute"}'}}],
                              "usage": {"completion_tokens": 7}}
                payload = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


@pytest.fixture
def server(request):
    instance = Server(request.param)
    yield instance
    instance.close()


def request(schema=None):
    return GenerateRequest(messages=messages("s", "u"), params=SamplingParams(seed=3, max_tokens=20),
                           json_schema=schema)


@pytest.mark.parametrize("server", [[503, 502, "ok"]], indirect=True)
def test_retries_with_backoff_then_succeeds(server):
    lm = OpenAICompatibleLM(server.url, "m", backoff_s=0.01, max_retries=3)
    (result,) = lm.generate([request(schema={"type": "object"})])
    assert result.error is None and result.text == '{"verdict": "execute"}' and result.completion_tokens == 7
    assert len(server.bodies) == 3
    sent = server.bodies[-1]
    assert sent["response_format"]["type"] == "json_schema" and sent["seed"] == 3 and sent["max_tokens"] == 20


@pytest.mark.parametrize("server", [["hang"] * 3], indirect=True)
def test_timeouts_become_model_timeout(server):
    lm = OpenAICompatibleLM(server.url, "m", timeout_s=0.2, backoff_s=0.01, max_retries=2)
    (result,) = lm.generate([request()])
    assert result.error == "MODEL_TIMEOUT" and len(server.bodies) == 3


@pytest.mark.parametrize("server", [[400]], indirect=True)
def test_client_errors_are_not_retried(server):
    lm = OpenAICompatibleLM(server.url, "m", backoff_s=0.01)
    assert lm.generate([request()])[0].error == "MODEL_ERROR" and len(server.bodies) == 1


@pytest.mark.parametrize("server", [[]], indirect=True)
def test_scores_from_top_logprobs_and_concurrent_batches(server):
    lm = OpenAICompatibleLM(server.url, "m")
    results = lm.score([ScoreRequest(messages=messages("s", f"u{i}"), candidates=("Yes", "No")) for i in range(6)])
    import math

    for result in results:
        assert result.probabilities == pytest.approx((math.exp(-0.5), math.exp(-1.5)))
    assert len(server.bodies) == 6 and all(b["max_tokens"] == 1 for b in server.bodies)


def test_unreachable_server_is_a_fault_not_a_crash():
    lm = OpenAICompatibleLM("http://127.0.0.1:9", "m", timeout_s=0.5, backoff_s=0.01, max_retries=1)
    assert lm.generate([request()])[0].error in ("MODEL_ERROR", "MODEL_TIMEOUT")
