#!/usr/bin/env bash
# build-image.sh REF OUT.tar ENTRYPOINT_JSON [CMD_JSON]
# Writes an OCI image-layout tar of a busybox-static root file system (no registry needed),
# named REF (fully qualified, e.g. localhost/busybox:1.36), for `ctr images import` or
# `rudder image import`. Needs bash, tar, sha256sum, jq and /bin/busybox (busybox-static).
set -euo pipefail
ref=$1 out=$2 entrypoint=$3 cmd=${4:-null}
busybox=$(readlink -f /bin/busybox)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root"/{bin,etc,proc,sys,dev,tmp,www,root}
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
echo "hello from $ref" > "$root/www/index.html"
chmod 1777 "$root/tmp"
layout=$work/layout
mkdir -p "$layout/blobs/sha256"
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$root" -cf "$work/layer.tar" .
layer=$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
layer_size=$(stat -c %s "$work/layer.tar")
mv "$work/layer.tar" "$layout/blobs/sha256/$layer"
jq -cn --argjson ep "$entrypoint" --argjson cmd "$cmd" --arg layer "sha256:$layer" '{
  architecture: "amd64", os: "linux",
  config: {Entrypoint: $ep, Cmd: $cmd, Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], WorkingDir: "/"},
  rootfs: {type: "layers", diff_ids: [$layer]}}' > "$work/config.json"
config=$(sha256sum "$work/config.json" | cut -d' ' -f1)
config_size=$(stat -c %s "$work/config.json")
mv "$work/config.json" "$layout/blobs/sha256/$config"
jq -cn --arg config "sha256:$config" --argjson csize "$config_size" --arg layer "sha256:$layer" --argjson lsize "$layer_size" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json",
  config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $config, size: $csize},
  layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar", digest: $layer, size: $lsize}]}' > "$work/manifest.json"
manifest=$(sha256sum "$work/manifest.json" | cut -d' ' -f1)
manifest_size=$(stat -c %s "$work/manifest.json")
mv "$work/manifest.json" "$layout/blobs/sha256/$manifest"
jq -cn --arg m "sha256:$manifest" --argjson size "$manifest_size" --arg ref "$ref" --arg tag "${ref##*:}" '{
  schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json",
  manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $m, size: $size,
    annotations: {"io.containerd.image.name": $ref, "org.opencontainers.image.ref.name": $tag}}]}' > "$layout/index.json"
echo '{"imageLayoutVersion":"1.0.0"}' > "$layout/oci-layout"
tar --sort=name --mtime=@0 --owner=0 --group=0 -C "$layout" -cf "$out" .
