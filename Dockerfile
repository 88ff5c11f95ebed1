# scg container image: Debian bookworm, two stages, runs as uid 10001.
#   docker build -t scg:0.2.0 .
#   docker run --rm -v $PWD/scg.yaml:/etc/scg/scg.yaml:ro -p 15003:15003 -p 9090:9090 scg:0.2.0
# The entrypoint (deploy/docker/entrypoint.sh) renders /etc/scg/scg.yaml into
# /run/scg/scg.yaml, filling in ${SCG_...} placeholders from the environment,
# and starts `scg --config /run/scg/scg.yaml`. See deploy/README.md.

# --- build: the same packages as a developer machine (scripts/setup.sh)
FROM debian:bookworm AS build
COPY scripts/setup.sh /src/scripts/setup.sh
RUN bash /src/scripts/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . /src
WORKDIR /src
ARG BUILD_JOBS=2
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release \
 && cmake --build /build -j"${BUILD_JOBS}" --target scg \
 && strip /build/scg \
 && /build/scg --version

# --- runtime: only the shared libraries scg links against
FROM debian:bookworm-slim
# The packages of the libraries `scg` needs at run time (its NEEDED entries;
# apt pulls in what those need). tests/deploy/check_manifests.py checks this
# list against the built binary.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libcaf-core0.17 libcaf-io0.17 libcaf-openssl0.17 \
      libgrpc++1.51 libgrpc29 libabsl20220623 \
      libyaml-cpp0.7 libspdlog1.10 libfmt9 libcpp-httplib0.11 \
      libjemalloc2 libssl3 libnghttp2-14 zlib1g ca-certificates \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 scg \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin scg \
 && mkdir -p /etc/scg /run/scg \
 && chown 10001:10001 /run/scg
COPY --from=build /build/scg /usr/local/bin/scg
COPY deploy/docker/entrypoint.sh /usr/local/bin/scg-entrypoint
RUN chmod 0755 /usr/local/bin/scg-entrypoint
USER 10001:10001
# 15003: Spark Connect front door; 9090: admin HTTP; 7400: cluster links.
EXPOSE 15003 9090 7400
# Assumes admin_addr on port 9090 (the default); the image has no curl.
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/9090 && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/local/bin/scg-entrypoint"]
