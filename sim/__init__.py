"""SimPy adapter: clock, modelled data plane and cost-model step executor (not built yet)."""
