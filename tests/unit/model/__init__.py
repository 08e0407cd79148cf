"""A model of the operator's world (an in-memory cluster and S3) and a stateful test on it."""
