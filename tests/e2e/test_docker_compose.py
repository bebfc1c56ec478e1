"""docker-compose.yml cannot be started here (no Docker engine), so check what can be checked:
it parses, pins its images, and agrees with the code's defaults."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from durable_react_agent.activities.memory import url_from_env
from durable_react_agent.activities.settings import (
    DEFAULT_FORECAST_URL,
    DEFAULT_GEOCODING_URL,
    ActivitySettings,
)
from durable_react_agent.api.settings import ApiSettings, SettingsError
from durable_react_agent.client.connection import TemporalSettings
from durable_react_agent.client.payloads import PayloadSettings
from durable_react_agent.contract.memory import DEFAULT_MAX_PER_OWNER, DEFAULT_RECALL
from durable_react_agent.worker.app import workflow_sandbox
from durable_react_agent.worker.deployment import version_from
from tests.helpers import LAYERS, ROOT

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
ENV_DEFAULT = re.compile(r"^\$\{(\w+):-(.*)\}$")


def default_of(value: str) -> str:
    """`${VAR:-default}` → default; a literal stays as it is."""
    match = ENV_DEFAULT.match(str(value))
    return match.group(2) if match else str(value)


def test_the_stack_has_its_services_with_pinned_images():
    assert set(SERVICES) == {"postgresql", "memory-postgresql", "temporal", "temporal-ui",
                             "worker", "api"}
    for name in ("postgresql", "memory-postgresql", "temporal", "temporal-ui"):
        image = SERVICES[name]["image"]
        assert re.match(r"^[\w./-]+:\d+(\.\d+)+$", image), f"{name} image not pinned: {image}"
    assert SERVICES["temporal"]["image"].startswith("temporalio/auto-setup:")
    assert SERVICES["temporal"]["environment"]["DB"] == "postgres12"
    assert SERVICES["temporal"]["environment"]["POSTGRES_SEEDS"] == "postgresql"


def test_ports_match_the_local_defaults():
    host, port = TemporalSettings().address.rsplit(":", 1)
    assert f"127.0.0.1:{port}:7233" in SERVICES["temporal"]["ports"]
    # the UI where the dev server has it
    assert "127.0.0.1:8233:8080" in SERVICES["temporal-ui"]["ports"]
    assert SERVICES["temporal-ui"]["environment"]["TEMPORAL_ADDRESS"] == "temporal:7233"


def test_every_port_is_published_on_loopback_only():
    """Temporal's frontend and UI take no token: published on all interfaces, anyone who
    reaches the host could approve any write, bypassing the API's tokens."""
    published = [(name, p) for name, service in SERVICES.items()
                 for p in service.get("ports", [])]
    assert published
    for name, port in published:
        assert isinstance(port, str) and port.startswith("127.0.0.1:") and port.count(":") == 2, \
            f"{name} publishes {port!r} beyond loopback"


def test_worker_is_built_here_configured_by_env_and_scalable():
    worker = SERVICES["worker"]
    assert worker["build"]["dockerfile"] == "Dockerfile" and (ROOT / "Dockerfile").exists()
    assert "container_name" not in worker and "ports" not in worker  # so --scale worker=3 works
    env = worker["environment"]
    assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
    defaults = ActivitySettings()
    assert default_of(env["AGENT_TASK_QUEUE"]) == TemporalSettings().task_queue
    assert default_of(env["TEMPORAL_NAMESPACE"]) == TemporalSettings().namespace
    assert default_of(env["OPENAI_MODEL"]) == defaults.openai_model
    assert default_of(env["OPEN_METEO_GEOCODING_URL"]) == DEFAULT_GEOCODING_URL
    assert default_of(env["OPEN_METEO_FORECAST_URL"]) == DEFAULT_FORECAST_URL
    assert float(default_of(env["AGENT_CONTEXT_CACHE_MB"])) * 2**20 == defaults.context_cache_bytes
    assert workflow_sandbox(default_of(env["AGENT_WORKFLOW_SANDBOX"])) is False
    assert version_from(None, None, {name: default_of(env[name]) for name in (
        "AGENT_DEPLOYMENT", "AGENT_BUILD_ID")}) is None  # unversioned unless both are set
    for variable in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENT_MCP_CONFIG", "AGENT_A2A_AGENTS",
                     "AGENT_DATA_DIR",
                     "AGENT_AUTO_APPROVE", "AGENT_PROFILES", "AGENT_PRICES", "AGENT_FOUR_EYES",
                     "OTEL_EXPORTER_OTLP_ENDPOINT", "AGENT_METRICS_ADDRESS", "AGENT_MODELS",
                     "AGENT_WEBHOOKS", "AGENT_PUBLIC_URL", "AGENT_LINK_SECRET"):
        assert variable in env
    assert "/data" in env["AGENT_DATA_DIR"] and any(v.endswith(":/data") for v in worker["volumes"])


def test_dockerfile_runs_the_worker_from_the_installed_project():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert dockerfile.startswith("# ") and "FROM python:3.11" in dockerfile
    assert 'CMD ["agent-worker"]' in dockerfile
    for package in ("durable_react_agent", *LAYERS):
        assert f"COPY {package} ./{package}" in dockerfile
    # run where no source folder of ours shadows the installed durable_react_agent
    installed = dockerfile.index("pip install --no-cache-dir .")
    assert "rm -rf /src" in dockerfile[installed:] and "WORKDIR /app" in dockerfile[installed:]


def test_the_api_is_built_here_and_needs_tokens_off_loopback():
    api = SERVICES["api"]
    assert api["build"]["dockerfile"] == "Dockerfile"
    assert api["command"] == ["agent-api"]
    env = api["environment"]
    assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert default_of(env["AGENT_TASK_QUEUE"]) == TemporalSettings().task_queue
    host, port = env["AGENT_API_ADDRESS"].rsplit(":", 1)
    assert f"127.0.0.1:{port}:{port}" in api["ports"]
    # It listens on the container's network, so without tokens it refuses to start.
    with pytest.raises(SettingsError, match="without AGENT_API_TOKENS"):
        ApiSettings.from_env({"AGENT_API_ADDRESS": env["AGENT_API_ADDRESS"],
                              "AGENT_API_TOKENS": default_of(env["AGENT_API_TOKENS"])})
    assert ApiSettings.from_env({"AGENT_API_ADDRESS": env["AGENT_API_ADDRESS"],
                                 "AGENT_API_TOKENS": "alice:t"}).tokens.find("t").name == "alice"
    assert "AGENT_API_TOKENS_FILE" in env and "AGENT_TRACE_URL" in env
    assert "AGENT_LINK_SECRET" in env


def test_memory_runs_on_a_postgresql_of_its_own_read_by_the_workers_and_the_api():
    memory = SERVICES["memory-postgresql"]
    assert memory["image"].startswith("postgres:") and memory is not SERVICES["postgresql"]
    assert any(v.startswith("memory-data:") for v in memory["volumes"]) and "ports" not in memory
    urls = set()
    for name in ("worker", "api"):
        env = {k: default_of(v) for k, v in SERVICES[name]["environment"].items()}
        assert "memory-postgresql" in SERVICES[name]["depends_on"]
        assert url_from_env(env) == env["AGENT_MEMORY_URL"]
        urls.add(env["AGENT_MEMORY_URL"].replace("${MEMORY_POSTGRES_PASSWORD:-memory}", "memory"))
    [url] = urls
    parts = urlsplit(url)
    assert (parts.scheme, parts.hostname, parts.port, parts.path) == (
        "postgresql", "memory-postgresql", 5432, "/" + memory["environment"]["POSTGRES_DB"])
    assert parts.username == memory["environment"]["POSTGRES_USER"]
    assert default_of(memory["environment"]["POSTGRES_PASSWORD"]) == parts.password
    worker = {k: default_of(v) for k, v in SERVICES["worker"]["environment"].items()}
    assert (worker["AGENT_MEMORY"], int(worker["AGENT_MEMORY_RECALL"]),
            int(worker["AGENT_MEMORY_MAX"])) == ("on", DEFAULT_RECALL, DEFAULT_MAX_PER_OWNER)


def test_payloads_are_kept_and_sealed_alike_by_the_worker_and_the_api_and_read_in_the_ui():
    """One store and one key list for both (the api reads back what the worker kept), the
    store's default the shared volume, and the UI's codec endpoint the api's published port."""
    worker, api = SERVICES["worker"]["environment"], SERVICES["api"]["environment"]
    for variable in ("AGENT_PAYLOAD_STORE", "AGENT_PAYLOAD_THRESHOLD_BYTES", "AGENT_PAYLOAD_KEYS",
                     "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                     "AWS_ENDPOINT_URL_S3", "AGENT_DATA_DIR"):
        assert worker[variable] == api[variable], variable
    settings = PayloadSettings.from_env({name: default_of(value) for name, value in api.items()})
    assert settings.path == Path("/data/payloads") and settings.keys == {}
    assert settings.threshold_bytes == PayloadSettings().threshold_bytes
    assert "agent-data:/data" in SERVICES["api"]["volumes"]
    ui = SERVICES["temporal-ui"]["environment"]
    assert default_of(ui["TEMPORAL_CODEC_ENDPOINT"]) == "http://localhost:8000/codec"
    assert "127.0.0.1:8000:8000" in SERVICES["api"]["ports"]
    assert default_of(api["AGENT_TEMPORAL_UI_URL"]) == "http://localhost:8233"  # its origin
