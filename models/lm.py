"""The language-model layer under the real edge and cloud backends.

An ``LM`` does two things, batched: ``score`` (next-token probabilities of a few candidate answers, which is
how the edge gets a risk score from a small model) and ``generate`` (chat completion, optionally constrained
to a JSON schema, which is how the cloud writes its verdict). Engines implement it in-process
(transformers, vLLM) or over HTTP (any OpenAI-compatible server); ``cluster/`` hosts engines on Ray actors
behind the same protocol; ``far.models.cache.CachedLM`` adds the persistent model-call cache as a wrapper.

Faults are data: an engine never raises for a bad call; it returns a result whose ``error`` names the fault
class (``MODEL_TIMEOUT``, ``MALFORMED_OUTPUT``, ``ACTOR_DIED``, ``MODEL_ERROR``), and the agent handles it
with the policy's retry and fallback.
"""
from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

ModelFault = Literal["MODEL_TIMEOUT", "MALFORMED_OUTPUT", "ACTOR_DIED", "MODEL_ERROR"]
TRANSIENT_FAULTS: frozenset[str] = frozenset({"MODEL_TIMEOUT", "ACTOR_DIED", "MODEL_ERROR"})  # never cached


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    role: Literal["system", "user", "assistant"]
    content: str


class SamplingParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(128, ge=1)
    seed: int = 0


class ScoreRequest(BaseModel):
    """P(next token = each candidate | chat prompt); candidates are single words such as "Yes"/"No"."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    messages: tuple[Message, ...]
    candidates: tuple[str, ...] = Field(min_length=1)


class ScoreResult(BaseModel):
    model_config = ConfigDict(frozen=True)
    probabilities: tuple[float, ...] = ()  # same order as the candidates; not renormalised
    latency_ms: float = 0.0
    error: ModelFault | None = None


class GenerateRequest(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    messages: tuple[Message, ...]
    params: SamplingParams = SamplingParams()
    json_schema: dict[str, Any] | None = None  # constrain the output where the engine can


class GenerateResult(BaseModel):
    model_config = ConfigDict(frozen=True)
    text: str = ""
    completion_tokens: int = 0
    latency_ms: float = 0.0
    error: ModelFault | None = None


@runtime_checkable
class LM(Protocol):
    model_id: str  # names the weights too (a hash), so cache keys change when the weights do

    def score(self, requests: list[ScoreRequest]) -> list[ScoreResult]: ...

    def generate(self, requests: list[GenerateRequest]) -> list[GenerateResult]: ...


def messages(system: str, user: str) -> tuple[Message, ...]:
    return (Message(role="system", content=system), Message(role="user", content=user))
