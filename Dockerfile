# claimd's image: a static binary on scratch, run as an unprivileged user.
#
#   make image                      # docker build, or buildah where docker is absent
#   docker run --rm -p 127.0.0.1:50051:50051 -p 127.0.0.1:8080:8080 claimd:dev
#
# The default command is a development mode: it serves without TLS or
# authentication (--insecure, a warning at every start), for a container
# published on the host's loopback as above. Production passes serve's own
# flags after the image name (TLS, an auth file, the tiers), as the Helm
# chart does; the default command is then unused.
#
# The filesystem of the last stage is laid out by scripts/rootfs.sh, which
# cmd/claimd's image test also runs: the test starts that exact tree in a
# chroot as uid 65532 and calls it (see docs/scaling.md, "The image").
#
# Health: there is no shell or probe binary in the image, so no HEALTHCHECK.
# Probe gRPC's grpc.health.v1 from outside: Kubernetes' native gRPC probes
# (deploy/helm/claimd does), `grpcurl -plaintext HOST:50051
# grpc.health.v1.Health/Check`, or HTTP GET /healthz (live) and /readyz (the
# durable tier answers) on the HTTP port.

ARG GO_VERSION=1.26.8

# Fully qualified: buildah and podman resolve no short names by default.
FROM docker.io/library/golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so a source change does not download them again. The Go
# client's and the generated API's go.mod come too: claimd's go.mod replaces
# those modules with their directories, so the module graph reads them.
COPY go.mod go.sum ./
COPY clients/go/go.mod clients/go/go.sum ./clients/go/
COPY gen/go.mod gen/go.sum ./gen/
RUN go mod download
COPY . .
ARG VERSION=dev
RUN VERSION=${VERSION} ./scripts/rootfs.sh /rootfs && mkdir -m 0700 /data

FROM scratch
COPY --from=build /rootfs /
# /data holds the embedded tiers (no --postgres-url). COPY gives files to
# root; copied onto a path that does not exist yet, the directory itself
# takes the --chown owner.
COPY --from=build --chown=65532:65532 /data /data
USER 65532:65532
# gRPC, then HTTP (the API over HTTP/JSON, Connect and gRPC-Web; /metrics,
# /healthz, /readyz).
EXPOSE 50051 8080
ENTRYPOINT ["/claimd"]
# Development mode (see the top): every interface, because inside a
# container loopback is unreachable from the host; --insecure, because
# claimd refuses a non-loopback listener without TLS and authentication
# otherwise. With no --postgres-url the embedded tiers live in /data (mount
# a volume). cmd/claimd's image test runs this command as written.
CMD ["serve", "--listen", "0.0.0.0:50051", "--http-listen", "0.0.0.0:8080", "--data-dir", "/data", "--insecure"]
