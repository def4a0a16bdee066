"""What a run becomes for people and machines: failure text, summary, JSON report, graph."""
