{{- define "trainyard.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "trainyard.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "trainyard.labels" -}}
app.kubernetes.io/name: {{ include "trainyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "trainyard.selector" -}}
app.kubernetes.io/name: {{ include "trainyard.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "trainyard.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "trainyard.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "trainyard.masterKeySecret" -}}
{{- default (printf "%s-master-key" (include "trainyard.fullname" .)) .Values.masterKey.existingSecret -}}
{{- end -}}

{{- define "trainyard.jobsNamespace" -}}
{{- default .Release.Namespace .Values.executor.jobsNamespace -}}
{{- end -}}
