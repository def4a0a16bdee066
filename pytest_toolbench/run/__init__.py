"""One case's run: stages, the agent loop, tools, the state machine, checks."""
