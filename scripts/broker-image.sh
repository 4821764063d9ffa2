#!/usr/bin/env bash
# Builds the in-cluster broker's container image (issue 39 item 3) without pulling a base image:
# its root file system is made of Debian packages, fetched with apt-get download and unpacked
# with dpkg-deb, from the machine's own Debian release (so the C library matches the one the
# binary was linked against), plus the broker's binary. The image is written as an OCI image
# layout (https://github.com/opencontainers/image-spec: oci-layout, index.json, blobs), which
# `skopeo copy oci:DIR docker://REGISTRY/…` or `podman load` publish or load as it is.
#
#   scripts/broker-image.sh [--binary PATH] [--out DIR] [--tag TAG]
#
#   --binary  the corral-vdi-broker to put in (default: the release build in
#             $CARGO_TARGET_DIR/release, built by `make broker-image`)
#   --out     where to write DIR/rootfs (the unpacked tree) and DIR/oci (the image layout)
#             (default: dist/broker-image)
#   --tag     the image's tag in index.json (default: the workspace's version)
#
# Prints the image manifest's digest (sha256:…), which `corral-vdi broker install --image
# REGISTRY/corral-vdi-broker@sha256:…` pins. The same inputs give the same digest: files are
# stored sorted, owned by root, with fixed modes (umask 022), dated at $SOURCE_DATE_EPOCH, else at
# the last commit's time.
#
# What runs in it is what broker/broker.yaml's Deployment asks for: /usr/bin/corral-vdi-broker
# as user 65532 (no /etc/passwd entry needed), reading the pod's ServiceAccount token and CA at
# /var/run/secrets/kubernetes.io/serviceaccount (in-cluster configuration).
set -euo pipefail
cd "$(dirname "$0")/.."
umask 022

TARGET="${CARGO_TARGET_DIR:-target}"
CACHE="${CORRAL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/corral-vdi}"
binary="$TARGET/release/corral-vdi-broker"
out="dist/broker-image"
tag=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    *) echo "usage: scripts/broker-image.sh [--binary PATH] [--out DIR] [--tag TAG]" >&2; exit 2 ;;
  esac
done
[ -x "$binary" ] || { echo "broker-image: $binary is missing: build it (cargo build --release -p corral-vdi-broker)" >&2; exit 1; }

# What the binary links against (ldd: libc, libm, libgcc_s, the loader) comes from these two
# packages; nothing else is in the image.
PACKAGES=(libc6 libgcc-s1)
arch=$(dpkg --print-architecture)
debs="$CACHE/broker-image/debs-$arch"
mkdir -p "$debs"
# As root, apt fetches as root into the cache (its sandbox user `_apt` could not write there).
sandbox_user=()
[ "$(id -u)" = 0 ] && sandbox_user=(-o APT::Sandbox::User=root)
rootfs="$out/rootfs"
rm -rf "$out"
mkdir -p "$rootfs"
for pkg in "${PACKAGES[@]}"; do
  # The version the binary was linked against where installed and still in the archive, else
  # the archive's (a newer C library runs what an older one linked); each version fetched once
  # (the cache; apt-get download's file names quote an epoch's colon as %3a).
  installed=$(dpkg-query -W -f='${Version}' "$pkg:$arch" 2>/dev/null || true)
  candidate=$(apt-cache policy "$pkg:$arch" | sed -n 's/^  Candidate: //p')
  [ -n "$candidate" ] && [ "$candidate" != "(none)" ] \
    || { echo "broker-image: apt knows no $pkg for $arch: run apt-get update" >&2; exit 1; }
  deb=""
  for version in $installed $candidate; do
    deb=$(ls "$debs/${pkg}_${version/:/%3a}_"*.deb 2>/dev/null | head -n1 || true)
    if [ -z "$deb" ] && (cd "$debs" && apt-get download -qq ${sandbox_user[@]+"${sandbox_user[@]}"} "$pkg:$arch=$version" 2>/dev/null); then
      deb=$(ls "$debs/${pkg}_${version/:/%3a}_"*.deb | head -n1)
    fi
    [ -z "$deb" ] || break
  done
  [ -n "$deb" ] || { echo "broker-image: could not download $pkg ($installed or $candidate) for $arch" >&2; exit 1; }
  dpkg-deb -x "$deb" "$rootfs"
done
# Documentation is not needed to run; the packages' copyright files stay with what they cover.
find "$rootfs/usr/share/doc" -type f ! -name copyright -delete 2>/dev/null || true
rm -rf "$rootfs/usr/share/lintian" "$rootfs/usr/share/locale"
install -D -m 0755 "$binary" "$rootfs/usr/bin/corral-vdi-broker"
# The mount points a pod's containers get, and a /tmp; the root file system is read-only at run.
mkdir -p "$rootfs/var/run/secrets/kubernetes.io/serviceaccount" "$rootfs/tmp" "$rootfs/proc" \
  "$rootfs/sys" "$rootfs/dev" "$rootfs/etc"
chmod 1777 "$rootfs/tmp"
printf 'root:x:0:0:root:/:/usr/sbin/nologin\nnonroot:x:65532:65532:nonroot:/:/usr/sbin/nologin\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"

# The OCI image layout: one layer (the root file system as a gzipped tar), its config, the
# manifest, and index.json naming it with the tag.
oci="$out/oci"
blobs="$oci/blobs/sha256"
mkdir -p "$blobs"
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
layer_tar="$out/layer.tar"
tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner -C "$rootfs" -cf "$layer_tar" .
diff_id=$(sha256sum "$layer_tar" | cut -d' ' -f1)
gzip -n -c "$layer_tar" >"$out/layer.tar.gz"
rm "$layer_tar"
layer=$(sha256sum "$out/layer.tar.gz" | cut -d' ' -f1)
layer_size=$(stat -c %s "$out/layer.tar.gz")
mv "$out/layer.tar.gz" "$blobs/$layer"

created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
config=$(jq -cn --arg arch "$arch" --arg diff "sha256:$diff_id" --arg created "$created" '{
  created: $created, architecture: $arch, os: "linux",
  config: {
    User: "65532:65532",
    Entrypoint: ["/usr/bin/corral-vdi-broker"],
    Cmd: ["--lease-seconds", "15"],
    ExposedPorts: {"8080/tcp": {}, "8081/tcp": {}},
    Labels: {"org.opencontainers.image.source": "https://github.com/corral-vdi/corral-vdi-console",
             "org.opencontainers.image.title": "corral-vdi-broker"}
  },
  rootfs: {type: "layers", diff_ids: [$diff]}
}')
printf '%s' "$config" >"$out/config.json"
config_digest=$(sha256sum "$out/config.json" | cut -d' ' -f1)
config_size=$(stat -c %s "$out/config.json")
mv "$out/config.json" "$blobs/$config_digest"

manifest=$(jq -cn --arg c "sha256:$config_digest" --argjson cs "$config_size" \
  --arg l "sha256:$layer" --argjson ls "$layer_size" '{
  schemaVersion: 2,
  mediaType: "application/vnd.oci.image.manifest.v1+json",
  config: {mediaType: "application/vnd.oci.image.config.v1+json", digest: $c, size: $cs},
  layers: [{mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", digest: $l, size: $ls}]
}')
printf '%s' "$manifest" >"$out/manifest.json"
manifest_digest=$(sha256sum "$out/manifest.json" | cut -d' ' -f1)
manifest_size=$(stat -c %s "$out/manifest.json")
mv "$out/manifest.json" "$blobs/$manifest_digest"

printf '{"imageLayoutVersion":"1.0.0"}' >"$oci/oci-layout"
jq -cn --arg m "sha256:$manifest_digest" --argjson ms "$manifest_size" --arg tag "$tag" \
  --arg arch "$arch" '{
  schemaVersion: 2,
  mediaType: "application/vnd.oci.image.index.v1+json",
  manifests: [{mediaType: "application/vnd.oci.image.manifest.v1+json", digest: $m, size: $ms,
               platform: {architecture: $arch, os: "linux"},
               annotations: {"org.opencontainers.image.ref.name": $tag}}]
}' >"$oci/index.json"

echo "broker-image: $oci ($arch, tag $tag, layer $((layer_size / 1024)) KiB)" >&2
echo "sha256:$manifest_digest"
