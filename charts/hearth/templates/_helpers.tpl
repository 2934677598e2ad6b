{{/* Namespace where FournosClusters live (HEARTH_NAMESPACE). */}}
{{- define "hearth.namespace" -}}
{{- default .Release.Namespace .Values.config.namespace -}}
{{- end -}}

{{- define "hearth.labels" -}}
app.kubernetes.io/part-of: hearth
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
The three controllers: values key, component name (binary, ServiceAccount, Lease).
*/}}
{{- define "hearth.controllers" -}}
discovery: hearth-discovery
kueueSync: hearth-kueue-sync
lockManager: hearth-lock-manager
{{- end -}}

{{- define "hearth.image" -}}
{{- $root := index . 0 -}}{{- $c := index . 1 -}}
{{- $registry := $root.Values.image.registry -}}
{{- $tag := default $root.Chart.AppVersion (default $root.Values.image.tag ($c.image).tag) -}}
{{- if $registry -}}{{ $registry }}/{{- end -}}{{ $c.image.repository }}:{{ $tag }}
{{- end -}}
