{{/*
The workload's name: fullnameOverride, else the release name (the
application's name: orders, ledger, inventory in examples/).
*/}}
{{- define "nemo.fullname" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The selector: the application's name, as in the plain manifests. */}}
{{- define "nemo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nemo.fullname" . }}
{{- end -}}

{{- define "nemo.labels" -}}
{{ include "nemo.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/*
nemo's coherence mode as nemo resolves it: coherence.mode, else exclusive
over the embedded store and shared in front of a cloud backend.
*/}}
{{- define "nemo.mode" -}}
{{- $c := .Values.config -}}
{{- $mode := (($c.coherence | default dict).mode) | default "" -}}
{{- if $mode -}}
{{- $mode -}}
{{- else if eq (include "nemo.backend" .) "embedded" -}}
exclusive
{{- else -}}
shared
{{- end -}}
{{- end -}}

{{- define "nemo.backend" -}}
{{- ((.Values.config.backend | default dict).type) | default "embedded" -}}
{{- end -}}

{{/*
nemo.bytes: a size as nemo's cache.max_bytes takes it ("256MiB", "1.5GiB",
"512Mi", "300MB", "4096") in bytes, as a float.
*/}}
{{- define "nemo.bytes" -}}
{{- $s := toString . | replace " " "" -}}
{{- if not (regexMatch "^[0-9]+(\\.[0-9]+)?([KMGT]i?B?|B)?$" $s) -}}
{{- fail (printf "%q: want a size such as 256MiB or 576Mi" $s) -}}
{{- end -}}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $s -}}
{{- $unit := trimPrefix $num $s | trimSuffix "B" -}}
{{- $mult := get (dict "" 1.0 "K" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0) $unit -}}
{{- mulf (float64 $num) $mult -}}
{{- end -}}

{{/* cache.max_bytes in bytes (nemo's default 256MiB when unset). */}}
{{- define "nemo.cacheBytes" -}}
{{- include "nemo.bytes" (((.Values.config.cache | default dict).max_bytes) | default "256MiB") -}}
{{- end -}}

{{/*
nemo.memoryLimit: the container's memory limit in Mi, derived as
k8s/README.md ("Memory limit") says: nemo holds its memory under its Go soft
limit, 1.5 × cache.max_bytes + 64 MiB; the container gets 1.15 × that for
the WAL's page cache and the kernel, rounded up to a multiple of 64Mi.
*/}}
{{- define "nemo.memoryLimit" -}}
{{- $soft := addf (mulf 1.5 (include "nemo.cacheBytes" . | float64)) 67108864.0 -}}
{{- $mi := divf (mulf 1.15 $soft) 1048576.0 -}}
{{- printf "%dMi" (mul (ceil (divf $mi 64.0) | int64) 64) -}}
{{- end -}}

{{/* nemo.memoryRequest: the soft limit, 1.5 × cache.max_bytes + 64 MiB, in Mi, rounded up. */}}
{{- define "nemo.memoryRequest" -}}
{{- $soft := addf (mulf 1.5 (include "nemo.cacheBytes" . | float64)) 67108864.0 -}}
{{- printf "%dMi" (ceil (divf $soft 1048576.0) | int64) -}}
{{- end -}}

{{/* nemo.resources: the nemo container's resources with the derived memory. */}}
{{- define "nemo.resources" -}}
{{- $r := deepCopy (.Values.resources | default dict) -}}
{{- $req := $r.requests | default dict -}}
{{- $lim := $r.limits | default dict -}}
{{- $derived := include "nemo.memoryLimit" . -}}
{{- if $lim.memory -}}
{{- if lt (include "nemo.bytes" $lim.memory | float64) (include "nemo.bytes" $derived | float64) -}}
{{- fail (printf "resources.limits.memory %s is below %s, 1.15 × (1.5 × cache.max_bytes + 64 MiB): see k8s/README.md" $lim.memory $derived) -}}
{{- end -}}
{{- else -}}
{{- $_ := set $lim "memory" $derived -}}
{{- end -}}
{{- if not $req.memory -}}
{{- $_ := set $req "memory" (include "nemo.memoryRequest" .) -}}
{{- end -}}
{{- toYaml (dict "requests" $req "limits" $lim) -}}
{{- end -}}

{{/* The port of a host:port listener address. */}}
{{- define "nemo.port" -}}
{{- regexFind "[0-9]+$" (toString .) -}}
{{- end -}}

{{/*
nemo.config: nemo's configuration file, config with what the workload
implies added: the peer listener, the commit logs in the backend and the
peers' headless Service in partitioned mode; the service account file's
path when one is mounted.
*/}}
{{- define "nemo.config" -}}
{{- $c := deepCopy .Values.config -}}
{{- $mode := include "nemo.mode" . -}}
{{- if eq $mode "partitioned" -}}
{{- $_ := set $c "listen" (merge (dict "peer" (printf "0.0.0.0:%v" .Values.peer.port)) ($c.listen | default dict)) -}}
{{- $_ := set $c "wal" (merge (dict "location" "backend") ($c.wal | default dict)) -}}
{{- $_ := set $c "coherence" (merge (dict "peers" (printf "%s-peers:%v" (include "nemo.fullname" .) .Values.peer.port)) ($c.coherence | default dict)) -}}
{{- end -}}
{{- with .Values.credentials.datastoreServiceAccount -}}
{{- $b := $c.backend | default dict -}}
{{- $_ := set $b "datastore" (merge (dict "credentials_file" (printf "/var/run/secrets/nemo/%s" .)) ($b.datastore | default dict)) -}}
{{- $_ := set $c "backend" $b -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/* nemo.secretEnv: one variable from a key of credentials.secretName. */}}
{{- define "nemo.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
{{- end -}}

{{/* nemo.env: the nemo container's environment. */}}
{{- define "nemo.env" -}}
{{- $cr := .Values.credentials -}}
- name: NEMO_CONFIG
  value: /etc/nemo/nemo.yaml
{{- range $name, $key := dict "NEMO_BACKEND_AZTABLE_CONNECTION_STRING" $cr.azureConnectionString "NEMO_BACKEND_AZTABLE_KEY" $cr.azureAccountKey "NEMO_FRONTEND_AZURE_KEY" $cr.frontendAzureKey "NEMO_FRONTEND_DATASTORE_TOKEN" $cr.frontendDatastoreToken "NEMO_COHERENCE_PEER_SECRET" $cr.peerSecret }}
{{- if $key }}
{{ include "nemo.secretEnv" (dict "name" $name "secret" $cr.secretName "key" $key) }}
{{- end }}
{{- end }}
{{- if eq (include "nemo.mode" .) "partitioned" }}
{{- if not $cr.peerSecret }}
{{- fail "partitioned mode needs credentials.peerSecret: the key of the Secret holding coherence.peer_secret" }}
{{- end }}
# coherence.advertise defaults to POD_IP with listen.peer's port: each
# replica advertises its own address in the leases it holds.
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* nemo.probe: an httpGet probe on http-metrics. */}}
{{- define "nemo.probe" -}}
httpGet:
  path: {{ .path }}
  port: http-metrics
{{ toYaml .probe }}
{{- end -}}

{{/* nemo.container: the sidecar, an init container with restartPolicy: Always. */}}
{{- define "nemo.container" -}}
- name: nemo
  image: {{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args: ["serve"]
  restartPolicy: Always
  env:
    {{- include "nemo.env" . | nindent 4 }}
  ports:
    - name: http-metrics
      containerPort: {{ include "nemo.port" .Values.config.listen.http }}
    {{- if eq (include "nemo.mode" .) "partitioned" }}
    - name: peer
      containerPort: {{ .Values.peer.port }}
    {{- end }}
  startupProbe:
    {{- include "nemo.probe" (dict "path" "/startupz" "probe" .Values.probes.startup) | nindent 4 }}
  livenessProbe:
    {{- include "nemo.probe" (dict "path" "/healthz" "probe" .Values.probes.liveness) | nindent 4 }}
  readinessProbe:
    {{- include "nemo.probe" (dict "path" "/readyz" "probe" .Values.probes.readiness) | nindent 4 }}
  lifecycle:
    preStop:
      exec:
        # Drain (in exclusive and partitioned mode: write back, release the
        # leases) and wait until nemo has exited.
        command: ["/nemo", "shutdown"]
  resources:
    {{- include "nemo.resources" . | nindent 4 }}
  securityContext:
    allowPrivilegeEscalation: false
    readOnlyRootFilesystem: true
    capabilities:
      drop: ["ALL"]
  volumeMounts:
    - name: nemo-config
      mountPath: /etc/nemo
      readOnly: true
    - name: nemo-data
      mountPath: /var/lib/nemo
    {{- if .Values.credentials.datastoreServiceAccount }}
    - name: nemo-credentials
      mountPath: /var/run/secrets/nemo
      readOnly: true
    {{- end }}
    {{- if (.Values.tls | default dict).secretName }}
    - name: nemo-tls
      mountPath: /etc/nemo/tls
      readOnly: true
    {{- end }}
{{- end -}}

{{/* nemo.pod: the pod template of either workload. */}}
{{- define "nemo.pod" -}}
metadata:
  labels:
    {{- include "nemo.labels" . | nindent 4 }}
    # Selected by the PodMonitor.
    nemo.cache/sidecar: "true"
    {{- with .Values.workload.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- $ann := deepCopy (.Values.workload.podAnnotations | default dict) }}
  {{- if .Values.metrics.annotations }}
  {{- $_ := set $ann "prometheus.io/scrape" "true" }}
  {{- $_ := set $ann "prometheus.io/port" (include "nemo.port" .Values.config.listen.http) }}
  {{- $_ := set $ann "prometheus.io/path" "/metrics" }}
  {{- end }}
  {{- $_ := set $ann "checksum/nemo-config" (include "nemo.config" . | sha256sum) }}
  annotations:
    {{- toYaml $ann | nindent 4 }}
spec:
  terminationGracePeriodSeconds: {{ .Values.workload.terminationGracePeriodSeconds }}
  {{- with .Values.workload.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  initContainers:
    {{- include "nemo.container" . | nindent 4 }}
  containers:
    {{- if not .Values.app.containers }}
    {{- fail "app.containers: give the application container(s) nemo runs beside" }}
    {{- end }}
    {{- toYaml .Values.app.containers | nindent 4 }}
  volumes:
    - name: nemo-config
      configMap:
        name: {{ include "nemo.fullname" . }}-nemo
    {{- with .Values.credentials.datastoreServiceAccount }}
    - name: nemo-credentials
      secret:
        secretName: {{ $.Values.credentials.secretName }}
        items:
          - key: {{ . }}
            path: {{ . }}
    {{- end }}
    {{- with (.Values.tls | default dict).secretName }}
    - name: nemo-tls
      secret:
        secretName: {{ . }}
    {{- end }}
    {{- if ne (include "nemo.mode" .) "exclusive" }}
    - name: nemo-data
      emptyDir:
        {{- toYaml .Values.emptyDir | nindent 8 }}
    {{- end }}
{{- end -}}
