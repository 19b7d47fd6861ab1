"""The edge-cloud agent as node functions, a LangGraph ``StateGraph`` over them, and a replay walker.

Flow: edge_assess -> route (the rules on provenance and scope, then the thresholds of the call's kind) ->
[cloud_review (retries on outage)] -> confirm (a confirm rule, or require_confirmation on sensitive actions) ->
execute (max_retries) -> [fallback (fallback_mode)] -> finish.

Every node is a pure function ``(state, ctx) -> update`` of the state, the policy and the outside world's
answers (``ctx.calls``). Each update names the next node in ``"next"`` and appends one ``Step``. The LangGraph
graph and the replay walker run the very same functions, so their trajectories are identical; replay just
skips LangGraph's per-step machinery (a graph step costs milliseconds, a direct call microseconds).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, NamedTuple, TypedDict

from far.rollout.calls import Calls, Environment, LiveCalls, ModelRecord, ModelSet, RecordedCalls
from far.rollout.policy import FallbackMode, Policy, rule_decision
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
from pydantic import BaseModel, ConfigDict, Field


class Costs(BaseModel):
    """Costs of the non-model parts of a rollout, in the same units as model call costs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tool_attempt: float = Field(0.05, ge=0.0)
    cloud_timeout: float = Field(0.2, ge=0.0)  # a cloud attempt that got no answer
    confirmation: float = Field(0.3, ge=0.0)  # the user's attention
    handoff: float = Field(1.0, ge=0.0)  # handing a failed task to the user


DEFAULT_COSTS = Costs()
END = "__end__"


def append_step(steps: list[Step], update: Step | list[Step]) -> list[Step]:
    """The ``steps`` channel's reducer: a node's update carries one Step (the graph's input carries a list)."""
    return [*steps, *update] if isinstance(update, list) else [*steps, update]


class AgentState(TypedDict, total=False):
    steps: Annotated[list[Step], append_step]
    next: str
    action_role: str  # "proposal" or "revision"
    cloud_attempts: int  # cloud attempts, reachable or not
    cloud_model_calls: int  # attempts that reached the model (indexes the recorded reviews)
    tool_attempts: int
    failure_source: str  # "cloud" or "tool"
    outcome: str


class Context(NamedTuple):  # a NamedTuple: cheap to build once per rollout
    policy: Policy
    calls: Calls
    costs: Costs = DEFAULT_COSTS


# Node functions build their Step inline (no helper call): replay runs them millions of times.
def edge_assess(state: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    assessment = ctx.calls.edge()
    if assessment.error is None:
        inputs = {"risk": assessment.risk, "tool": assessment.proposal.tool}
        decision = "proposed"
    else:  # a faulted edge model fails closed: its backend reports risk 1.0, which always escalates
        inputs = {"risk": assessment.risk, "tool": assessment.proposal.tool, "error": assessment.error}
        decision = f"{assessment.error}:fail_closed"
    step = Step(len(state["steps"]), "edge_assess", decision, None, inputs, assessment.cost, assessment.latency_ms)
    return {"steps": step, "next": "route"}


def route(state: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    """The rules first (a rule that blocks or sends to review decides, ``far.rollout.policy.rule_decision``), then
    the thresholds of the proposed call's kind: block above the block threshold, the cloud at or above the
    cloud threshold, else the edge. The step names the parameter that decided."""
    risk = ctx.calls.edge().risk
    policy = ctx.policy
    facts = ctx.calls.facts()
    index = len(state["steps"])
    rule, rule_parameter = rule_decision(policy, facts)
    if rule == "block":
        return {"steps": Step(index, "route", "block", rule_parameter, {"risk": risk, "rule": rule_parameter},
                              0.0, 0.0), "outcome": VETOED, "next": "finish"}
    block, block_parameter = policy.block_threshold_for(facts.kind)
    if risk > block:  # refused on the device: no cloud call (a faulted edge's risk 1.0 is blocked too)
        return {"steps": Step(index, "route", "block", block_parameter, {"risk": risk, "threshold": block}, 0.0, 0.0),
                "outcome": VETOED, "next": "finish"}
    if rule == "review":
        return {"steps": Step(index, "route", "cloud", rule_parameter, {"risk": risk, "rule": rule_parameter},
                              0.0, 0.0), "next": "cloud_review"}
    threshold, parameter = policy.cloud_threshold_for(facts.kind)
    inputs = {"risk": risk, "threshold": threshold}
    if risk >= threshold:
        return {"steps": Step(index, "route", "cloud", parameter, inputs, 0.0, 0.0), "next": "cloud_review"}
    return {"steps": Step(index, "route", "edge", parameter, inputs, 0.0, 0.0), "next": "confirm"}


def cloud_review(state: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    attempt = state["cloud_attempts"]
    index = len(state["steps"])
    if not ctx.calls.cloud_reachable(attempt):
        retry = attempt < ctx.policy.max_retries
        step = Step(index, "cloud_review", "unavailable:retry" if retry else "unavailable:give_up", "max_retries",
                    {"attempt": attempt}, ctx.costs.cloud_timeout, 0.0)
        return {"steps": step, "cloud_attempts": attempt + 1, "failure_source": "cloud",
                "next": "cloud_review" if retry else "fallback"}
    model_attempt = state["cloud_model_calls"]
    review = ctx.calls.cloud(model_attempt)
    verdict = review.verdict
    if verdict == "error":  # a model fault is data: retried and then handled like an outage
        retry = attempt < ctx.policy.max_retries
        step = Step(index, "cloud_review", f"{review.error}:{'retry' if retry else 'give_up'}", "max_retries",
                    {"attempt": attempt, "error": review.error}, review.cost, review.latency_ms)
        return {"steps": step, "cloud_attempts": attempt + 1, "cloud_model_calls": model_attempt + 1,
                "failure_source": "cloud", "next": "cloud_review" if retry else "fallback"}
    step = Step(index, "cloud_review", verdict, None, {"attempt": attempt, "reason": review.reason}, review.cost,
                review.latency_ms)
    calls_made = model_attempt + 1
    if verdict == "veto":
        return {"steps": step, "cloud_attempts": attempt + 1, "cloud_model_calls": calls_made, "outcome": VETOED,
                "next": "finish"}
    if verdict == "revise":
        return {"steps": step, "cloud_attempts": attempt + 1, "cloud_model_calls": calls_made,
                "action_role": "revision", "next": "confirm"}
    return {"steps": step, "cloud_attempts": attempt + 1, "cloud_model_calls": calls_made, "next": "confirm"}


def confirm(state: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    """A rule that says confirm asks the user about the edge's proposal whatever its sensitivity; otherwise
    sensitive calls are confirmed when ``require_confirmation`` is set."""
    role = state["action_role"]
    action = ctx.calls.action(role)
    index = len(state["steps"])
    inputs = {"action": role, "call": action, "sensitive": action.sensitive}
    parameter = "require_confirmation"
    if role == "proposal":
        facts = ctx.calls.facts()
        rule, rule_parameter = rule_decision(ctx.policy, facts)
        if rule == "confirm":
            parameter = rule_parameter
    if parameter == "require_confirmation":
        if not action.sensitive:
            return {"steps": Step(index, "confirm", "not_needed", None, inputs, 0.0, 0.0), "next": "execute"}
        if not ctx.policy.require_confirmation:
            return {"steps": Step(index, "confirm", "skipped", "require_confirmation", inputs, 0.0, 0.0),
                    "next": "execute"}
    cost = ctx.costs.confirmation
    if ctx.calls.user_confirms(role):
        return {"steps": Step(index, "confirm", "approved", parameter, inputs, cost, 0.0), "next": "execute"}
    return {"steps": Step(index, "confirm", "denied", parameter, inputs, cost, 0.0), "outcome": DENIED,
            "next": "finish"}


def execute(state: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    attempt = state["tool_attempts"]
    role = state["action_role"]
    result = ctx.calls.tool_result(attempt)
    inputs = {"action": role, "call": ctx.calls.action(role), "attempt": attempt, "effect": result != "error"}
    index = len(state["steps"])
    if result == "ok":
        return {"steps": Step(index, "execute", "ok", None, inputs, ctx.costs.tool_attempt, 0.0),
                "tool_attempts": attempt + 1, "outcome": COMPLETED, "next": "finish"}
    retry = attempt < ctx.policy.max_retries
    step = Step(index, "execute", f"{result}:{'retry' if retry else 'give_up'}", "max_retries", inputs,
                ctx.costs.tool_attempt, 0.0)
    return {"steps": step, "tool_attempts": attempt + 1, "failure_source": "tool",
            "next": "execute" if retry else "fallback"}


def fallback(state: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    """Retries are spent. After a cloud outage the question is whether to act without review; after a tool
    failure, how to leave the task."""
    mode = ctx.policy.fallback_mode
    source = state["failure_source"]
    role = state["action_role"]
    inputs: dict[str, Any] = {"source": source}
    cost = 0.0
    decision = mode
    if mode == FallbackMode.NONE:
        update = {"outcome": UNHANDLED, "next": "finish"}
    elif mode == FallbackMode.SAFE_SHUTDOWN:
        update = {"outcome": SHUTDOWN, "next": "finish"}
    elif source == "cloud":
        if mode == FallbackMode.EDGE_ONLY:
            update = {"next": "confirm"}  # carry on unreviewed, through the normal confirmation rule
        else:  # ask_user: the user decides in place of the cloud
            approved = ctx.calls.user_confirms(role)
            decision = f"ask_user:{'approved' if approved else 'denied'}"
            cost = ctx.costs.confirmation
            update = {"next": "execute"} if approved else {"outcome": DENIED, "next": "finish"}
    elif mode == FallbackMode.EDGE_ONLY:
        local = ctx.calls.action(role).local
        inputs["local_path"] = local
        update = {"next": "execute_local"} if local else {"outcome": SHUTDOWN, "next": "finish"}
    else:  # ask_user after a tool failure: hand the task over
        cost = ctx.costs.handoff
        update = {"outcome": HANDED_OFF, "next": "finish"}
    update["steps"] = Step(len(state["steps"]), "fallback", decision, "fallback_mode", inputs, cost, 0.0)
    return update


def execute_local(state: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    role = state["action_role"]
    inputs = {"action": role, "call": ctx.calls.action(role), "effect": True}
    return {"steps": Step(len(state["steps"]), "execute_local", "ok", None, inputs, ctx.costs.tool_attempt, 0.0),
            "outcome": COMPLETED, "next": "finish"}


def finish(state: Mapping[str, Any], ctx: Context) -> dict[str, Any]:
    return {"steps": Step(len(state["steps"]), "finish", state["outcome"], None, {}, 0.0, 0.0), "next": END}


NODES: dict[str, Callable[[Mapping[str, Any], Context], dict[str, Any]]] = {
    "edge_assess": edge_assess,
    "route": route,
    "cloud_review": cloud_review,
    "confirm": confirm,
    "execute": execute,
    "fallback": fallback,
    "execute_local": execute_local,
    "finish": finish,
}
ENTRY = "edge_assess"


def max_node_visits(policy: Policy) -> int:
    """Longest path: two outage loops and two fallbacks plus the fixed nodes."""
    return 2 * (policy.max_retries + 1) + 7


def recursion_limit(policy: Policy) -> int:
    return max_node_visits(policy) + 3


def initial_state() -> dict[str, Any]:
    return {"steps": [], "action_role": "proposal", "cloud_attempts": 0, "cloud_model_calls": 0, "tool_attempts": 0}


def replay(scenario: Scenario, policy: Policy, record: ModelRecord, environment: Environment,
           costs: Costs = DEFAULT_COSTS) -> Trajectory:
    """Walk the node functions directly: no LangGraph, no model calls."""
    return replay_calls(RecordedCalls(scenario, record, environment), policy, costs)


def replay_calls(calls: RecordedCalls, policy: Policy, costs: Costs = DEFAULT_COSTS) -> Trajectory:
    """``replay`` over a prepared ``RecordedCalls`` (build those once per scenario, reuse for every policy)."""
    scenario = calls.scenario
    record = calls.record
    ctx = Context(policy, calls, costs)
    state = initial_state()
    steps = state["steps"]
    node = ENTRY
    limit = max_node_visits(policy)
    nodes = NODES
    while node != END:
        if len(steps) > limit:
            raise RuntimeError(f"rollout of {scenario.id} exceeded {limit} steps")
        update = nodes[node](state, ctx)
        steps.append(update.pop("steps"))  # what the LangGraph reducer does
        state.update(update)
        node = state["next"]
    return Trajectory(scenario.id, policy, tuple(steps), state["outcome"], record)


def rollout_prepared(prepared: Sequence[Any], policy: Policy, costs: Costs = DEFAULT_COSTS,
                     graph: Any = None) -> list[Trajectory]:
    """Roll out prepared scenarios: ``RecordedCalls`` walk the agent once (replay, or the compiled ``graph``);
    anything else is an episode of an environment-backed suite with its own ``rollout(policy, costs, graph)``."""
    trajectories = []
    for item in prepared:
        if isinstance(item, RecordedCalls):
            trajectories.append(replay_calls(item, policy, costs) if graph is None
                                else run_graph(graph, item.scenario, item, costs))
        else:
            trajectories.append(item.rollout(policy, costs, graph))
    return trajectories


def _wrap(fn: Callable[[Mapping[str, Any], Context], dict[str, Any]]):
    from langgraph.runtime import Runtime

    def node(state: AgentState, runtime: Runtime[Context]) -> dict[str, Any]:
        return fn(state, runtime.context)

    node.__name__ = fn.__name__
    return node


def _next(state: AgentState) -> str:
    return state["next"]


def build_graph(policy: Policy):
    """Compile the agent as a LangGraph ``StateGraph`` for this policy (build it where it runs; compiled
    graphs do not survive pickling)."""
    from langgraph.graph import END as LG_END
    from langgraph.graph import START, StateGraph

    graph = StateGraph(AgentState, context_schema=Context)
    for name, fn in NODES.items():
        graph.add_node(name, _wrap(fn))
    graph.add_edge(START, ENTRY)
    targets = {name: name for name in NODES} | {END: LG_END}
    for name in NODES:
        graph.add_conditional_edges(name, _next, targets)
    compiled = graph.compile()
    compiled.far_policy = policy  # the context's policy must match the one the graph was built for
    return compiled


def run_graph(graph, scenario: Scenario, calls: Calls, costs: Costs = DEFAULT_COSTS) -> Trajectory:
    policy: Policy = graph.far_policy
    state = graph.invoke(
        initial_state(),
        context=Context(policy, calls, costs),
        config={"recursion_limit": recursion_limit(policy)},
    )
    record = calls.record if isinstance(calls, RecordedCalls) else None
    return Trajectory(scenario.id, policy, tuple(state["steps"]), state["outcome"], record)


def run_live(graph, scenario: Scenario, models: ModelSet, costs: Costs = DEFAULT_COSTS) -> Trajectory:
    """A live rollout: the graph calls the models as it goes."""
    return run_graph(graph, scenario, LiveCalls(scenario, models), costs)
