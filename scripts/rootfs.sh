#!/usr/bin/env bash
# rootfs.sh DIR lays out in DIR the whole filesystem of claimd's image, and
# nothing else: a static claimd (pure Go: SQLite is modernc, so CGO_ENABLED=0
# costs nothing), the CA bundle (rediss:// and PostgreSQL sslmode=verify-full
# need it), a passwd entry for the unprivileged user, and the two directories
# claimd may write to. The Dockerfile's last stage copies DIR onto scratch;
# cmd/claimd's image test runs this same script and starts claimd chrooted
# in DIR as that user, so the test and the image cannot drift apart.
#
# VERSION (default dev) is stamped into the binary (claimd version).
set -euo pipefail

dir=${1:?usage: rootfs.sh DIR}
version=${VERSION:-dev}
cd "$(dirname "$0")/.."

# The uid and gid the image runs as: distroless's "nonroot", so policies
# written for distroless images (runAsUser 65532) fit this one too.
uid=65532

mkdir -p "$dir/etc/ssl/certs" "$dir/data" "$dir/tmp"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$dir/claimd" ./cmd/claimd
cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
printf 'nonroot:x:%d:%d:nonroot:/nonexistent:/sbin/nologin\n' "$uid" "$uid" >"$dir/etc/passwd"
printf 'nonroot:x:%d:\n' "$uid" >"$dir/etc/group"
chmod 0755 "$dir/claimd"
chmod 1777 "$dir/tmp"
# /data holds the embedded tiers (no --postgres-url); only the runtime user
# writes there. Ownership needs root (the image build runs as root).
if [[ $(id -u) -eq 0 ]]; then
	chown "$uid:$uid" "$dir/data"
fi
chmod 0700 "$dir/data"
