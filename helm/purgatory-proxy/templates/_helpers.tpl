{{/* Names and labels, as `helm create` makes them. */}}
{{- define "purgatory-proxy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "purgatory-proxy.fullname" -}}
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

{{- define "purgatory-proxy.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "purgatory-proxy.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "purgatory-proxy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "purgatory-proxy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: {{ ternary "gateway" "sidecar-example" (eq .Values.mode "gateway") }}
{{- end }}

{{/* Checked once, included by every manifest: a typo in mode must not render nothing. */}}
{{- define "purgatory-proxy.validate" -}}
{{- if not (has .Values.mode (list "gateway" "sidecar")) }}
{{- fail (printf "mode must be gateway or sidecar, not %q" .Values.mode) }}
{{- end }}
{{- if not .Values.upstream.bootstrap }}
{{- fail "upstream.bootstrap is required: the proxy's image has no embedded broker" }}
{{- end }}
{{- if not .Values.proxy.brokerPorts }}
{{- fail "proxy.brokerPorts is required: one port per upstream node id, e.g. {1: 9093}" }}
{{- end }}
{{- $taken := dict (toString (int .Values.proxy.port)) "proxy.port" (toString (int .Values.metrics.port)) "metrics.port" }}
{{- range $node, $port := .Values.proxy.brokerPorts }}
{{- $key := toString (int $port) }}
{{- if hasKey $taken $key }}
{{- fail (printf "proxy.brokerPorts.%v: port %s is already used by %s" $node $key (get $taken $key)) }}
{{- end }}
{{- $_ := set $taken $key (printf "proxy.brokerPorts.%v" $node) }}
{{- end }}
{{- end }}

{{/* Gateway: clients reach the proxy through its Service; sidecar: over the pod's loopback. */}}
{{- define "purgatory-proxy.listenHost" -}}
{{- ternary "0.0.0.0" "127.0.0.1" (eq .Values.mode "gateway") }}
{{- end }}

{{- define "purgatory-proxy.advertisedHost" -}}
{{- if .Values.proxy.advertisedHost }}
{{- .Values.proxy.advertisedHost }}
{{- else if eq .Values.mode "gateway" }}
{{- printf "%s.%s.svc" (include "purgatory-proxy.fullname" .) .Release.Namespace }}
{{- else }}
{{- "127.0.0.1" }}
{{- end }}
{{- end }}

{{- define "purgatory-proxy.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The proxy container, shared by the gateway Deployment and the sidecar example. Its TOML
config comes from the ConfigMap (configmap.yaml), mounted read-only; /tmp is the only
writable path (readOnlyRootFilesystem).
*/}}
{{- define "purgatory-proxy.container" -}}
- name: purgatory-proxy
  image: {{ include "purgatory-proxy.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["run", "--config", "/etc/purgatory-proxy/config.toml"]
  {{- with .Values.extraEnv }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    - name: bootstrap
      containerPort: {{ int .Values.proxy.port }}
      protocol: TCP
    {{- range $node, $port := .Values.proxy.brokerPorts }}
    - name: {{ printf "broker-%v" $node | quote }}
      containerPort: {{ int $port }}
      protocol: TCP
    {{- end }}
    - name: metrics
      containerPort: {{ int .Values.metrics.port }}
      protocol: TCP
  livenessProbe:
    {{- toYaml .Values.livenessProbe | nindent 4 }}
  readinessProbe:
    {{- toYaml .Values.readinessProbe | nindent 4 }}
  resources:
    {{- toYaml .Values.resources | nindent 4 }}
  securityContext:
    {{- toYaml .Values.securityContext | nindent 4 }}
  volumeMounts:
    - name: config
      mountPath: /etc/purgatory-proxy
      readOnly: true
    - name: tmp
      mountPath: /tmp
{{- end }}

{{- define "purgatory-proxy.volumes" -}}
- name: config
  configMap:
    name: {{ include "purgatory-proxy.fullname" . }}
- name: tmp
  emptyDir:
    sizeLimit: 16Mi
{{- end }}
