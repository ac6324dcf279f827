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

{{/* Each role's container env, envFrom, mounts and volumes (and the agent's pod-level host
access and security context): one copy, shared by the role's workload and its `helm test` doctor
pod (tests/doctor.yaml), so the doctor checks exactly what the role runs with. */}}

{{- define "gpuattr.agent.env" -}}
- name: NODE_NAME
  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
# a kubelet that lists this pod has its pods: its PodResources answers can be believed
- {name: GPUATTR_KUBELET_OWN_POD, value: "$(POD_NAMESPACE)/$(POD_NAME)"}
- {name: GPUATTR_KUBELET_SOCKET_PATH, value: /var/lib/kubelet/pod-resources/kubelet.sock}
{{- if .Values.dcgm.discover }}
# its own node's dcgm-exporter, found through its pod watch and scraped by pod IP: the
# GPU Operator's Service routes to any node's exporter (docs/ARCHITECTURE.md)
- {name: GPUATTR_DCGM_DISCOVER, value: "true"}
- {name: GPUATTR_DCGM_POD_SELECTOR, value: {{ .Values.dcgm.podSelector | quote }}}
# only the pod the operator's DaemonSet controls in its namespace is scraped (a
# standalone dcgm-exporter install names its own)
- {name: GPUATTR_DCGM_EXPORTER_NAMESPACE, value: {{ .Values.dcgm.exporterNamespace }}}
- {name: GPUATTR_DCGM_EXPORTER_DAEMONSET, value: {{ .Values.dcgm.exporterDaemonSet }}}
{{- else }}
- {name: GPUATTR_DCGM_URL, value: {{ required "dcgm.url is required when dcgm.discover is false" .Values.dcgm.url | quote }}}
{{- end }}
- {name: GPUATTR_DCGM_SCRAPE_INTERVAL_S, value: {{ .Values.dcgm.scrapeIntervalS | quote }}}
{{- if ne .Values.dcgm.perPodRows "auto" }}
- {name: GPUATTR_DCGM_PER_POD_ROWS, value: {{ .Values.dcgm.perPodRows | quote }}}
{{- end }}
{{- if not .Values.agent.dra }}
- {name: GPUATTR_KUBE_DRA, value: "false"}
{{- end }}
{{- if ne .Values.gpuOperator.namespace "gpu-operator" }}
- {name: GPUATTR_KUBE_OPERATOR_NAMESPACE, value: {{ .Values.gpuOperator.namespace }}}
{{- end }}
{{- if .Values.nvmlProcesses.enabled }}
- {name: NVIDIA_VISIBLE_DEVICES, value: all}
- {name: GPUATTR_AGENT_NVML_PROCESSES, value: "true"}
{{- end }}
{{- include "gpuattr.kafkaUserEnv" (dict "root" . "role" "agent" "namespace" .Values.namespaces.agent) }}
{{- end }}

{{- define "gpuattr.agent.envFrom" -}}
- configMapRef: {name: gpuattr-kafka}
- secretRef: {name: {{ include "gpuattr.secretName" (dict "root" . "role" "agent") }}}  # its Kafka user, nothing else
{{- end }}

{{- define "gpuattr.agent.hostAccess" -}}
{{- if .Values.nvmlProcesses.enabled }}
# NVML names host PIDs: in the host's PID namespace the container's own /proc lists them
hostPID: true
runtimeClassName: {{ .Values.nvmlProcesses.runtimeClassName }}
{{- end }}
{{- end }}

{{- define "gpuattr.agent.securityContext" -}}
securityContext:
  readOnlyRootFilesystem: true
  allowPrivilegeEscalation: false
  runAsNonRoot: false  # the kubelet's socket is root-owned
  capabilities: {drop: ["ALL"]}
  seccompProfile: {type: RuntimeDefault}
{{- end }}

{{- define "gpuattr.agent.volumeMounts" -}}
- {name: pod-resources, mountPath: /var/lib/kubelet/pod-resources, readOnly: true}
{{- include "gpuattr.caMount" . }}
- {name: tmp, mountPath: /tmp}
{{- end }}

{{- define "gpuattr.agent.volumes" -}}
- name: pod-resources
  hostPath: {path: {{ .Values.kubelet.root }}/pod-resources, type: Directory}
{{- include "gpuattr.caVolume" . }}
- name: tmp
  emptyDir: {}
{{- end }}

{{- define "gpuattr.cluster.env" -}}
- {name: GPUATTR_CLUSTER_LEASE_NAMESPACE, value: {{ .Values.namespaces.app }}}
- name: GPUATTR_CLUSTER_IDENTITY
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
{{- include "gpuattr.kafkaUserEnv" (dict "root" . "role" "cluster" "namespace" .Values.namespaces.app) }}
{{- end }}

{{- define "gpuattr.cluster.envFrom" -}}
- configMapRef: {name: gpuattr-kafka}
- secretRef: {name: {{ include "gpuattr.secretName" (dict "root" . "role" "cluster") }}}  # its Kafka user, the signing key
{{- end }}

{{- define "gpuattr.cluster.volumeMounts" -}}
{{- include "gpuattr.caMount" . }}
{{- end }}

{{- define "gpuattr.cluster.volumes" -}}
{{- include "gpuattr.caVolume" . }}
{{- end }}

{{- define "gpuattr.worker.env" -}}
- {name: GPUATTR_WORKER_WEB_HOST, value: 0.0.0.0}
# peers forward query-API requests to the worker owning a node: reach it by pod IP
- name: GPUATTR_WORKER_ADVERTISED_HOST
  valueFrom: {fieldRef: {fieldPath: status.podIP}}
# ...and only to the pods of this Deployment (the headless Service's addresses), never
# to an address another member of the Kafka group advertises
- {name: GPUATTR_WORKER_PEER_SERVICE, value: gpuattr-worker-peers.{{ .Values.namespaces.app }}.svc}
- {name: GPUATTR_WORKER_DATA_DIR, value: /var/lib/gpuattr}
# the query API answers callers whose token the API server authenticates and whose
# user may get the path (the gpuattr-reader ClusterRole); peers send this pod's token
- {name: GPUATTR_API_KUBE_AUTH, value: "true"}
- name: GPUATTR_API_TOKEN_FILE
  value: /var/run/secrets/kubernetes.io/serviceaccount/token
{{- include "gpuattr.kafkaUserEnv" (dict "root" . "role" "worker" "namespace" .Values.namespaces.app) }}
{{- end }}

{{- define "gpuattr.worker.envFrom" -}}
- configMapRef: {name: gpuattr-kafka}
- secretRef: {name: {{ include "gpuattr.secretName" (dict "root" . "role" "worker") }}}  # its Kafka user, the signing key
{{- end }}

{{- define "gpuattr.worker.volumeMounts" -}}
- {name: data, mountPath: /var/lib/gpuattr}
{{- include "gpuattr.caMount" . }}
{{- end }}

{{- define "gpuattr.worker.volumes" -}}
- name: data
  emptyDir: {}  # state is rebuilt from the changelog topics on start
{{- include "gpuattr.caVolume" . }}
{{- end }}

{{- define "gpuattr.sink.env" -}}
{{- include "gpuattr.kafkaUserEnv" (dict "root" . "role" "sink" "namespace" .Values.namespaces.app) }}
{{- end }}

{{- define "gpuattr.sink.envFrom" -}}
- configMapRef: {name: gpuattr-kafka}
- secretRef: {name: {{ include "gpuattr.secretName" (dict "root" . "role" "sink") }}}  # its Kafka user, Slack, webhooks
{{- end }}

{{- define "gpuattr.sink.volumeMounts" -}}
{{- include "gpuattr.caMount" . }}
{{- end }}

{{- define "gpuattr.sink.volumes" -}}
{{- include "gpuattr.caVolume" . }}
{{- end }}
