#!/usr/bin/env bash
# image-smoke.sh builds the image's last stage with buildah where no registry
# can be reached (the Dockerfile's build stage pulls golang), runs the
# Dockerfile's own CMD in a real container (runc) as the image's user, and
# calls it: gRPC health must answer SERVING and a claim ACQUIRED. The CMD
# listens on the fixed ports 50051 and 8080 and the container shares the
# host's network, so those must be free. Needs root, buildah and runc
# (apt-get install buildah runc) and the pinned grpcurl (make grpcurl).
# Not part of make test; docs/scaling.md says why and what it showed.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
store=(--root "$work/storage" --runroot "$work/run" --storage-driver vfs)
ctr=""
pid=""
cleanup() {
	if [[ -n $pid ]]; then
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	if [[ -n $ctr ]]; then
		buildah "${store[@]}" rm "$ctr" >/dev/null 2>&1 || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

# The same two COPY steps as the Dockerfile's last stage.
./scripts/rootfs.sh "$work/rootfs"
mkdir -m 0700 "$work/data"
ctr=$(buildah "${store[@]}" from scratch)
buildah "${store[@]}" copy "$ctr" "$work/rootfs" / >/dev/null
buildah "${store[@]}" copy --chown 65532:65532 "$ctr" "$work/data" /data >/dev/null
buildah "${store[@]}" config --user 65532:65532 --entrypoint '["/claimd"]' "$ctr"

# The Dockerfile's CMD, word for word: buildah run takes no default command.
mapfile -t cmd < <(sed -n 's/^CMD \[\(.*\)\]$/\1/p' Dockerfile | tr -d '"' | tr ',' '\n' | sed 's/^ *//')
[[ ${cmd[0]:-} == serve ]] || { echo "image-smoke: no CMD [\"serve\", ...] in the Dockerfile" >&2; exit 1; }
port=50051
buildah "${store[@]}" run --network host "$ctr" /claimd "${cmd[@]}" >"$work/log" 2>&1 &
pid=$!
for _ in $(seq 100); do
	grep -q '"claimd serving"' "$work/log" && break
	sleep 0.1
done
grpcurl=${GRPCURL:-$(command -v grpcurl || echo "${XDG_CACHE_HOME:-$HOME/.cache}/claimd-tools/bin/grpcurl")}
"$grpcurl" -plaintext "127.0.0.1:$port" grpc.health.v1.Health/Check | grep -q SERVING
"$grpcurl" -plaintext -d '{"namespace":"smoke","provider":"stripe","event_id":"evt_smoke"}' \
	"127.0.0.1:$port" idempotency.v1.ClaimService/Claim | grep -q OUTCOME_ACQUIRED
curl -sf http://127.0.0.1:8080/healthz >/dev/null
uid=$(ps -eo uid=,args= | awk '$2 == "/claimd" && $3 == "serve" { print $1; exit }')
[[ $uid == 65532 ]] || { echo "image-smoke: claimd runs as uid '$uid', want 65532" >&2; exit 1; }
echo "image-smoke: the image's default command (${cmd[*]}) serves in a buildah/runc container as uid 65532"
