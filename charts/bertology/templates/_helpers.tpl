{{/* The labels every object of the chart carries (Kubernetes' recommended set). */}}
{{- define "bertology.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{/*
One step-library document with the values applied (see workflow-templates.yaml); fails, naming the file
and template, on anything the chart cannot place or will not install.
Context: dict with doc (the parsed document), path (its file) and root (the chart's top-level context).
*/}}
{{- define "bertology.stepLibrary" -}}
{{- $root := .root }}
{{- $doc := .doc }}
{{- $path := .path }}
{{- if ne (toString $doc.kind) "WorkflowTemplate" }}
{{- fail (printf "%s: kind %v is not a WorkflowTemplate (workflows/templates/ holds the step library only)" $path $doc.kind) }}
{{- end }}
{{- $labels := include "bertology.labels" $root | fromYaml }}
{{- $_ := set $doc.metadata "labels" (merge (dig "metadata" "labels" dict $doc) $labels) }}
{{- if hasKey $doc.spec "serviceAccountName" }}
{{- $_ := set $doc.spec "serviceAccountName" $root.Values.serviceAccount.name }}
{{- end }}
{{- range $t := $doc.spec.templates }}
{{- with $t.container }}
{{- $where := printf "%s: template %s" $path $t.name }}
{{- if not (dig "securityContext" "runAsNonRoot" false $t) }}
{{- fail (printf "%s: securityContext.runAsNonRoot must be true (the chart installs no pod that may run as root)" $where) }}
{{- end }}
{{- if not (dig "securityContext" "readOnlyRootFilesystem" false .) }}
{{- fail (printf "%s: container.securityContext.readOnlyRootFilesystem must be true" $where) }}
{{- end }}
{{- $image := get $root.Values.images (trimPrefix "bertology-" (regexReplaceAll "[:@].*$" (base .image) "")) }}
{{- if not $image }}
{{- fail (printf "%s: image %s is not bertology-train or bertology-cpu (expected one of values.images)" $where .image) }}
{{- end }}
{{- $_ := set . "image" (printf "%s:%s" $image.repository ($image.tag | default $root.Chart.AppVersion)) }}
{{- $_ := set . "imagePullPolicy" $image.pullPolicy }}
{{- range $env := .env }}
{{- $secret := dig "valueFrom" "secretKeyRef" dict $env }}
{{- if eq (toString $secret.name) "bertology-s3" }}
{{- $_ := set $secret "name" $root.Values.s3.secretName }}
{{- end }}
{{- end }}
{{- $gpu := false }}
{{- range $amounts := list (dig "resources" "requests" dict .) (dig "resources" "limits" dict .) }}
{{- if hasKey $amounts "nvidia.com/gpu" }}
{{- $_ := unset $amounts "nvidia.com/gpu" }}
{{- $_ := set $amounts $root.Values.gpu.resourceName (toString (int $root.Values.gpu.count)) }}
{{- $gpu = true }}
{{- end }}
{{- end }}
{{- if $gpu }}
{{- with mergeOverwrite (deepCopy ($t.nodeSelector | default dict)) $root.Values.gpu.nodeSelector }}
{{- $_ := set $t "nodeSelector" . }}
{{- end }}
{{- with concat ($t.tolerations | default list) $root.Values.gpu.tolerations }}
{{- $_ := set $t "tolerations" . }}
{{- end }}
{{- end }}
{{- $_ := set $t "serviceAccountName" $root.Values.serviceAccount.name }}
{{- end }}
{{- end }}
{{- toYaml $doc }}
{{- end }}
