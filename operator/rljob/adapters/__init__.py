"""I/O adapters: Kubernetes API, metrics sources, S3, events. Everything here may block on the
network, so every call is async (kubernetes.aio) or off-loop (boto3), with a timeout."""
