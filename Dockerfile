# nemo container image.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse HEAD) -t nemo .
#
# VERSION and COMMIT are stamped into the binary (-X main.version,
# -X main.commit), so the image's `nemo --version` names the tag and the
# commit it was built from: the go tool cannot read them here, since
# .dockerignore leaves .git out of the context (-buildvcs=false says so).
# cmd/nemo TestDockerfileStampsVersion builds with these ldflags and runs
# --version.
#
# The final image is distroless static (no shell, no libc: the binary is
# built with CGO_ENABLED=0) and runs as the distroless "nonroot" user
# (65532). As a Kubernetes sidecar it needs nothing else: the application
# reaches the listeners on 127.0.0.1 inside the pod. To use the image as a
# standalone emulator with `docker run -p`, make the frontends listen on all
# interfaces, e.g.
#   docker run -p 10002:10002 -e NEMO_LISTEN_AZURE_TABLE=0.0.0.0:10002 \
#     -v nemo-data:/var/lib/nemo nemo
# and keep the admin port (pprof, /quitquitquit) unpublished: it refuses a
# non-loopback address unless NEMO_LISTEN_ADMIN_ALLOW_REMOTE=true.
#
# Where the data goes. The image sets no NEMO_* variable: nemo reads the
# environment above its configuration file, so a data directory set here
# would silently beat every file's backend.embedded.data_dir (a Kubernetes
# ConfigMap's included), and a WAL meant for a mounted volume would land on
# the container's own layer, or fail on a read-only root. Instead nemo runs
# in /var/lib/nemo, owned by the nonroot user, so its default data directory
# (./nemo-data: the embedded store, the WAL, the node id of exclusive mode)
# is /var/lib/nemo/nemo-data, writable in a plain `docker run`. Mount a
# volume at /var/lib/nemo to keep it (a new named volume takes the
# directory's owner; a bind mount must be writable by 65532). A file or
# variable that sets data_dir or wal.dir wins as documented; the examples in
# k8s/ mount their volume at /var/lib/nemo and set data_dir to it
# (k8s/README.md, "The image and the data directory"). Earlier images kept
# their data in /data (set by ENV): to run this one on a volume they wrote,
# mount it and set NEMO_BACKEND_EMBEDDED_DATA_DIR to where it is mounted, or
# nemo will not find the WAL it left.
#
# Base images are pinned by digest (the tag says what it is, the digest
# which build): golang:1.26.8 as docker-library/repo-info lists it
# (repos/golang/remote/1.26.8.md), distroless static-debian12:nonroot as
# published on gcr.io. To update one, change both the tag and the digest
# (docker buildx imagetools inspect IMAGE:TAG prints the digest);
# cmd/nemo TestDockerfilePinsBaseImages fails on a FROM without a digest.

FROM golang:1.26.8@sha256:9d2f36f06329b2a141b9db99ffa32765cf695ee57b813ca29e245e8670bcbfff AS build
WORKDIR /src
# Modules first, so a source change does not re-download them.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false \
      -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
      -o /out/nemo ./cmd/nemo \
 && mkdir -p /out/var-lib-nemo

FROM gcr.io/distroless/static-debian12:nonroot@sha256:d093aa3e30dbadd3efe1310db061a14da60299baff8450a17fe0ccc514a16639
COPY --from=build /out/nemo /nemo
# The working directory, owned by nonroot, holds the default data directory
# ./nemo-data (see "Where the data goes" above). Created by COPY --chown,
# since a WORKDIR that creates its directory makes it root's.
COPY --from=build --chown=65532:65532 /out/var-lib-nemo /var/lib/nemo
WORKDIR /var/lib/nemo
USER 65532:65532
# Azure Table frontend, Datastore frontend, probes and /metrics
# (listen.http). The admin listener (9090) stays on loopback.
EXPOSE 10002 8081 9091
ENTRYPOINT ["/nemo"]
CMD ["serve"]
