"""Event-bus subscribers: metrics, debug analysis, dumps, event log. None imports another."""
