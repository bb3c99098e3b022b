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
{{- /* the queue watch runs as an account of its own (rbac.yaml); every other template as the steps' */ -}}
{{- $account := $root.Values.serviceAccount.name }}
{{- if eq (toString $doc.spec.serviceAccountName) "bertology-queue-watch" }}
{{- $account = printf "%s-queue-watch" $root.Values.serviceAccount.name }}
{{- end }}
{{- if hasKey $doc.spec "serviceAccountName" }}
{{- $_ := set $doc.spec "serviceAccountName" $account }}
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
{{- include "bertology.restricted" (dict "template" $t "container" . "where" $where) }}
{{- range $mount := .volumeMounts }}
{{- if eq (toString $mount.mountPath) "/tmp" }}
{{- range $volume := $t.volumes }}
{{- if and (eq (toString $volume.name) (toString $mount.name)) (hasKey $volume "emptyDir") }}
{{- $_ := set $volume "emptyDir" (merge (dict "sizeLimit" $root.Values.tmp.sizeLimit) (omit ($volume.emptyDir | default dict) "sizeLimit")) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $key := trimPrefix "bertology-" (regexReplaceAll "[:@].*$" (base .image) "") }}
{{- $image := get $root.Values.images $key }}
{{- if not (kindIs "map" $image) }}
{{- fail (printf "%s: image %s is not bertology-train or bertology-cpu (expected one of values.images)" $where .image) }}
{{- end }}
{{- if and (hasPrefix "ghcr.io/bertology/" $image.repository) (not $root.Values.images.allowPlaceholder) }}
{{- fail (printf "images.%s.repository %s is the chart's placeholder, where no image is published: push the images (make push REGISTRY=HOST[:PORT][/PATH]) and set images.train.repository, images.cpu.repository (and .digest) as it prints, or images.allowPlaceholder=true for a render that is never installed" $key $image.repository) }}
{{- end }}
{{- if $image.digest }}
{{- $_ := set . "image" (printf "%s@%s" $image.repository $image.digest) }}
{{- else }}
{{- $_ := set . "image" (printf "%s:%s" $image.repository ($image.tag | default $root.Chart.AppVersion)) }}
{{- end }}
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
{{- $_ := set $t "serviceAccountName" $account }}
{{- end }}
{{- end }}
{{- toYaml $doc }}
{{- end }}


{{/*
What the "restricted" Pod Security Standard needs of a step template and that only the template can give
(README, "Pod Security"; tests/test_pod_security.py checks every rule on the pods Argo makes): RuntimeDefault
seccomp on the pod, so that Argo's init and wait containers have it too; no privilege escalation and every
capability dropped in the container; the labels the NetworkPolicy selects step pods by.
Context: dict with template, container and where (the file and template, for the message).
*/}}
{{- define "bertology.restricted" -}}
{{- $t := .template }}
{{- if ne (toString (dig "securityContext" "seccompProfile" "type" "" $t)) "RuntimeDefault" }}
{{- fail (printf "%s: securityContext.seccompProfile.type must be RuntimeDefault" .where) }}
{{- end }}
{{- if ne (toString (dig "securityContext" "allowPrivilegeEscalation" "" .container)) "false" }}
{{- fail (printf "%s: container.securityContext.allowPrivilegeEscalation must be false" .where) }}
{{- end }}
{{- if not (has "ALL" (dig "securityContext" "capabilities" "drop" list .container)) }}
{{- fail (printf "%s: container.securityContext.capabilities.drop must hold ALL" .where) }}
{{- end }}
{{- $labels := dig "metadata" "labels" dict $t }}
{{- if or (ne (toString (get $labels "app.kubernetes.io/name")) "bertology") (ne (toString (get $labels "app.kubernetes.io/component")) "step") }}
{{- fail (printf "%s: metadata.labels must carry app.kubernetes.io/name: bertology and app.kubernetes.io/component: step (the NetworkPolicy selects step pods by them)" .where) }}
{{- end }}
{{- end }}
