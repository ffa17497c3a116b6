{{/*
Names and labels. The full name is "<release>-<chart>" unless the release name already holds the
chart name; components are "<fullname>-<component>".
*/}}
{{- define "strata.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "strata.fullname" -}}
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

{{/* "<fullname>-<component>"; call with (dict "root" $ "component" "ingester"). */}}
{{- define "strata.componentName" -}}
{{- printf "%s-%s" (include "strata.fullname" .root) .component | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "strata.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of a component; call with (dict "root" $ "component" "ingester"). */}}
{{- define "strata.selectorLabels" -}}
app.kubernetes.io/name: {{ include "strata.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "strata.labels" -}}
helm.sh/chart: {{ include "strata.chart" .root }}
{{ include "strata.selectorLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end }}

{{- define "strata.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "strata.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "strata.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* host:port of the ingesters' gRPC Service, where scrapers and agents push. */}}
{{/* The queriers' headless Service: its DNS name resolves to every ready querier pod. */}}
{{- define "strata.querierPeersAddress" -}}
{{- printf "%s.%s.svc:%v" (include "strata.componentName" (dict "root" . "component" "querier-peers")) .Release.Namespace .Values.ports.grpc }}
{{- end }}

{{- define "strata.ingesterAddress" -}}
{{- printf "%s:%v" (include "strata.componentName" (dict "root" . "component" "ingester")) .Values.ports.grpc }}
{{- end }}

{{/*
The bucket as Thanos objstore YAML (docs/storage.md), with the keys each backend cannot work
without checked here, so a bad values file fails at `helm install` rather than in a crash loop.
*/}}
{{- define "strata.objstore" -}}
{{- $b := .Values.bucket }}
{{- $type := upper (required "bucket.type is required (FILESYSTEM, S3 or AZURE)" $b.type) }}
{{- $config := deepCopy ($b.config | default dict) }}
{{- if eq $type "FILESYSTEM" }}
{{- /* A subdirectory: a fresh volume's root may hold lost+found, which is no tenant. */}}
{{- $_ := set $config "directory" (printf "%s/bucket" (trimSuffix "/" $b.filesystem.mountPath)) }}
{{- else if eq $type "S3" }}
{{- $_ := required "bucket.config.bucket is required for an S3 bucket" $config.bucket }}
{{- $_ := required "bucket.config.endpoint is required for an S3 bucket (host[:port])" $config.endpoint }}
{{- else if eq $type "AZURE" }}
{{- $_ := required "bucket.config.storage_account is required for an AZURE bucket" $config.storage_account }}
{{- $_ := required "bucket.config.container is required for an AZURE bucket" $config.container }}
{{- else }}
{{- fail (printf "bucket.type %q is not supported: use FILESYSTEM, S3 or AZURE" $b.type) }}
{{- end }}
{{- $objstore := dict "type" $type "config" $config }}
{{- if $b.prefix }}
{{- $_ := set $objstore "prefix" $b.prefix }}
{{- end }}
{{- toYaml $objstore }}
{{- end }}

{{- define "strata.filesystemBucket" -}}
{{- if eq (upper .Values.bucket.type) "FILESYSTEM" }}true{{ end }}
{{- end }}

{{- define "strata.bucketClaimName" -}}
{{- default (include "strata.componentName" (dict "root" . "component" "bucket")) .Values.bucket.filesystem.persistence.existingClaim }}
{{- end }}

{{/* The `server:` section: shared keys, then the listen addresses from `ports`. */}}
{{- define "strata.serverSection" -}}
{{- $server := deepCopy (.root.Values.server | default dict) }}
{{- $_ := set $server "http_listen_address" (printf "0.0.0.0:%v" .root.Values.ports.http) }}
{{- $_ := set $server "grpc_listen_address" (printf "0.0.0.0:%v" .root.Values.ports.grpc) }}
{{- if and (eq .component "querier") .root.Values.querier.uiDirectory }}
{{- $_ := set $server "ui_directory" .root.Values.querier.uiDirectory }}
{{- end }}
{{- with .root.Values.tls }}
{{- if .secretName }}
{{- $tls := dict "cert_file" "/etc/strata/tls/tls.crt" "key_file" "/etc/strata/tls/tls.key" }}
{{- if .clientAuth }}
{{- $_ := set $tls "client_ca_file" "/etc/strata/tls/ca.crt" }}
{{- end }}
{{- $_ := set $server "tls" $tls }}
{{- end }}
{{- end }}
{{- with .root.Values.auth }}
{{- if .tokens }}
{{- if not .tokenSecretName }}
{{- fail "auth.tokens needs auth.tokenSecretName" }}
{{- end }}
{{- $tokens := list }}
{{- range .tokens }}
{{- $tokens = append $tokens (dict "token_file" (printf "/etc/strata/tokens/%s" .key) "tenants" .tenants) }}
{{- end }}
{{- $_ := set $server "auth" (dict "tokens" $tokens) }}
{{- end }}
{{- end }}
{{- toYaml $server }}
{{- end }}

{{/* How scrapers and agents reach the ingesters: push_tls and bearer_token_file of a scraper. */}}
{{- define "strata.pushClient" -}}
{{- $out := dict }}
{{- with .Values.tls }}
{{- if .secretName }}
{{- $tls := dict "ca_file" "/etc/strata/tls/ca.crt" }}
{{- if .clientAuth }}
{{- $_ := set $tls "cert_file" "/etc/strata/tls/tls.crt" }}
{{- $_ := set $tls "key_file" "/etc/strata/tls/tls.key" }}
{{- end }}
{{- if .serverName }}
{{- $_ := set $tls "server_name" .serverName }}
{{- end }}
{{- $_ := set $out "push_tls" $tls }}
{{- end }}
{{- end }}
{{- if .Values.auth.clientTokenKey }}
{{- $_ := set $out "bearer_token_file" (printf "/etc/strata/tokens/%s" .Values.auth.clientTokenKey) }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/* volumeMounts of the TLS and token Secrets (root context); empty when neither is set. */}}
{{- define "strata.securityMounts" -}}
{{- if .Values.tls.secretName }}
- name: tls
  mountPath: /etc/strata/tls
  readOnly: true
{{- end }}
{{- if .Values.auth.tokenSecretName }}
- name: tokens
  mountPath: /etc/strata/tokens
  readOnly: true
{{- end }}
{{- end }}

{{- define "strata.securityVolumes" -}}
{{- if .Values.tls.secretName }}
- name: tls
  secret:
    secretName: {{ .Values.tls.secretName }}
{{- end }}
{{- if .Values.auth.tokenSecretName }}
- name: tokens
  secret:
    secretName: {{ .Values.auth.tokenSecretName }}
{{- end }}
{{- end }}

{{/* Config file of the ingester, querier or compactor: server, bucket and its own section. */}}
{{- define "strata.bucketServiceConfig" -}}
{{- $cfg := dict "server" (include "strata.serverSection" . | fromYaml) "bucket" (include "strata.objstore" .root | fromYaml) }}
{{- $section := deepCopy ((index .root.Values .component).config | default dict) }}
{{- if and (eq .component "querier") .root.Values.querier.fanout (not (hasKey $section "peers")) }}
{{- $_ := set $section "peers" (list (include "strata.querierPeersAddress" .root)) }}
{{- end }}
{{- if and (eq .component "querier") .root.Values.querier.diskCache.enabled (not (hasKey $section "disk_cache_directory")) }}
{{- $_ := set $section "disk_cache_directory" .root.Values.querier.diskCache.mountPath }}
{{- $_ := set $section "disk_cache_max_bytes" .root.Values.querier.diskCache.maxBytes }}
{{- end }}
{{- $_ := set $cfg .component $section }}
{{- toYaml $cfg }}
{{- end }}

{{/*
Config file of scraper replica .ordinal of .replicas. With several replicas each job keeps only the
targets whose hash of __address__ modulo the replica count equals the ordinal (Prometheus'
hashmod), so the replicas share the targets without overlap.
*/}}
{{- define "strata.scraperConfig" -}}
{{- $root := .root }}
{{- $scraper := merge (deepCopy ($root.Values.scraper.config | default dict)) (include "strata.pushClient" $root | fromYaml) }}
{{- if not (hasKey $scraper "ingester_addresses") }}
{{- $_ := set $scraper "ingester_addresses" (list (include "strata.ingesterAddress" $root)) }}
{{- end }}
{{- $jobs := list }}
{{- range $job := $root.Values.scraper.scrapeConfigs }}
{{- $job = deepCopy $job }}
{{- if gt (int $root.Values.scraper.replicas) 1 }}
{{- $shard := list
      (dict "source_labels" (list "__address__") "modulus" (int $root.Values.scraper.replicas) "target_label" "__tmp_strata_shard" "action" "hashmod")
      (dict "source_labels" (list "__tmp_strata_shard") "regex" (printf "%d" (int $.ordinal)) "action" "keep") }}
{{- $_ := set $job "relabel_configs" (concat ($job.relabel_configs | default list) $shard) }}
{{- end }}
{{- $jobs = append $jobs $job }}
{{- end }}
{{- /* `strata scraper` opens the bucket section like every service, though it only pushes. */}}
{{- $bucket := include "strata.objstore" $root | fromYaml }}
{{- toYaml (dict "server" (include "strata.serverSection" (dict "root" $root "component" "scraper") | fromYaml) "bucket" $bucket "scraper" $scraper "scrape_configs" $jobs) }}
{{- end }}

{{/* Probes on /ready at the HTTP port; call with the root context. */}}
{{- define "strata.probes" -}}
readinessProbe:
  httpGet:
    path: /ready
    port: http
    {{- if .Values.tls.secretName }}
    scheme: HTTPS
    {{- end }}
  periodSeconds: {{ .Values.probes.readiness.periodSeconds }}
  failureThreshold: {{ .Values.probes.readiness.failureThreshold }}
livenessProbe:
  httpGet:
    path: /ready
    port: http
    {{- if .Values.tls.secretName }}
    scheme: HTTPS
    {{- end }}
  periodSeconds: {{ .Values.probes.liveness.periodSeconds }}
  failureThreshold: {{ .Values.probes.liveness.failureThreshold }}
startupProbe:
  httpGet:
    path: /ready
    port: http
    {{- if .Values.tls.secretName }}
    scheme: HTTPS
    {{- end }}
  periodSeconds: {{ .Values.probes.startup.periodSeconds }}
  failureThreshold: {{ .Values.probes.startup.failureThreshold }}
{{- end }}

{{- define "strata.containerPorts" -}}
ports:
  - name: http
    containerPort: {{ .Values.ports.http }}
    protocol: TCP
  - name: grpc
    containerPort: {{ .Values.ports.grpc }}
    protocol: TCP
{{- end }}

{{/*
Deployment of a bucket service (ingester, querier, compactor); call with
(dict "root" $ "component" "ingester" "replicas" N "strategy" "RollingUpdate").
*/}}
{{- define "strata.bucketServiceDeployment" -}}
{{- $root := .root }}
{{- $c := .component }}
{{- $v := index $root.Values $c }}
{{- $ctx := dict "root" $root "component" $c }}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "strata.componentName" $ctx }}
  labels:
    {{- include "strata.labels" $ctx | nindent 4 }}
spec:
  replicas: {{ .replicas }}
  strategy:
    type: {{ .strategy }}
  selector:
    matchLabels:
      {{- include "strata.selectorLabels" $ctx | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "strata.selectorLabels" $ctx | nindent 8 }}
      annotations:
        checksum/config: {{ include (print $root.Template.BasePath "/secret.yaml") $root | sha256sum }}
        {{- with $v.podAnnotations }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
    spec:
      serviceAccountName: {{ include "strata.serviceAccountName" $root }}
      automountServiceAccountToken: false
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      containers:
        - name: {{ $c }}
          image: {{ include "strata.image" $root }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          args:
            - {{ $c }}
            - -config
            - /etc/strata/{{ $c }}.yaml
          {{- include "strata.containerPorts" $root | nindent 10 }}
          {{- include "strata.probes" $root | nindent 10 }}
          {{- with $root.Values.bucket.envFromSecret }}
          envFrom:
            - secretRef:
                name: {{ . }}
          {{- end }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          volumeMounts:
            - name: config
              mountPath: /etc/strata
              readOnly: true
            {{- if include "strata.filesystemBucket" $root }}
            - name: bucket
              mountPath: {{ $root.Values.bucket.filesystem.mountPath }}
            {{- end }}
            {{- if and (eq $c "querier") $root.Values.querier.diskCache.enabled }}
            - name: disk-cache
              mountPath: {{ $root.Values.querier.diskCache.mountPath }}
            {{- end }}
            {{- with (include "strata.securityMounts" $root) }}
            {{- . | trim | nindent 12 }}
            {{- end }}
      volumes:
        - name: config
          secret:
            secretName: {{ include "strata.componentName" (dict "root" $root "component" "config") }}
            items:
              - key: {{ $c }}.yaml
                path: {{ $c }}.yaml
        {{- with (include "strata.securityVolumes" $root) }}
        {{- . | trim | nindent 8 }}
        {{- end }}
        {{- if include "strata.filesystemBucket" $root }}
        - name: bucket
          persistentVolumeClaim:
            claimName: {{ include "strata.bucketClaimName" $root }}
        {{- end }}
        {{- if and (eq $c "querier") $root.Values.querier.diskCache.enabled }}
        - name: disk-cache
          emptyDir:
            sizeLimit: {{ $root.Values.querier.diskCache.sizeLimit }}
        {{- end }}
      {{- with $v.nodeSelector }}
      nodeSelector:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.tolerations }}
      tolerations:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.affinity }}
      affinity:
        {{- toYaml . | nindent 8 }}
      {{- end }}
{{- end }}

{{/* ClusterIP Service with the http and grpc ports; call with (dict "root" $ "component" C "service" S). */}}
{{- define "strata.service" -}}
{{- $ctx := dict "root" .root "component" .component }}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "strata.componentName" $ctx }}
  labels:
    {{- include "strata.labels" $ctx | nindent 4 }}
  {{- with .service.annotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  type: {{ .service.type | default "ClusterIP" }}
  {{- if .headless }}
  clusterIP: None
  {{- end }}
  selector:
    {{- include "strata.selectorLabels" $ctx | nindent 4 }}
  ports:
    - name: http
      port: {{ .root.Values.ports.http }}
      targetPort: http
      protocol: TCP
    - name: grpc
      port: {{ .root.Values.ports.grpc }}
      targetPort: grpc
      protocol: TCP
{{- end }}
