{{- /*
The objects of one of the manifests `corral-vdi broker install` compiles in (a file of files/,
YAML documents), each annotated with the digest of its manifest as the CLI annotates it (the
first 16 hex digits of the SHA-256 of the manifest's files, concatenated in order): `dict "text"
TEXT "key" ANNOTATION "digest" DIGEST "root" $`. The broker's Deployment gets the chart's
settings.
*/ -}}
{{- define "corral-vdi-broker.objects" -}}
{{- $root := .root -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" .text -1 }}
{{- $obj := fromYaml $doc }}
{{- if $obj.kind }}
{{- $meta := $obj.metadata }}
{{- $annotations := default (dict) $meta.annotations }}
{{- $_ := set $annotations $.key $.digest }}
{{- if eq $obj.kind "Deployment" }}
{{- $container := index $obj.spec.template.spec.containers 0 }}
{{- with $root.Values.image }}
{{- $_ := set $container "image" . }}
{{- $_ := set $annotations "corral.dev/broker-image" . }}
{{- end }}
{{- if not (kindIs "invalid" $root.Values.replicas) }}
{{- $_ := set $obj.spec "replicas" $root.Values.replicas }}
{{- end }}
{{- if $root.Values.resources }}
{{- $_ := set $container "resources" $root.Values.resources }}
{{- end }}
{{- if $root.Values.metricsPort }}
{{- $args := list }}
{{- $previous := "" }}
{{- range $container.args }}
{{- $args = append $args (ternary (toString (int $root.Values.metricsPort)) . (eq $previous "--metrics-port")) }}
{{- $previous = . }}
{{- end }}
{{- $_ := set $container "args" $args }}
{{- range $container.ports }}
{{- if eq .name "metrics" }}{{ $_ := set . "containerPort" (int $root.Values.metricsPort) }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- $_ := set $meta "annotations" $annotations }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end }}
