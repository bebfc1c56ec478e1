# The agent worker (and, with `agent-api`, the HTTP API and console). Build context: the
# repository root.
FROM python:3.11-slim

WORKDIR /src
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    AGENT_DATA_DIR=/data

COPY pyproject.toml setup.py README.md ./
COPY durable_react_agent ./durable_react_agent
COPY contract ./contract
COPY rules ./rules
COPY workflows ./workflows
COPY activities ./activities
COPY worker ./worker
COPY client ./client
COPY api ./api
# Installed, not run from the sources: one import root, durable_react_agent, in site-packages.
RUN pip install --no-cache-dir . && rm -rf /src && mkdir -p /data
WORKDIR /app

# SIGTERM (docker stop, scaling down) lets in-flight activities finish before the worker exits.
STOPSIGNAL SIGTERM
CMD ["agent-worker"]
