"""Kueue's names the operator reads and writes, as Kueue v0.17.0 spells them (kubernetes-sigs/
kueue at 4d5f7ff; the file each comes from beside it). The operator is the job-side integration
of the RLJob kind (integrations.externalFrameworks), so these are its contract with Kueue."""

from __future__ import annotations

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
API_VERSION = f"{GROUP}/{VERSION}"
WORKLOADS = "workloads"
RESOURCE_FLAVORS = "resourceflavors"
# The entry of integrations.externalFrameworks: Kind.version.group (pkg/config/validation.go).
EXTERNAL_FRAMEWORK = "RLJob.v1alpha1.rljob.io"

# On the RLJob (pkg/controller/constants/constants.go:23, 39, 45).
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"

# On the Workload (pkg/controller/constants/constants.go:34, apis/kueue/v1beta2/constants.go:20).
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
RESOURCE_IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"

# On the admitted pods (pkg/constants/constants.go:49, 68, 60;
# apis/kueue/v1beta2/topology_types.go:80).
PODSET_LABEL = "kueue.x-k8s.io/podset"
LOCAL_QUEUE_LABEL = "kueue.x-k8s.io/local-queue-name"
CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"

# Workload condition types and the reasons the job side writes or reads
# (apis/kueue/v1beta2/workload_types.go).
QUOTA_RESERVED = "QuotaReserved"
ADMITTED = "Admitted"
EVICTED = "Evicted"
PODS_READY = "PodsReady"
FINISHED = "Finished"
REQUEUED = "Requeued"
EVICTED_BY_PREEMPTION = "Preempted"
EVICTED_BY_NODE_FAILURES = "NodeFailures"
WAIT_FOR_START = "WaitForStart"
WAIT_FOR_RECOVERY = "WaitForRecovery"
STARTED = "Started"
RECOVERED = "Recovered"
FINISHED_SUCCEEDED = "Succeeded"
FINISHED_FAILED = "Failed"
# pkg/controller/jobframework/reconciler.go:73
FAILED_TO_START = "FailedToStart"
