"""Multi-turn agents: the SMT scratchpad tool loop, tool-call parsing and the policy interface."""
