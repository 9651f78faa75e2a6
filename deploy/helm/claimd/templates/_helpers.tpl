{{/* Names and labels shared by every object of the chart. */}}

{{- define "claimd.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "claimd.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "claimd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "claimd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "claimd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "claimd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "claimd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "claimd.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "claimd.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/*
claimd.checks refuses value sets claimd itself would refuse at start, so
the mistake shows at helm install rather than as a crash loop.
*/}}
{{- define "claimd.checks" -}}
{{- if not .Values.postgres.existingSecret -}}
{{- fail "postgres.existingSecret is required: claimd's durable tier is PostgreSQL (a Secret holding its URL)" -}}
{{- end -}}
{{- if and (not .Values.insecure) (not .Values.tls.existingSecret) -}}
{{- fail "tls.existingSecret is required unless insecure=true: claimd refuses to serve a non-loopback address without TLS" -}}
{{- end -}}
{{- if and (not .Values.insecure) (not .Values.auth.existingSecret) (not .Values.tls.clientCA) -}}
{{- fail "auth.existingSecret or tls.clientCA is required unless insecure=true: callers must authenticate" -}}
{{- end -}}
{{- if and (not .Values.insecure) (not .Values.tls.clientCA) -}}
{{- fail "tls.clientCA is required unless insecure=true: claimd serves /metrics on a non-loopback address only to scrapers with a client certificate" -}}
{{- end -}}
{{- if and .Values.redis.existingSecret (not .Values.redis.fastTierKey.existingSecret) (not .Values.insecure) -}}
{{- fail "redis.fastTierKey.existingSecret is required with Redis unless insecure=true: the key that seals the fast tier's records, the same on every replica" -}}
{{- end -}}
{{- if and .Values.redis.tls.existingSecret (not .Values.redis.existingSecret) -}}
{{- fail "redis.tls.existingSecret needs redis.existingSecret: it is the TLS material of the Redis fast tier" -}}
{{- end -}}
{{- range concat (.Values.extraArgs | default list) (.Values.migrate.extraArgs | default list) -}}
{{- if regexMatch "^--?postgres-schema([= ]|$)" (toString .) -}}
{{- fail "extraArgs or migrate.extraArgs sets --postgres-schema: set postgres.schema instead, which serve and the migrate Job both need" -}}
{{- end -}}
{{- end -}}
{{- /* APIs, not a kubeVersion: see Chart.yaml. */ -}}
{{- if and .Values.autoscaling.enabled (not (.Capabilities.APIVersions.Has "autoscaling/v2")) -}}
{{- fail "autoscaling.enabled needs autoscaling/v2, which this cluster does not serve (Kubernetes 1.23 and later do): upgrade it or set autoscaling.enabled=false" -}}
{{- end -}}
{{- if and .Values.podDisruptionBudget.enabled (not (.Capabilities.APIVersions.Has "policy/v1")) -}}
{{- fail "podDisruptionBudget.enabled needs policy/v1, which this cluster does not serve (Kubernetes 1.21 and later do): upgrade it or set podDisruptionBudget.enabled=false" -}}
{{- end -}}
{{- end -}}

{{/*
claimd.durableArgs are the flags serve and migrate share: they must agree
on the schema, and they log alike. Empty values leave claimd's defaults.
*/}}
{{- define "claimd.durableArgs" -}}
{{- with .Values.postgres.schema }}
- {{ printf "--postgres-schema=%s" . | quote }}
{{- end }}
{{- with .Values.log.level }}
- {{ printf "--log-level=%s" . | quote }}
{{- end }}
{{- with .Values.log.format }}
- {{ printf "--log-format=%s" . | quote }}
{{- end }}
{{- end -}}

{{/* Environment of every claimd container: the tier URLs, from Secrets only. */}}
{{- define "claimd.tierEnv" -}}
- name: CLAIMD_POSTGRES_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.postgres.existingSecret }}
      key: {{ .Values.postgres.key }}
{{- if .Values.redis.existingSecret }}
- name: CLAIMD_REDIS_URL
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.existingSecret }}
      key: {{ .Values.redis.key }}
{{- end }}
{{- end -}}

{{/* The restricted Pod Security Standard, for every container. */}}
{{- define "claimd.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
