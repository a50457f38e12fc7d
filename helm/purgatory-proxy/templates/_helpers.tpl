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
{{- if and (eq .Values.mode "sidecar") .Values.sidecar.native (semverCompare "<1.29.0-0" .Capabilities.KubeVersion.Version) }}
{{- fail (printf "sidecar.native needs Kubernetes >= 1.29 (native sidecar containers), this is %s: set sidecar.native=false for the classic second container" .Capabilities.KubeVersion.Version) }}
{{- end }}
{{- $upstream := (.Values.config | default dict).upstream | default dict }}
{{- if not $upstream.bootstrap }}
{{- fail "config.upstream.bootstrap is required: the proxy's image has no embedded broker" }}
{{- end }}
{{- if and (not .Values.proxy.brokerPorts) (not (include "purgatory-proxy.sni" .)) }}
{{- fail "proxy.brokerPorts is required: one port per upstream node id, e.g. {1: 9093} (or SNI mode: config.proxy.sni)" }}
{{- end }}
{{- if and (include "purgatory-proxy.sni" .) (not (dig "proxy" "tls" "cert_file" "" (.Values.config | default dict))) }}
{{- fail "config.proxy.sni routes by the server name of the TLS hello: set config.proxy.tls.cert_file and key_file" }}
{{- end }}
{{- $taken := dict (toString (int .Values.proxy.port)) "proxy.port" }}
{{- if .Values.metrics.enabled }}
{{- $_ := set $taken (toString (int .Values.metrics.port)) "metrics.port" }}
{{- else if .Values.metrics.serviceMonitor.enabled }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled: there is nothing to scrape" }}
{{- end }}
{{- range $node, $port := ternary (dict) .Values.proxy.brokerPorts (eq (include "purgatory-proxy.sni" .) "true") }}
{{- $key := toString (int $port) }}
{{- if hasKey $taken $key }}
{{- fail (printf "proxy.brokerPorts.%v: port %s is already used by %s" $node $key (get $taken $key)) }}
{{- end }}
{{- $_ := set $taken $key (printf "proxy.brokerPorts.%v" $node) }}
{{- end }}
{{- if eq .Values.mode "gateway" }}
{{- $pdb := .Values.podDisruptionBudget }}
{{- if and $pdb.enabled (eq (kindIs "invalid" $pdb.maxUnavailable) (kindIs "invalid" $pdb.minAvailable)) }}
{{- fail "podDisruptionBudget: set exactly one of maxUnavailable and minAvailable (the other null)" }}
{{- end }}
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

{{/* Where the request log lives in the container (an emptyDir mounted at its directory). */}}
{{- define "purgatory-proxy.requestLogDir" -}}
/var/log/purgatory-proxy
{{- end }}

{{/*
A size as the proxy reads it (pydantic ByteSize: a number of bytes, or a number and a unit
B, K/KB, M/MB, G/GB, T/TB (powers of 1000) or KiB, MiB, GiB, TiB (powers of 1024), any case),
printed as whole bytes. Called with (dict "value" V "key" "config.log.requests_max_bytes").
*/}}
{{- define "purgatory-proxy.bytes" -}}
{{- $value := .value }}
{{- if or (kindIs "float64" $value) (kindIs "int" $value) (kindIs "int64" $value) }}
{{- int64 $value }}
{{- else if kindIs "string" $value }}
{{- $text := lower (trim $value) }}
{{- $number := regexFind "^[0-9]*\\.?[0-9]+" $text }}
{{- $unit := trim (trimPrefix $number $text) | default "b" }}
{{- $units := dict "b" 1 "k" 1000 "kb" 1000 "m" 1000000 "mb" 1000000 "g" 1000000000 "gb" 1000000000 "t" 1000000000000 "tb" 1000000000000 "kib" 1024 "mib" 1048576 "gib" 1073741824 "tib" 1099511627776 }}
{{- if or (not $number) (not (hasKey $units $unit)) }}
{{- fail (printf "%s: cannot read %q as a size (e.g. 100MiB, 1GB, 4096)" .key $value) }}
{{- end }}
{{- int64 (mulf (float64 $number) (get $units $unit)) }}
{{- else }}
{{- fail (printf "%s: expected a size such as 100MiB, not %v" .key $value) }}
{{- end }}
{{- end }}

{{/*
The request-log volume's sizeLimit: requestLog.sizeLimit if set, else every file the rotation
keeps (requests_max_bytes x (requests_backups + 1)) plus 10 % headroom, at least 16 MiB,
rounded up to whole MiB.
*/}}
{{- define "purgatory-proxy.requestLogSizeLimit" -}}
{{- if .Values.requestLog.sizeLimit }}
{{- .Values.requestLog.sizeLimit }}
{{- else }}
{{- $log := (.Values.config | default dict).log | default dict }}
{{- $maxBytes := include "purgatory-proxy.bytes" (dict "value" (hasKey $log "requests_max_bytes" | ternary (get $log "requests_max_bytes") "100MiB") "key" "config.log.requests_max_bytes") | int64 }}
{{- $backups := hasKey $log "requests_backups" | ternary (get $log "requests_backups") 5 | int64 }}
{{- if eq $maxBytes 0 }}
{{- fail "config.log.requests_max_bytes is 0 (never rotate): the request log grows without bound, so set requestLog.sizeLimit yourself" }}
{{- end }}
{{- $files := mul $maxBytes (add $backups 1) }}
{{- $total := add $files (max (div $files 10) 16777216) }}
{{- printf "%dMi" (div (add $total 1048575) 1048576) }}
{{- end }}
{{- end }}

{{/* A TOML key: bare when it can be, else a quoted (JSON-escaped, valid TOML) string. */}}
{{- define "purgatory-proxy.tomlKey" -}}
{{- if regexMatch "^[A-Za-z0-9_-]+$" (toString .) }}{{ . }}{{ else }}{{ toJson (toString .) }}{{ end }}
{{- end }}

{{/*
A TOML value from a values scalar or list. Strings are JSON-quoted (JSON's escapes are TOML
basic-string escapes); whole numbers print as integers (YAML numbers reach templates as
float64, and the proxy accepts an integer wherever it takes a float).
*/}}
{{- define "purgatory-proxy.tomlValue" -}}
{{- $value := .value }}
{{- if kindIs "string" $value }}{{ toJson $value }}
{{- else if kindIs "bool" $value }}{{ $value }}
{{- else if or (kindIs "int" $value) (kindIs "int64" $value) }}{{ $value }}
{{- else if kindIs "float64" $value }}{{ if eq (floor $value) $value }}{{ int64 $value }}{{ else }}{{ $value }}{{ end }}
{{- else if kindIs "slice" $value }}[{{ range $i, $item := $value }}{{ if $i }}, {{ end }}{{ include "purgatory-proxy.tomlValue" (dict "value" $item "key" $.key) }}{{ end }}]
{{- else }}{{ fail (printf "%s: cannot write a %s into the TOML config" .key (kindOf $value)) }}
{{- end }}
{{- end }}

{{/*
One TOML table and, after its own keys, its sub-tables ([proxy] then [proxy.broker_ports]).
Called with (dict "path" "proxy" "table" MAP); null values are left out (the proxy's default).
*/}}
{{- define "purgatory-proxy.tomlTable" -}}
{{- $path := .path }}
[{{ $path }}]
{{- range $key, $value := .table }}
{{- if not (or (kindIs "map" $value) (kindIs "invalid" $value)) }}
{{ include "purgatory-proxy.tomlKey" $key }} = {{ include "purgatory-proxy.tomlValue" (dict "value" $value "key" (printf "config.%s.%s" $path $key)) }}
{{- end }}
{{- end }}
{{- range $key, $value := .table }}
{{- if kindIs "map" $value }}
{{ include "purgatory-proxy.tomlTable" (dict "path" (printf "%s.%s" $path (include "purgatory-proxy.tomlKey" $key)) "table" $value) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The proxy's config.toml: every section of .Values.config, generically (a new key of the proxy is
one line in values.yaml), plus the keys the chart derives from its own values, which the user
may not set under config.
*/}}
{{- define "purgatory-proxy.configToml" -}}
{{- $config := deepCopy (.Values.config | default dict) }}
{{- $managed := dict
  "proxy.listen" "from mode and proxy.port"
  "proxy.advertised_host" "from proxy.advertisedHost"
  "proxy.broker_ports" "from proxy.brokerPorts"
  "metrics.listen" "from metrics.enabled and metrics.port"
  "log.requests" "from requestLog.enabled" }}
{{- range $name, $from := $managed }}
{{- $section := first (splitList "." $name) }}
{{- $key := last (splitList "." $name) }}
{{- if not (kindIs "map" (get $config $section)) }}
{{- $_ := set $config $section (dict) }}
{{- end }}
{{- if hasKey (get $config $section) $key }}
{{- fail (printf "config.%s is set by the chart (%s): remove it from config" $name $from) }}
{{- end }}
{{- end }}
{{- $sasl := (get $config "upstream" | default dict).sasl | default dict }}
{{- if and (kindIs "map" $sasl) (get $sasl "password") }}
{{- fail "config.upstream.sasl.password would put a secret into a ConfigMap: mount a Secret and set password_file, or set PURGATORY_PROXY_UPSTREAM__SASL__PASSWORD from a secretKeyRef in extraEnv" }}
{{- end }}
{{- $brokerPorts := dict }}
{{- range $node, $port := ternary (dict) .Values.proxy.brokerPorts (eq (include "purgatory-proxy.sni" .) "true") }}
{{- if not (kindIs "invalid" $port) }}
{{- $_ := set $brokerPorts (toString (int $node)) (int $port) }}
{{- end }}
{{- end }}
{{- $_ := set $config.proxy "listen" (printf "%s:%d" (include "purgatory-proxy.listenHost" .) (int .Values.proxy.port)) }}
{{- $_ := set $config.proxy "advertised_host" (include "purgatory-proxy.advertisedHost" .) }}
{{- $_ := set $config.proxy "broker_ports" $brokerPorts }}
{{- $_ := set $config.metrics "listen" (ternary (printf "0.0.0.0:%d" (int .Values.metrics.port)) "" (and .Values.metrics.enabled true)) }}
{{- $_ := set $config.log "requests" (ternary (printf "%s/requests.jsonl" (include "purgatory-proxy.requestLogDir" .)) "" (and .Values.requestLog.enabled true)) }}
{{- /* config.example.toml's order first, then any other section. */}}
{{- $order := list "proxy" "upstream" "memory" "connections" "purgatory" "fetch" "metrics" "log" }}
{{- $sections := $order }}
{{- range $section := keys $config | sortAlpha }}
{{- if not (has $section $order) }}
{{- $sections = append $sections $section }}
{{- end }}
{{- end }}
{{- range $section := $sections }}
{{- $table := get $config $section }}
{{- if hasKey $config $section }}
{{- if not (kindIs "map" $table) }}
{{- fail (printf "config.%s must be a map of keys (a TOML table), not %v" $section $table) }}
{{- end }}
{{ include "purgatory-proxy.tomlTable" (dict "path" (include "purgatory-proxy.tomlKey" $section) "table" $table) }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Probe handlers: HTTP on the metrics port, or (metrics off) a TCP connect to the bootstrap port
from inside the container, which also works when the proxy listens on the pod's loopback only.
*/}}
{{- define "purgatory-proxy.probe" -}}
{{- $root := .root }}
{{- $handler := dict }}
{{- if $root.Values.metrics.enabled }}
{{- $handler = dict "httpGet" (dict "path" .path "port" "metrics") }}
{{- else }}
{{- $connect := printf "import socket; socket.create_connection(('127.0.0.1', %d), 1).close()" (int $root.Values.proxy.port) }}
{{- $handler = dict "exec" (dict "command" (list "python" "-c" $connect)) }}
{{- end }}
{{- toYaml (merge $handler (deepCopy .timing)) }}
{{- end }}

{{/*
The proxy container, shared by the gateway Deployment and both sidecar forms. Called with
(dict "root" $ "native" BOOL): a native sidecar is an init container with restartPolicy Always.
Its TOML config comes from the ConfigMap (configmap.yaml), mounted read-only; /tmp and the
request-log directory are the only writable paths (readOnlyRootFilesystem).
*/}}
{{- define "purgatory-proxy.container" -}}
{{- $root := .root }}
{{- with $root -}}
- name: purgatory-proxy
  image: {{ include "purgatory-proxy.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  {{- if $.native }}
  # A native sidecar: started before the app containers, stopped after them.
  restartPolicy: Always
  {{- end }}
  args: ["run", "--config", "/etc/purgatory-proxy/config.toml"]
  {{- with .Values.extraEnv }}
  env:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  ports:
    - name: bootstrap
      containerPort: {{ int .Values.proxy.port }}
      protocol: TCP
    {{- range $node, $port := ternary (dict) .Values.proxy.brokerPorts (eq (include "purgatory-proxy.sni" .) "true") }}
    {{- if not (kindIs "invalid" $port) }}
    - name: {{ printf "broker-%v" $node | quote }}
      containerPort: {{ int $port }}
      protocol: TCP
    {{- end }}
    {{- end }}
    {{- if .Values.metrics.enabled }}
    - name: metrics
      containerPort: {{ int .Values.metrics.port }}
      protocol: TCP
    {{- end }}
  startupProbe:
    {{- include "purgatory-proxy.probe" (dict "root" . "path" "/healthz" "timing" .Values.startupProbe) | nindent 4 }}
  livenessProbe:
    {{- include "purgatory-proxy.probe" (dict "root" . "path" "/healthz" "timing" .Values.livenessProbe) | nindent 4 }}
  readinessProbe:
    {{- include "purgatory-proxy.probe" (dict "root" . "path" "/readyz" "timing" .Values.readinessProbe) | nindent 4 }}
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
    {{- if .Values.requestLog.enabled }}
    - name: request-log
      mountPath: {{ include "purgatory-proxy.requestLogDir" . }}
    {{- end }}
    {{- with .Values.extraVolumeMounts }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
{{- end }}

{{- define "purgatory-proxy.volumes" -}}
- name: config
  configMap:
    name: {{ include "purgatory-proxy.fullname" . }}
- name: tmp
  emptyDir:
    sizeLimit: 16Mi
{{- if .Values.requestLog.enabled }}
# Sized from the rotation settings: requests_max_bytes x (requests_backups + 1) + headroom.
- name: request-log
  emptyDir:
    {{- with .Values.requestLog.medium }}
    medium: {{ . }}
    {{- end }}
    sizeLimit: {{ include "purgatory-proxy.requestLogSizeLimit" . }}
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
SNI mode (config.proxy.sni.bootstrap_host set): one port serves every broker, told apart by the
TLS hello's server name, so no broker port is listed, bound or exposed. "true" or "".
*/}}
{{- define "purgatory-proxy.sni" -}}
{{- if dig "proxy" "sni" "bootstrap_host" "" (.Values.config | default dict) }}true{{ end }}
{{- end }}
