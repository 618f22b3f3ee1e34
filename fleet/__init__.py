"""Fleets: many engines (each its own cache core) behind a router in one SimPy environment;
shared L3, P/D disaggregation, DP attention (docs/fleet.md). A layer above sim/ and scenarios/,
below radixsim/ (which runs a scenario with a `fleet:` section through `fleet.run`)."""
