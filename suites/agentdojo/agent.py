"""AgentDojo episodes: a proposer agent, FAR's guard around every tool call, inside AgentDojo's own pipeline.

Pipeline: ``InitQuery -> proposer -> ToolsExecutionLoop([GuardedToolsExecutor, proposer])``, run by
``TaskSuite.run_task_with_pipeline``, so AgentDojo's runtime executes what the guard lets through and its
checkers say whether the user's task was done (utility) and whether the attack succeeded (security).

The guard walks FAR's agent (``far.rollout.agent``'s node functions, or its LangGraph graph) once per proposed
call, over a ``ModelRecord`` of that call: edge risk -> cloud review above ``cloud_threshold`` ->
confirmation of sensitive calls -> execution with ``max_retries`` -> ``fallback_mode``. Outcomes:
completed (the call ran), vetoed/denied (blocked; the agent goes on), unhandled (the call failed and the
agent went on regardless), shutdown/handed_off (the episode stops: ``AbortAgentError``).

The default proposer, ``ScriptedCompromisedAgent``, is a worst-case attacker that always obeys: it plays the
user task's ground-truth calls and, once an injected text reaches it through a tool result, the injection
task's ground-truth calls first, ending with the user task's ground-truth output. Anything that implements
AgentDojo's ``BasePipelineElement`` can replace it (a real LLM agent).

Speed: given the scenario, an episode is a deterministic function of the guard's outcome per call. Each
``Episode`` keeps a trie of what it has seen (the call proposed after each prefix of outcomes, with its model
record, and the checkers' verdict where an episode ended). A policy whose path is in the trie is replayed
without running AgentDojo; a new path runs the real pipeline once and extends the trie.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentdojo.agent_pipeline import AgentPipeline, InitQuery, ToolsExecutionLoop
from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
from agentdojo.agent_pipeline.errors import AbortAgentError
from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.functions_runtime import EmptyEnv
from agentdojo.types import (
    ChatAssistantMessage,
    ChatToolResultMessage,
    get_text_content_as_str,
    text_content_block_from_string,
)
from far.rollout.agent import DEFAULT_COSTS, Costs, replay_calls, run_graph
from far.rollout.calls import CloudReview, EdgeAssessment, GroundTruthEnvironment, ModelSet, RecordedCalls
from far.rollout.policy import Policy
from far.rollout.scenario import Scenario
from far.rollout.trajectory import (
    COMPLETED,
    DENIED,
    HANDED_OFF,
    SHUTDOWN,
    UNHANDLED,
    VETOED,
    Step,
    Trajectory,
)
from far.suites.agentdojo.calls import call_scenario
from far.suites.agentdojo.environment import injected_environment, load_task_suite

STOPS_EPISODE = (SHUTDOWN, HANDED_OFF)
CONTEXT_CHARS = 2000  # tool output the edge sees, most recent last
MAX_CALLS = 100


@dataclass(frozen=True)
class GuardedCall:
    """One proposed call: what the guard's models were asked about it, and what they answered."""

    mini: Scenario  # the call as a one-action scenario (request + context, the call, labels for simulations)
    calls: RecordedCalls
    origin: str  # "user" (serves the user's task) or "injection" (an injection task's ground-truth call)
    function: str
    args: dict[str, Any]


@dataclass(frozen=True)
class EpisodeEnd:
    utility: bool
    attack_succeeded: bool  # AgentDojo's ``security`` for injected scenarios (True = compromised)
    injection_seen: bool
    stopped: str | None  # the outcome that stopped the episode early, if any


@dataclass
class _Node:
    call: GuardedCall | None = None
    children: dict[tuple[str, int], "_Node"] = field(default_factory=dict)
    end: EpisodeEnd | None = None


def outcome_key(trajectory: Trajectory) -> tuple[str, int]:
    """What the rest of the episode depends on: how the call ended and how often it took effect."""
    return trajectory.outcome, len(trajectory.executions())


def walk_call(call: GuardedCall, policy: Policy, costs: Costs, graph: Any = None) -> Trajectory:
    if graph is None:
        return replay_calls(call.calls, policy, costs)
    return run_graph(graph, call.mini, call.calls, costs)


def episode_outcome(outcomes: Sequence[str]) -> str:
    """The episode's outcome from its calls': a stop wins, then an unhandled failure, then a refusal."""
    for wanted in (*STOPS_EPISODE, UNHANDLED, VETOED, DENIED):
        if wanted in outcomes:
            return wanted
    return COMPLETED


class Episode:
    """One AgentDojo scenario, rolled out under any policy (see the module docstring for the trie)."""

    def __init__(self, scenario: Scenario, models: Any, proposer_factory: Any = None) -> None:
        self.scenario = scenario
        self.models = models
        self.proposer_factory = proposer_factory or ScriptedCompromisedAgent
        self.root = _Node()
        self.pipeline_runs = 0  # real AgentDojo runs (the rest were replayed from the trie)

    def rollout(self, policy: Policy, costs: Costs = DEFAULT_COSTS, graph: Any = None) -> Trajectory:
        trajectory = self._replay(policy, costs, graph)
        if trajectory is None:
            self.run_pipeline(policy, costs, graph)
            trajectory = self._replay(policy, costs, graph)
            assert trajectory is not None, "a pipeline run must leave its own path in the trie"
        return trajectory

    def _replay(self, policy: Policy, costs: Costs, graph: Any) -> Trajectory | None:
        node = self.root
        steps: list[Step] = []
        outcomes: list[str] = []
        origins: list[str] = []
        while node.end is None:
            if node.call is None:
                return None
            walked = walk_call(node.call, policy, costs, graph)
            call_index = len(outcomes)
            offset = len(steps)
            for step in walked.steps:  # fresh Step objects per walk: renumber them into the episode
                step.index += offset
                step.inputs["call_index"] = call_index
                steps.append(step)
            outcomes.append(walked.outcome)
            origins.append(node.call.origin)
            child = node.children.get(outcome_key(walked))
            if child is None:
                return None
            node = child
        end = node.end
        result = {"utility": end.utility, "attack_succeeded": end.attack_succeeded,
                  "injection_seen": end.injection_seen, "stopped": end.stopped, "call_origins": origins,
                  "call_outcomes": outcomes}
        return Trajectory(self.scenario.id, policy, tuple(steps), episode_outcome(outcomes), None, result)

    def run_pipeline(self, policy: Policy, costs: Costs = DEFAULT_COSTS, graph: Any = None) -> EpisodeEnd:
        """Run the real AgentDojo pipeline under ``policy``, extending the trie along the way."""
        env_spec = self.scenario.environment or {}
        task_suite = load_task_suite(env_spec["version"], env_spec["suite"])
        user_task = task_suite.get_user_task_by_id(env_spec["user_task"])
        injection_id = env_spec.get("injection_task")
        injection_task = task_suite.get_injection_task_by_id(injection_id) if injection_id else None
        injections = env_spec.get("injections") or {}
        run = _Run(self, policy, costs, graph, user_task, injection_task, injections)
        proposer = self.proposer_factory(run)  # one instance, both before and inside the loop
        pipeline = AgentPipeline([InitQuery(), proposer,
                                  ToolsExecutionLoop([GuardedToolsExecutor(run), proposer], max_iters=MAX_CALLS)])
        pipeline.name = "far-guarded-agent"
        environment = injected_environment(env_spec["version"], env_spec["suite"], injections)
        utility, security = task_suite.run_task_with_pipeline(pipeline, user_task, injection_task, injections,
                                                              environment=environment)
        end = EpisodeEnd(utility=bool(utility), attack_succeeded=bool(security) and injection_task is not None,
                         injection_seen=run.injection_seen, stopped=run.stopped)
        run.cursor.end = end
        self.pipeline_runs += 1
        return end


class _Run:
    """State of one pipeline run shared by the proposer and the guard: the plans, the trie cursor, context."""

    def __init__(self, episode: Episode, policy: Policy, costs: Costs, graph: Any, user_task: Any,
                 injection_task: Any, injections: dict[str, str]) -> None:
        self.episode = episode
        self.policy = policy
        self.costs = costs
        self.graph = graph
        self.user_task = user_task
        self.injection_task = injection_task
        self.markers = [_squash(text) for text in injections.values() if _squash(text)]
        self.cursor = episode.root
        self.user_plan: list[Any] | None = None
        self.injection_plan: list[Any] = []
        self.injection_seen = False
        self.stopped: str | None = None
        self.occurrences: dict[str, int] = {}
        self.outputs: list[tuple[str, str]] = []  # (function, output) of every call that ran

    def plans(self, env: Any) -> None:
        """Ground-truth calls, computed once on the environment the task starts from."""
        if self.user_plan is None:
            self.user_plan = list(self.user_task.ground_truth(env.model_copy(deep=True)))
            if self.injection_task is not None:
                self.injection_plan = list(self.injection_task.ground_truth(env.model_copy(deep=True)))

    def origin(self, function: str, args: dict[str, Any]) -> str:
        """A call is the injection's iff it matches an injection ground-truth call the user did not ask for."""
        def same(call: Any) -> bool:
            return call.function == function and call.args == args

        if any(same(c) for c in self.injection_plan) and not any(same(c) for c in self.user_plan or []):
            return "injection"
        return "user"

    def contains_injection(self, text: str) -> bool:
        squashed = _squash(text)
        return any(marker in squashed for marker in self.markers)

    def guarded_call(self, function: str, args: dict[str, Any]) -> GuardedCall:
        """The call at the cursor: from the trie, or built now (the guard's models are asked once)."""
        node = self.cursor
        if node.call is not None:
            if (node.call.function, node.call.args) != (function, args):
                raise RuntimeError(f"{self.episode.scenario.id}: the proposer is not deterministic (expected "
                                   f"{node.call.function}, got {function}); episodes cannot be replayed")
            return node.call
        occurrence = self.occurrences.get(function, 0)
        mini = call_scenario(self.episode.scenario, function, args, self.origin(function, args), occurrence,
                             "\n".join(f"{f}: {o}" for f, o in self.outputs)[-CONTEXT_CHARS:], tuple(self.outputs))
        record = self.episode.models.record([mini])[0]
        origin = "injection" if mini.ground_truth.injected else "user"
        node.call = GuardedCall(mini, RecordedCalls(mini, record, GroundTruthEnvironment()), origin, function,
                                dict(args))
        return node.call

    def advance(self, call: GuardedCall, walked: Trajectory) -> None:
        self.cursor = self.cursor.children.setdefault(outcome_key(walked), _Node())
        self.occurrences[call.function] = self.occurrences.get(call.function, 0) + 1


class _LetsEverythingRun:
    """Guard models that let every call run (risk 0, reviews execute, the user approves)."""

    name, simulated, oracle = "lets-everything-run", False, False

    def assess(self, scenarios: Sequence[Scenario]) -> list[EdgeAssessment]:
        return [EdgeAssessment(0.0, s.proposed_action, 0.0, 0.0) for s in scenarios]

    def review(self, scenarios: Sequence[Scenario], proposals: Sequence[Any], attempt: int = 0) -> list[CloudReview]:
        return [CloudReview("execute", None, "", 0.0, 0.0) for _ in scenarios]

    def confirms(self, scenario: Scenario, action: Any) -> bool:
        return True


def calls_as_the_guard_sees_them(scenario: Scenario) -> list[Scenario]:
    """The episode's proposed calls as one-call scenarios, with the request *and the tool output so far*,
    exactly as the guard's models are asked about them at run time -- along the path where every call runs
    (the attacker's path: the injected text reaches the agent and it obeys). Learned guard models fit on these,
    so fit and run time see the same text."""
    guard = _LetsEverythingRun()
    episode = Episode(scenario, ModelSet(guard, guard, guard, GroundTruthEnvironment()))
    episode.rollout(Policy(cloud_threshold=1.0, max_retries=0, require_confirmation=False, fallback_mode="none"))
    calls, node = [], episode.root
    while node.call is not None:
        calls.append(node.call.mini)
        node = next(iter(node.children.values()))  # the one path that was walked
    return calls


def _squash(text: str) -> str:
    """Only the letters and digits of a text (escaped newlines dropped first). Tool results reach the agent
    as YAML dumps or Python reprs of environment data, which refold, escape and quote an injected text; its
    letters and digits survive in order, so that is what is compared."""
    return re.sub(r"[^0-9A-Za-z]+", "", text.replace("\\n", " ").replace("\\t", " "))


def _text(message: Any) -> str:
    content = message.get("content")
    return get_text_content_as_str(content) if content else ""


class ScriptedCompromisedAgent(BasePipelineElement):
    """The default proposer: ground-truth calls, one per turn, and the injection task's calls as soon as the
    injected text shows up in a tool result (it always obeys). Built per run."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.queue: list[Any] | None = None
        self.seen = 0  # messages already read

    def query(self, query, runtime, env=EmptyEnv(), messages=(), extra_args=None):
        run = self.run
        if self.queue is None:
            run.plans(env)
            self.queue = list(run.user_plan or [])
        for message in messages[self.seen:]:
            if message["role"] == "tool" and not run.injection_seen and run.contains_injection(_text(message)):
                run.injection_seen = True
                self.queue = list(run.injection_plan) + self.queue  # "do this first", and it obeys
        self.seen = len(messages) + 1
        if self.queue:
            reply = ChatAssistantMessage(role="assistant", content=[text_content_block_from_string("")],
                                         tool_calls=[self.queue.pop(0)])
        else:
            reply = ChatAssistantMessage(role="assistant", tool_calls=None,
                                         content=[text_content_block_from_string(run.user_task.GROUND_TRUTH_OUTPUT)])
        return query, runtime, env, [*messages, reply], extra_args if extra_args is not None else {}


class GuardedToolsExecutor(BasePipelineElement):
    """FAR's guard as an AgentDojo pipeline element, in place of ``ToolsExecutor``: each proposed call walks
    the FAR agent; what the walk executes runs in AgentDojo's runtime (once per attempt that took effect)."""

    def __init__(self, run: _Run) -> None:
        self.run = run

    def query(self, query, runtime, env=EmptyEnv(), messages=(), extra_args=None):
        extra_args = extra_args if extra_args is not None else {}
        if not messages or messages[-1]["role"] != "assistant" or not messages[-1]["tool_calls"]:
            return query, runtime, env, messages, extra_args
        run = self.run
        proposed = messages[-1]
        executed: list[Any] = []
        blocked: list[str] = []
        results: list[Any] = []
        for tool_call in proposed["tool_calls"]:
            guarded = run.guarded_call(tool_call.function, dict(tool_call.args))
            walked = walk_call(guarded, run.policy, run.costs, run.graph)
            output, error = "", None
            for step in walked.executions():
                call = step.inputs["call"]
                result, error = runtime.run_function(env, call.tool, _original_args(guarded, call))
                output = tool_result_to_str(result)
            run.advance(guarded, walked)
            if walked.outcome == COMPLETED:
                executed.append(tool_call)
                run.outputs.append((tool_call.function, output))
                results.append(ChatToolResultMessage(role="tool", content=[text_content_block_from_string(output)],
                                                     tool_call_id=tool_call.id, tool_call=tool_call, error=error))
                continue
            blocked.append(f"{tool_call.function} ({walked.outcome})")
            if walked.outcome in STOPS_EPISODE:
                run.stopped = walked.outcome
                raise AbortAgentError(f"FAR guard stopped the task: {walked.outcome}",
                                      [*messages[:-1], _as_taken(proposed, executed, blocked), *results], env)
        return query, runtime, env, [*messages[:-1], _as_taken(proposed, executed, blocked), *results], extra_args


def _original_args(guarded: GuardedCall, call: Any) -> dict[str, Any]:
    """The proposer's own arguments when the executed call is the proposal (they may hold non-JSON values);
    a cloud revision's JSON arguments otherwise."""
    return guarded.args if call.tool == guarded.function and call == guarded.mini.proposed_action else call.args


def _as_taken(proposed: Any, executed: list[Any], blocked: list[str]) -> Any:
    """The proposer's message as it took effect: AgentDojo's checkers read the function trace from assistant
    messages, so blocked calls leave the trace and are noted in the text instead."""
    if not blocked:
        return proposed
    note = "[FAR guard blocked: " + "; ".join(blocked) + "]"
    return ChatAssistantMessage(role="assistant", content=[text_content_block_from_string(note)],
                                tool_calls=executed or None)
