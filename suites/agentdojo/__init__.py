"""AgentDojo (``agentdojo==0.1.35``) as a FAR suite: the suite adapter (``suite``), the scripted agent and guard
inside AgentDojo's pipeline (``agent``), per-call scenarios (``calls``), environment access (``environment``).

May import rollout's core and ``far.suites.base``/``faults``; never the suites registry. Importing this
package does not import AgentDojo: its modules do, when used.
"""
