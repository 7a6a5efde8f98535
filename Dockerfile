# pybroker in a container: one broker listening on 9092, data in the /var/lib/pybroker volume.
#
#   docker build -t pybroker .
#   docker run -p 9092:9092 -v pybroker-data:/var/lib/pybroker pybroker
#
# The broker advertises localhost:9092; for other clients mount your own server.properties over
# /etc/pybroker/server.properties (or pass `--override advertised.listeners=...` after the image name).
# tests/integration/test_cli_docker.py replays the COPY and pip steps and the CMD and HEALTHCHECK
# commands below outside Docker, so keep them in these simple forms.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/pybroker
COPY pyproject.toml README.md ./
COPY pybroker ./pybroker
COPY config ./config
RUN pip install --no-cache-dir . \
    && mkdir -p /etc/pybroker /var/lib/pybroker/data \
    && sed -e 's|^listeners=.*|listeners=PLAINTEXT://0.0.0.0:9092|' \
           -e 's|^schema.registry.listeners=.*|schema.registry.listeners=http://0.0.0.0:8081|' \
           -e 's|^log.dirs=.*|log.dirs=/var/lib/pybroker/data|' \
           config/server.properties > /etc/pybroker/server.properties \
    && echo 'advertised.listeners=PLAINTEXT://localhost:9092' >> /etc/pybroker/server.properties \
    && useradd --system --uid 1000 --home-dir /var/lib/pybroker pybroker \
    && chown -R pybroker:pybroker /var/lib/pybroker

USER pybroker
VOLUME ["/var/lib/pybroker"]
EXPOSE 9092

HEALTHCHECK --interval=30s --timeout=10s --start-period=20s --retries=3 \
    CMD ["pybroker", "broker-api-versions", "--bootstrap-server", "localhost:9092", "--command-timeout", "5000"]

CMD ["pybroker", "serve", "/etc/pybroker/server.properties"]
