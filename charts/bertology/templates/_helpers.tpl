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
{{- $container := . }}
{{- with get ($root.Values.resources | default dict) (toString $t.name) }}
{{- $_ := set $container "resources" (mergeOverwrite (deepCopy ($container.resources | default dict)) (deepCopy .)) }}
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
(docs/kubernetes.md, "Pod Security and the network"; tests/test_pod_security.py checks every rule on the pods
Argo makes): RuntimeDefault seccomp on the pod, so that Argo's init and wait containers have it too; no
privilege escalation and every capability dropped in the container, and in Argo's init and wait through the
template's podSpecPatch (merged into them by name after the pod is built: util.ApplyPodSpecPatch), so the
controller needs no executor setting; the labels the NetworkPolicy selects step pods by.
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
{{- $patch := fromYaml (toString ($t.podSpecPatch | default "")) }}
{{- range $field, $name := dict "initContainers" "init" "containers" "wait" }}
{{- $locked := false }}
{{- range $c := (get $patch $field | default list) }}
{{- if and (kindIs "map" $c) (eq (toString (get $c "name")) $name) (eq (toString (dig "securityContext" "allowPrivilegeEscalation" "" $c)) "false") (has "ALL" (dig "securityContext" "capabilities" "drop" list $c)) }}
{{- $locked = true }}
{{- end }}
{{- end }}
{{- if not $locked }}
{{- fail (printf "%s: podSpecPatch must give Argo's %s container (%s) securityContext allowPrivilegeEscalation: false and capabilities.drop [ALL] (the restricted standard's per-container rules, which no controller-wide setting should give)" $.where $name $field) }}
{{- end }}
{{- end }}
{{- $labels := dig "metadata" "labels" dict $t }}
{{- if or (ne (toString (get $labels "app.kubernetes.io/name")) "bertology") (ne (toString (get $labels "app.kubernetes.io/component")) "step") }}
{{- fail (printf "%s: metadata.labels must carry app.kubernetes.io/name: bertology and app.kubernetes.io/component: step (the NetworkPolicy selects step pods by them)" .where) }}
{{- end }}
{{- end }}


{{/*
The queue watch's ValidatingAdmissionPolicy: its variables and validations (templates/queue-watch-policy.yaml
says what they allow and why). bertology's own WorkflowTemplates are those the watch stops
(bertology.argo.queue_watch.WATCHED); workflows/templates/platform.yaml carries the same for an install
without the chart (tests/test_chart.py checks that they agree).
*/}}
{{- define "bertology.queueWatchPolicy" -}}
variables:
  - name: spec
    expression: "has(object.spec) ? object.spec : {}"
  - name: oldSpec
    expression: "has(oldObject.spec) ? oldObject.spec : {}"
  - name: annotations
    expression: "has(object.metadata.annotations) ? object.metadata.annotations : {}"
  - name: oldAnnotations
    expression: "has(oldObject.metadata.annotations) ? oldObject.metadata.annotations : {}"
validations:
  - expression: >-
      has(variables.oldSpec.workflowTemplateRef) && has(variables.oldSpec.workflowTemplateRef.name) &&
      variables.oldSpec.workflowTemplateRef.name in ['bertology-study', 'bertology-vocab-overlap', 'bertology-nightly-regression'] &&
      !(has(variables.oldSpec.workflowTemplateRef.clusterScope) && variables.oldSpec.workflowTemplateRef.clusterScope == true)
    message: "the queue watch's account may change only Workflows of bertology's own WorkflowTemplates (spec.workflowTemplateRef.name bertology-study, bertology-vocab-overlap or bertology-nightly-regression)"
    reason: Forbidden
  - expression: >-
      has(variables.spec.shutdown) && variables.spec.shutdown == 'Stop' &&
      variables.spec.all(k, k == 'shutdown' || (k in variables.oldSpec && variables.spec[k] == variables.oldSpec[k])) &&
      variables.oldSpec.all(k, k == 'shutdown' || k in variables.spec)
    message: "the queue watch's account may change only spec.shutdown, to Stop"
    reason: Forbidden
  - expression: >-
      variables.annotations.all(k, k == 'bertology.io/stopped-by-queue-watch' || (k in variables.oldAnnotations && variables.annotations[k] == variables.oldAnnotations[k])) &&
      variables.oldAnnotations.all(k, k == 'bertology.io/stopped-by-queue-watch' || k in variables.annotations)
    message: "the queue watch's account may change only the annotation bertology.io/stopped-by-queue-watch"
    reason: Forbidden
  - expression: >-
      (has(object.metadata.labels) ? object.metadata.labels : {}) == (has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}) &&
      (has(object.metadata.finalizers) ? object.metadata.finalizers : []) == (has(oldObject.metadata.finalizers) ? oldObject.metadata.finalizers : []) &&
      (has(object.metadata.ownerReferences) ? object.metadata.ownerReferences : []) == (has(oldObject.metadata.ownerReferences) ? oldObject.metadata.ownerReferences : []) &&
      (has(object.status) ? object.status : {}) == (has(oldObject.status) ? oldObject.status : {})
    message: "the queue watch's account may not change a Workflow's labels, finalizers, owner references or status"
    reason: Forbidden
{{- end }}
