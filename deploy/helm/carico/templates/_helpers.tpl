{{/* Labels of every object; the component label tells the parts apart. */}}
{{- define "carico.labels" -}}
app.kubernetes.io/name: carico
app.kubernetes.io/part-of: carico
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Pod selector of a component (stable across upgrades: no version in it). */}}
{{- define "carico.selector" -}}
app.kubernetes.io/name: carico
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "carico.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* DNS name of a Service in the release namespace (the names `carico certs` signs). */}}
{{- define "carico.svc" -}}
{{ .name }}.{{ .root.Release.Namespace }}.svc
{{- end }}

{{/* Non-root, read-only, nothing extra: every Carico container. */}}
{{- define "carico.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: [ALL]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The pod security context of every Carico pod: the image's user; Secret and volume files
     are group-readable by fsGroup so that every container of the pod can read them. */}}
{{- define "carico.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "carico.logEnv" -}}
- name: CARICO_LOG_FORMAT
  value: {{ .Values.logFormat | quote }}
- name: CARICO_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- end }}

{{/* The TLS Secret volume of a component, mounted at /etc/carico/tls. */}}
{{- define "carico.tlsVolume" -}}
- name: tls
  secret:
    secretName: {{ index .root.Values.tls.secrets .component }}
    defaultMode: 0440
{{- end }}

{{/* The KubeSchedulerConfiguration as JSON: the file carico.manifests generates from
     carico.schedconfig (never edited by hand), with the values an operator sets applied. */}}
{{- define "carico.schedulerConfig" -}}
{{- $file := ternary "files/kube-scheduler-config-default-scheduler.json" "files/kube-scheduler-config.json" .Values.scheduler.replaceDefaultScheduler }}
{{- $cfg := .Files.Get $file | fromJson }}
{{- $ext := index $cfg.extenders 0 }}
{{- $tls := .Values.tls.enabled }}
{{- $_ := set $ext "urlPrefix" (printf "%s://127.0.0.1:%d/scheduler" (ternary "https" "http" $tls) (int .Values.scheduler.extender.port)) }}
{{- $_ := set $ext "enableHTTPS" $tls }}
{{- if not $tls }}
{{- $_ := unset $ext "tlsConfig" }}
{{- end }}
{{- $_ := set $ext "nodeCacheCapable" .Values.scheduler.extender.nodeCacheCapable }}
{{- $_ := set $ext "ignorable" .Values.scheduler.extender.ignorable }}
{{- $_ := set $cfg.leaderElection "leaderElect" .Values.scheduler.leaderElection.enabled }}
{{- $_ := set $cfg.leaderElection "resourceNamespace" .Release.Namespace }}
{{- toJson $cfg }}
{{- end }}

{{/* The API server's address for clusters where the kubernetes Service is not routable
     (apiServer.host/port); nothing when unset. */}}
{{- define "carico.apiServerEnv" -}}
{{- with .Values.apiServer.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ required "apiServer.port is required with apiServer.host" $.Values.apiServer.port | quote }}
{{- end }}
{{- end }}

{{/* CP-SAT threads of a repack solve: policy.repack.workers, else the extender container's CPU
limit rounded up ("1500m" -> 2), else 0 (every core). */}}
{{- define "carico.repackWorkers" -}}
{{- $limit := toString (dig "limits" "cpu" "" .Values.scheduler.extender.resources) -}}
{{- if .Values.policy.repack.workers -}}
{{- .Values.policy.repack.workers -}}
{{- else if hasSuffix "m" $limit -}}
{{- div (add (atoi (trimSuffix "m" $limit)) 999) 1000 -}}
{{- else if $limit -}}
{{- ceil (float64 $limit) | int -}}
{{- else -}}
0
{{- end -}}
{{- end -}}
