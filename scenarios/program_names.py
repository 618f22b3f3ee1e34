"""The LM programs' names (scenarios/programs.py builds them), without importing numpy or
networkx: the scenario schema and `radixsim --help` list them."""

PROGRAM_NAMES = ("few_shot", "self_consistency", "multi_turn_chat", "tree_of_thought", "agent_with_subagents")
