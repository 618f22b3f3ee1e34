"""SimPy adapter: clock, modelled data plane (links.py) and cost-model step executor (cost.py);
the engine loop that drives them is not built yet."""
