"""The JSON files a worker's settings name (AGENT_PROFILES, AGENT_MODELS, AGENT_WEBHOOKS), read
the one way: parsed, checked against their model, and refused with why."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def read_config(path: Path, schema: type[M], variable: str, error: type[ValueError]) -> M:
    """The file `variable` names, as `schema`; `error` says why it cannot be used."""
    try:
        return schema.model_validate(json.loads(path.read_text()))
    except OSError as err:
        raise error(f"cannot read {variable} {path}: {err.strerror or err}") from None
    except (json.JSONDecodeError, ValidationError) as err:
        raise error(f"{variable} {path} cannot be used: {err}") from None
