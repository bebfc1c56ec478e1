"""`AGENT_OWNER_LIMITS`, as the worker reads it: each owner's limits over the default, and a file
it cannot use refused at start with why (the worker exits 2 on it, as on any bad setting)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from durable_react_agent.activities.settings import ActivitySettings
from durable_react_agent.contract.owner import OwnerLimits


def test_an_owner_s_own_limits_stand_over_the_default(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "limits.json"
    path.write_text(json.dumps({"default": {"running_turns": 2, "daily_tokens": 1000},
                                "owners": {"alice": {"running_turns": 5}}}))
    monkeypatch.setenv("AGENT_OWNER_LIMITS", str(path))
    limits = ActivitySettings.from_env().owner_limits
    assert limits is not None
    assert limits.of("alice") == OwnerLimits(running_turns=5, daily_tokens=1000)
    assert limits.of("bob") == OwnerLimits(running_turns=2, daily_tokens=1000)
    monkeypatch.delenv("AGENT_OWNER_LIMITS")
    assert ActivitySettings.from_env().owner_limits is None  # unset: no limits, no ledger


@pytest.mark.parametrize("content, why", [
    ('{"default": {"running_turns": 0}}', "greater than or equal to 1"),
    ('{"default": {"daily_usd": -1}}', "greater than 0"),
    ('{"default": {"turns": 2}}', "Extra inputs are not permitted"),
    ('{"default": ', "cannot be used"),
])
def test_a_limits_file_the_worker_cannot_use_is_refused_with_why(
        content: str, why: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "limits.json"
    path.write_text(content)
    monkeypatch.setenv("AGENT_OWNER_LIMITS", str(path))
    with pytest.raises(ValueError, match=f"AGENT_OWNER_LIMITS {path}") as refused:
        ActivitySettings.from_env()
    assert why in str(refused.value)
    monkeypatch.setenv("AGENT_OWNER_LIMITS", str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="cannot read AGENT_OWNER_LIMITS"):
        ActivitySettings.from_env()
