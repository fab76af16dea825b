# Certeasy's container image: the `dist` build (whole-program optimised) on Debian slim,
# run as an unprivileged user.
#   docker build -t certeasy .
#   docker run -p 14000:14000 -p 14002:14002 -v certeasy-data:/var/lib/certeasy certeasy
# Without a config file the built-in defaults apply (config/certeasy.yaml): the ACME listener on
# 0.0.0.0:14000, the admin listener (metrics, /healthz, /readyz, admin API) on 127.0.0.1:14001,
# and the data directory ./data, here /var/lib/certeasy/data, in the volume.
FROM rust:1.95-bookworm AS build
WORKDIR /src
# The whole context: .dockerignore keeps CA keys (ca/, *.key), tokens, secrets/, data/ and
# target/ out of it, so no secret reaches this stage's layers or the builder's cache.
COPY . .
RUN cargo build --profile dist --locked -p certeasy

FROM debian:bookworm-slim
# ca-certificates: the system trust store; curl: the health check's HTTP client.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 certeasy \
    && useradd --system --uid 10001 --gid certeasy --home-dir /var/lib/certeasy \
       --shell /usr/sbin/nologin certeasy \
    && install -d -o certeasy -g certeasy -m 0700 /var/lib/certeasy
COPY --from=build /src/target/dist/certeasy /usr/local/bin/certeasy
USER certeasy:certeasy
WORKDIR /var/lib/certeasy
# The SQLite database, the CA keys (0600), the admin token and the unpause key live here.
VOLUME ["/var/lib/certeasy"]
# 14000: ACME over HTTPS. 14002: CRLs over plain HTTP (crl.listen). 14001: the admin listener, which binds 127.0.0.1 unless
# server.admin-listen says otherwise (its /admin/* API needs the bearer token either way).
EXPOSE 14000 14001 14002
# /readyz answers 200 once the database answers; it is served on the admin listener, which
# listens on the container's loopback, where the health check runs. A config that moves the
# admin listener must change this (docker run --health-cmd ...).
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:14001/readyz"]
ENTRYPOINT ["certeasy"]
CMD ["serve"]
