# nemo container image.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t nemo .
#
# The final image is distroless static (no shell, no libc: the binary is
# built with CGO_ENABLED=0) and runs as the distroless "nonroot" user
# (65532). As a Kubernetes sidecar it needs nothing else: the application
# reaches the listeners on 127.0.0.1 inside the pod. To use the image as a
# standalone emulator with `docker run -p`, make the frontends listen on all
# interfaces, e.g.
#   docker run -p 10002:10002 -e NEMO_LISTEN_AZURE_TABLE=0.0.0.0:10002 nemo
# and keep the admin port (pprof, /quitquitquit) unpublished.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so a source change does not re-download them.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/nemo ./cmd/nemo \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/nemo /nemo
# The default data directory (embedded store and WAL), writable by nonroot.
# In Kubernetes mount an emptyDir or a PersistentVolumeClaim here.
COPY --from=build --chown=65532:65532 /out/data /data
ENV NEMO_BACKEND_EMBEDDED_DATA_DIR=/data
USER 65532:65532
# Azure Table frontend, Datastore frontend, admin (health, metrics).
EXPOSE 10002 8081 9090
ENTRYPOINT ["/nemo"]
CMD ["serve"]
