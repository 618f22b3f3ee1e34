"""SimPy adapter: the clock, the modelled data plane (links.py) and the cost-model step executor
(cost.py) that `cache_core/engine.py`'s loop runs on (wired in simulator.py), plus the clients
that feed it (multi-turn, agentic, LM-program DAGs)."""
