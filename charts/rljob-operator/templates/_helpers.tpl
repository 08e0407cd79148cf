{{/* Names. The release name is part of every object name unless it already holds the chart's. */}}
{{- define "rljob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "rljob-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "rljob-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels on every object; the selector labels never change after install. */}}
{{- define "rljob-operator.labels" -}}
helm.sh/chart: {{ include "rljob-operator.chart" . }}
{{ include "rljob-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: operator
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "rljob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rljob-operator.name" . | quote }}
app.kubernetes.io/instance: {{ .Release.Name | quote }}
{{- end }}

{{- define "rljob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "rljob-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The image: a digest wins over a tag; the tag defaults to the chart's appVersion. */}}
{{- define "rljob-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Leader election: on with more than one replica (only the Lease holder acts). */}}
{{- define "rljob-operator.leaderElection" -}}
{{- if gt (int .Values.replicas) 1 }}true{{ end }}
{{- end }}

{{/*
The least-privilege rules, one list shared with the integration tests (files/rbac-rules.yaml),
classed by where they can be granted:
- leases: the Lease rule, granted by a Role in the release namespace only (leader election);
- cluster: rules on cluster-scoped resources (CRDs for kopf's discovery, nodes for NodeLost),
  which only a ClusterRole can grant;
- namespaced: the rest.
Call with (dict "context" $ "classes" (list ...)); prints the rules of those classes as a YAML
list in file order, or nothing.
*/}}
{{- define "rljob-operator.rules" -}}
{{- $clusterScoped := list "customresourcedefinitions" "nodes" "resourceflavors" "workloadpriorityclasses" "priorityclasses" }}
{{- $picked := list }}
{{- $rules := .context.Files.Get "files/rbac-rules.yaml" | fromYamlArray }}
{{- if .context.Values.kueue.enabled }}
{{- $rules = concat $rules (.context.Files.Get "files/rbac-rules-kueue.yaml" | fromYamlArray) }}
{{- end }}
{{- range $rule := $rules }}
{{- $class := "namespaced" }}
{{- range $rule.resources }}{{ if has . $clusterScoped }}{{ $class = "cluster" }}{{ end }}{{ end }}
{{- if has "leases" $rule.resources }}{{ $class = "leases" }}{{ end }}
{{- if has $class $.classes }}
{{- $picked = append $picked $rule }}
{{- end }}
{{- end }}
{{- if $picked }}
{{- toYaml $picked }}
{{- end }}
{{- end }}

{{/*
What jobs may name (docs/install.md, "What a job may aim the operator at"): the allowlist values
plus the operator's own default Prometheus URL and S3 endpoint, each a JSON list of entries
without a trailing slash (as the operator compares them).
*/}}
{{- define "rljob-operator.allowedPrometheusUrls" -}}
{{- $urls := list }}
{{- range .Values.allowlist.prometheusUrls }}{{ $urls = append $urls (trimSuffix "/" .) }}{{ end }}
{{- if and (eq .Values.health.defaultSource "prometheus") .Values.health.prometheus.url }}
{{- $urls = append $urls (trimSuffix "/" .Values.health.prometheus.url) }}
{{- end }}
{{- toJson (uniq $urls) }}
{{- end }}

{{- define "rljob-operator.allowedS3Endpoints" -}}
{{- $endpoints := list }}
{{- range .Values.allowlist.s3Endpoints }}{{ $endpoints = append $endpoints (trimSuffix "/" .) }}{{ end }}
{{- with .Values.checkpointStore.endpoint }}
{{- $endpoints = append $endpoints (trimSuffix "/" .) }}
{{- end }}
{{- toJson (uniq $endpoints) }}
{{- end }}
