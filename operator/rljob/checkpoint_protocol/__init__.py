"""The checkpoint protocol that workloads (rljob-sdk) and the operator share: the S3 layout,
the documents (manifest, attempt marker, pointer), a version's validity, typed store errors,
and the S3 store under rljob.checkpoint_protocol.s3. The standard library and boto3 only: the
SDK's wheel ships this package to images that have none of the operator's dependencies.
The operator's own checkpoint logic (lineage, selection, retention, attempt plans, discovery)
is rljob.checkpoints, which builds on this."""
