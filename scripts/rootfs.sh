#!/usr/bin/env bash
# rootfs.sh DIR lays out in DIR the filesystem of claimd's image, and nothing
# else: a static claimd (pure Go: SQLite is modernc, so CGO_ENABLED=0 costs
# nothing), the CA bundle (rediss:// and PostgreSQL sslmode=verify-full need
# it), a passwd entry for the unprivileged user, and /tmp. The one directory
# the user owns, /data, is not here: COPY gives what it copies to root, and
# a COPY --chown onto a directory that exists leaves the directory itself to
# root, so the Dockerfile creates /data with its own COPY --chown (and the
# image test with mkdir and chown). The Dockerfile's last stage copies DIR
# onto scratch; cmd/claimd's image test runs this same script and starts
# claimd chrooted in DIR as that user, so the test and the image cannot
# drift apart.
#
# VERSION (default dev) is stamped into the binary (claimd version).
set -euo pipefail

dir=${1:?usage: rootfs.sh DIR}
version=${VERSION:-dev}
cd "$(dirname "$0")/.."

# The uid and gid the image runs as: distroless's "nonroot", so policies
# written for distroless images (runAsUser 65532) fit this one too.
uid=65532

mkdir -p "$dir/etc/ssl/certs" "$dir/tmp"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$dir/claimd" ./cmd/claimd
cp /etc/ssl/certs/ca-certificates.crt "$dir/etc/ssl/certs/ca-certificates.crt"
printf 'nonroot:x:%d:%d:nonroot:/nonexistent:/sbin/nologin\n' "$uid" "$uid" >"$dir/etc/passwd"
printf 'nonroot:x:%d:\n' "$uid" >"$dir/etc/group"
chmod 0755 "$dir/claimd"
chmod 1777 "$dir/tmp"
