{{/*
Names and labels. deploy/render.py computes the same ones (fullname,
selector_labels, labels): change both together.
*/}}

{{- define "scg.name" -}}
{{- default "scg" .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "scg.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default "scg" .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The headless Service the replicas find each other through. */}}
{{- define "scg.peers" -}}
{{- printf "%s-peers" (include "scg.fullname" .) -}}
{{- end -}}

{{/*
The Role and RoleBinding of backendDiscovery live in the discovery
namespace, which releases in other namespaces may share: their name carries
the release namespace.
*/}}
{{- define "scg.discoveryRbacName" -}}
{{- printf "%s-%s-discovery" (include "scg.fullname" .) .Release.Namespace | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "scg.selectorLabels" -}}
app.kubernetes.io/name: {{ include "scg.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "scg.labels" -}}
{{ include "scg.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* Keys of scg.yaml the chart sets itself may not come from .Values.config. */}}
{{- define "scg.validate" -}}
{{- range $key := list "bind_addr" "admin_addr" "admin" "shutdown" "cluster" "tls" "auth" "backend_token" "backend_discovery" -}}
{{- if hasKey ($.Values.config | default dict) $key -}}
{{- fail (printf "config.%s is set by the chart; use the chart's own value for it" $key) -}}
{{- end -}}
{{- end -}}
{{- end -}}
