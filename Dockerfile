# Mercury HTTP: a wheel built in one stage, installed as a non-root user in the next.
#   docker build -t mercury-http .
#   docker run -p 4100:4100 -v mercury-data:/srv/mercury/data \
#     -e MERCURY_AUTH=static -e AUTH_STATIC_TOKENS='{"…":{"id":"alice"}}' \
#     -e OLLAMA_HOST=http://ollama:11434 mercury-http

FROM python:3.11-slim AS build
WORKDIR /src
RUN pip install --no-cache-dir build==1.6.1
COPY pyproject.toml README.md LICENSE openapi.yaml ./
COPY channel_http ./channel_http
COPY core ./core
COPY auth_providers ./auth_providers
RUN python -m build --wheel --outdir /dist

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MERCURY_DATA_DIR=/srv/mercury/data \
    HTTP_SURFACE_HOST=0.0.0.0 \
    HTTP_SURFACE_PORT=4100 \
    MERCURY_LOG_FORMAT=json
RUN groupadd --system --gid 10001 mercury \
    && useradd --system --uid 10001 --gid mercury --home-dir /srv/mercury --no-create-home mercury \
    && mkdir -p /srv/mercury/data /srv/mercury/wiki \
    && chown -R mercury:mercury /srv/mercury
COPY --from=build /dist/ /tmp/dist/
# hadolint ignore=DL3013
RUN pip install --no-cache-dir /tmp/dist/*.whl && rm -rf /tmp/dist
WORKDIR /srv/mercury
VOLUME ["/srv/mercury/data"]
USER 10001:10001
EXPOSE 4100
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('HTTP_SURFACE_PORT', '4100') + '/livez', timeout=3)"]
ENTRYPOINT ["mercury-http"]
CMD ["serve"]
