# tasklift's container image: a build stage with the Rust toolchain, and a slim
# Debian runtime holding only the `tasklift` binary, run as an unprivileged user.
#
#   podman build --format docker -t tasklift .   (or docker build; podman's default
#                                                 OCI format drops the HEALTHCHECK)
#   podman run -p 127.0.0.1:8080:8080 -v tasklift-data:/data tasklift \
#       serve --upstream http://mcp-server:9000/mcp
#
# Configuration: /etc/tasklift/tasklift.toml (deploy/container/tasklift.toml:
# listen 0.0.0.0:8080, data in /data), any TASKLIFT_* variable or flag over it
# (docs/configuration.md), or a file of your own mounted over it. A stdio server
# goes after `--` (`serve -- /app/server --stdio`), in an image built FROM this one.
#
# The base images are arguments so that a build without a registry can use bases
# made locally (scripts/check-container makes both from Debian packages). The
# build stage needs cargo on the PATH, a C compiler (ring, mimalloc) and CA
# certificates, which the runtime copies.
ARG BUILD_IMAGE=docker.io/library/rust:1.95-slim-bookworm
ARG RUNTIME_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${BUILD_IMAGE} AS build
# Extra arguments for `cargo build`. Empty for the published image: the release
# profile, fat LTO and one codegen unit (about 12 minutes on 2 cores). CI builds a
# lighter one (`--offline --config profile.release.lto=false ...`, see
# scripts/check-container) to check the image in about a minute; it is the same
# binary otherwise, at a lower optimisation level.
ARG CARGO_FLAGS=""
# What `tasklift --version` names: the build context has no .git (.dockerignore),
# so pass the commit, e.g. --build-arg TASKLIFT_COMMIT=$(git rev-parse --short=12 HEAD).
ARG TASKLIFT_COMMIT=""
WORKDIR /src
COPY . .
# The target directory and the crates.io downloads are cache mounts: kept between
# builds on the same machine, never in a layer.
RUN --mount=type=cache,id=tasklift-target,target=/src/target \
    --mount=type=cache,id=tasklift-cargo-registry,target=/usr/local/cargo/registry \
    cargo build --locked --release --bin tasklift ${CARGO_FLAGS} \
    && install -D -m 0755 target/release/tasklift /out/tasklift

FROM ${RUNTIME_IMAGE}
# The system's roots, for https upstreams and PostgreSQL over TLS.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/tasklift /usr/local/bin/tasklift
COPY deploy/container/tasklift.toml /etc/tasklift/tasklift.toml
# A fixed uid and gid, the ones deploy/kubernetes gives the pod (runAsUser,
# fsGroup: 65532), so the volume is writable there as it is here.
RUN groupadd --system --gid 65532 tasklift \
    && useradd --system --uid 65532 --gid 65532 --home-dir /data --no-create-home \
       --shell /usr/sbin/nologin tasklift \
    && mkdir -p /data \
    && chown 65532:65532 /data
ENV TASKLIFT_CONFIG=/etc/tasklift/tasklift.toml
USER 65532:65532
WORKDIR /data
# The task store (sled and result files) and principal.key: keep it on a volume.
VOLUME /data
EXPOSE 8080
# `tasklift health` GETs /healthz on the address the configuration listens on.
HEALTHCHECK --interval=30s --timeout=5s --start-period=5s --retries=3 \
    CMD ["tasklift", "health"]
# SIGTERM lets running calls and tasks finish for [server] shutdown_grace (10 s):
# give `podman stop`/`docker stop` (-t) and Kubernetes more than that.
STOPSIGNAL SIGTERM
ENTRYPOINT ["tasklift"]
CMD ["serve"]
