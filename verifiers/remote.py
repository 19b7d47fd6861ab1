"""Score through a running ``far serve`` instead of in process: a ``Verifier`` over its REST API.

``verifier: {endpoint: http://127.0.0.1:8000, token_env: FAR_SERVE_TOKEN}`` in a run config sends every
rollout to ``POST /v1/score/trajectories`` (batches of ``batch_size``) and rebuilds the verdicts; the same
rollouts score identically either way (a test checks it). The server says which failures and successes it
found (with attribution) and z; their penalties, criticality and the reward are the *run's* reward table's,
whatever table the server was started with.

Scoring is idempotent, so a request is sent again (``retries`` times, with backoff) when the connection fails
or the answer is a 500/502/503/504: what Serve's proxy answers for the requests in flight on a replica that
died (Serve does not retry those itself; see BENCHMARKS.md, faults). Any other status is final.
"""
from __future__ import annotations

import os
import time
from collections.abc import Sequence

from far.rollout.errors import FarInputError
from far.rollout.scenario import Scenario
from far.rollout.trajectory import Trajectory
from far.rollout.trajectory_io import TrajectoryModel
from far.verifiers.taxonomy import FailureKind, RewardTable, SuccessKind
from far.verifiers.verdict import Z_DIMENSIONS, Failure, Verdict, ZVector

RETRYABLE_STATUS = frozenset({500, 502, 503, 504})
RETRIES = 3
BACKOFF_S = 0.25  # doubled after each attempt


class HttpVerifier:
    name = "http"

    def __init__(self, endpoint: str, token: str | None = None, batch_size: int = 128,
                 timeout_s: float = 120.0, table: RewardTable | None = None, retries: int = RETRIES,
                 backoff_s: float = BACKOFF_S) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.retries = retries
        self.backoff_s = backoff_s
        self.table = table or RewardTable()
        self.token = token
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self._client = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_client": None}  # connections stay in their process

    def client(self):
        import httpx

        if self._client is None:
            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            self._client = httpx.Client(base_url=self.endpoint, headers=headers, timeout=self.timeout_s)
        return self._client

    def verify(self, scenario: Scenario, trajectory: Trajectory) -> Verdict:
        return self.verify_many([scenario], [trajectory])[0]

    def verify_many(self, scenarios: Sequence[Scenario], trajectories: Sequence[Trajectory]) -> list[Verdict]:
        verdicts: list[Verdict] = []
        pairs = list(zip(scenarios, trajectories, strict=True))
        for start in range(0, len(pairs), self.batch_size):
            items = [{"scenario": s.model_dump(mode="json"),
                      "trajectory": TrajectoryModel.from_trajectory(t).model_dump(mode="json")}
                     for s, t in pairs[start:start + self.batch_size]]
            response = self.post("/v1/score/trajectories", {"items": items})
            if response.status_code != 200:
                raise FarInputError(f"verifier endpoint answered {response.status_code}: {response.text[:200]}",
                                    field="verifier.endpoint")
            verdicts.extend(from_response(r, self.table) for r in response.json()["results"])
        return verdicts


    def post(self, path: str, payload: dict):
        """POST, sent again on a failed connection or a retryable status (scoring is idempotent)."""
        import httpx

        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            try:
                response = self.client().post(path, json=payload)
            except httpx.TransportError as error:
                failure: str = type(error).__name__
                continue
            if response.status_code not in RETRYABLE_STATUS:
                return response
            failure = f"status {response.status_code}"
        raise FarInputError(f"verifier endpoint {self.endpoint} failed {self.retries + 1} times (last: {failure})",
                            field="verifier.endpoint")


def from_response(body: dict, table: RewardTable) -> Verdict:
    """A verdict from the server's answer, priced by ``table``."""
    failures = []
    for f in body["failures"]:
        kind = FailureKind(f["kind"])
        failures.append(Failure(kind=kind, critical=table.is_critical(kind), penalty=table.penalty(kind),
                                step=f["step"], node=f["node"], cause_step=f["cause_step"],
                                cause_node=f["cause_node"], decision=f["decision"], parameter=f["parameter"]))
    successes = tuple(SuccessKind(s) for s in body["successes"])
    breakdown = {"members": body["members"], "disagreement": body["disagreement"], "review": body["review"]}
    return Verdict(tuple(failures), successes, table.reward(failures, successes),
                   ZVector(*(body["z"][d] for d in Z_DIMENSIONS)), breakdown, benign=body["benign"])


def http_verifier(endpoint: str, token_env: str, table: RewardTable | None = None) -> HttpVerifier:
    return HttpVerifier(endpoint, os.environ.get(token_env) or None, table=table)
