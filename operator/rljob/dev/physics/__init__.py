"""The physical rollout-engine simulator's parts; rljob.dev.engine_physics is its public face and
says what it models and where its numbers come from."""
