FROM python:3.11-slim
WORKDIR /opt/pybroker
COPY pyproject.toml README.md ./
COPY pybroker ./pybroker
COPY spark_jobs ./spark_jobs
COPY config ./config
RUN pip install --no-cache-dir .
EXPOSE 9092
VOLUME ["/var/lib/pybroker"]
ENTRYPOINT ["pybroker", "serve", "config/server.properties", "--override", "listeners=PLAINTEXT://0.0.0.0:9092", "--override", "log.dirs=/var/lib/pybroker"]
