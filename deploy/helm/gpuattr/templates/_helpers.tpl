{{/* The labels every object of a role carries (no helm.sh/chart, no managed-by: the rendered
kustomize base must be what the chart's defaults render, so it carries none of helm's own). */}}
{{- define "gpuattr.labels" -}}
{app.kubernetes.io/name: {{ . }}, app.kubernetes.io/part-of: gpu-attribution}
{{- end }}

{{- define "gpuattr.image" -}}
image: {{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- with .Values.image.pullPolicy }}
imagePullPolicy: {{ . }}
{{- end }}
{{- end }}

{{/* TLS with the brokers: SSL or SASL_SSL */}}
{{- define "gpuattr.tls" -}}
{{- if has .Values.kafka.securityProtocol (list "SSL" "SASL_SSL") }}true{{ end }}
{{- end }}

{{- define "gpuattr.caMount" -}}
{{- if include "gpuattr.tls" . }}
- {name: kafka-ca, mountPath: /etc/gpuattr/kafka-ca, readOnly: true}
{{- end }}
{{- end }}

{{- define "gpuattr.caVolume" -}}
{{- if include "gpuattr.tls" . }}
- name: kafka-ca
{{- if .Values.kafka.tls.caConfigMap }}
  configMap: {name: {{ .Values.kafka.tls.caConfigMap }}, optional: true}
{{- else }}
  secret: {secretName: {{ .Values.kafka.tls.caSecret }}, optional: true}
{{- end }}
{{- end }}
{{- end }}

{{/* The name of a role's Secret: the one the user manages, or the chart's */}}
{{- define "gpuattr.secretName" -}}
{{- $role := index .root.Values.secrets .role -}}
{{- $role.existingSecret | default (printf "gpuattr-%s-secrets" .role) -}}
{{- end }}

{{/* The chart makes the Strimzi Kafka in the role's namespace: the role reads its password from
the Secret the User Operator writes for its KafkaUser (same name, key `password`). */}}
{{- define "gpuattr.usesKafkaUserSecret" -}}
{{- $v := .root.Values -}}
{{- if and $v.strimzi.kafka.create $v.strimzi.users (eq $v.strimzi.namespace .namespace) }}true{{ end }}
{{- end }}

{{- define "gpuattr.kafkaUserEnv" -}}
{{- if include "gpuattr.usesKafkaUserSecret" . }}
# the password the User Operator writes for this role's KafkaUser, read where it is
- {name: GPUATTR_KAFKA_SASL_USERNAME, value: gpuattr-{{ .role }}}
- name: GPUATTR_KAFKA_SASL_PASSWORD
  valueFrom: {secretKeyRef: {name: gpuattr-{{ .role }}, key: password}}
{{- end }}
{{- end }}

{{- define "gpuattr.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "gpuattr.restrictedContext" -}}
securityContext:
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  runAsNonRoot: true
  runAsUser: 10001
  capabilities: {drop: ["ALL"]}
  seccompProfile: {type: RuntimeDefault}
{{- end }}
