{{- define "mini.name" -}}
{{ .Chart.Name }}-{{ .Release.Name }}
{{- end }}
