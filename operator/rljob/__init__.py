"""rljob-operator: a Kubernetes operator for long-running LLM reinforcement-learning jobs."""

__version__ = "0.1.0"
