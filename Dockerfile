# The agent worker (and, with `python -m api`, the HTTP API and console). Build context: the
# repository root.
FROM python:3.11-slim

WORKDIR /app
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AGENT_DATA_DIR=/data

COPY pyproject.toml README.md ./
COPY contract ./contract
COPY rules ./rules
COPY workflows ./workflows
COPY activities ./activities
COPY worker ./worker
COPY client ./client
COPY api ./api
COPY scripted_model ./scripted_model
RUN pip install --no-cache-dir . && mkdir -p /data

# SIGTERM (docker stop, scaling down) lets in-flight activities finish before the worker exits.
STOPSIGNAL SIGTERM
CMD ["python", "-m", "worker"]
