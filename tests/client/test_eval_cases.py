"""Case files as an eval reads them (`client.evals.load_cases`), hostile ones included: any file
ends in cases an eval can run and score, or in a usage error (exit 2) that names the file and
says why, never in a traceback. Generated files: a good case with any part replaced by hostile
JSON (100,000 levels deep, 5,000-digit numbers, NaN, lone surrogates, anything), cut anywhere,
or any bytes at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable_react_agent.client.checks import UsageError
from durable_react_agent.client.evals import (
    Options,
    Outcome,
    junit,
    load_cases,
    missing_tools,
    report_json,
    table,
)
from durable_react_agent.contract.case import (
    MAX_CASE_BYTES,
    MAX_CASE_DEPTH,
    Case,
    CaseCall,
    CaseDecision,
    CaseStep,
    CaseTurn,
    load_case,
)
from durable_react_agent.rules.cases import RecordedTools
from durable_react_agent.rules.scores import ANSWER_MODES, CALLS_MODES, score
from tests.generated import json_values, texts
from tests.hostile_input import HOSTILE_TEXT, RAW_BODIES, nested

GOOD = Case(
    name="weather", conversation_id="c1", tools=["get_weather", "create_note"],
    turns=[CaseTurn(turn=1, message="Weather, then a note", by="alice", final_answer="Saved.")],
    steps=[CaseStep(index=1, turn=1, step=1, text="Looking.", calls=[
        CaseCall(id="c1", tool="get_weather", args={"location": "Paris"}, result="12°C",
                 status="ok"),
        CaseCall(id="c2", tool="create_note", args={"title": "Paris", "body": "12°C"},
                 result="Created note 1", status="ok", decision=CaseDecision(
                     approved=True, by="alice", edited_args={"title": "Paris!"}))]),
        CaseStep(index=2, turn=1, step=2, text="Saved.")],
    final_answer="Saved.", final_output={"saved": True})
HOLE = "\x00hole\x00"
# What may stand in a case's place, as JSON text: past every parser's limits, and odd values
FRAGMENTS = ["[" * 100_000 + "]" * 100_000, '{"a":' * 50_000 + "1" + "}" * 50_000,
             "1" * 5_000, "-" + "9" * 4_301, "9" * 4_300, "NaN", "-Infinity", "1e999", "-0",
             '"\\ud800"', '"a\\udfffb\\u0000"', "null", "true", "[]", "{}", '""', "0", "-1",
             *(json.dumps(nested(d)) for d in (60, 64, 65, MAX_CASE_DEPTH - 6, MAX_CASE_DEPTH,
                                               MAX_CASE_DEPTH + 1, 500, 900)),
             *(json.dumps(t) for t in HOSTILE_TEXT)]


def places(value: Any, path: tuple = ()) -> list[tuple]:
    """Every place in a JSON value, by its path of keys and indices."""
    found = [path]
    if isinstance(value, dict):
        found += [p for k, v in value.items() for p in places(v, (*path, k))]
    elif isinstance(value, list):
        found += [p for i, v in enumerate(value) for p in places(v, (*path, i))]
    return found


GOOD_JSON = json.loads(GOOD.dump())
PLACES = places(GOOD_JSON)


def with_hole(path: tuple, extra: bool) -> Any:
    """The good case with the value at `path` (or a new key beside it) left as a hole."""
    doc = json.loads(GOOD.dump())
    if not path:
        return HOLE
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if extra and isinstance(parent, dict):
        parent["odd key"] = HOLE
    else:
        parent[path[-1]] = HOLE
    return doc


@st.composite
def case_files(draw) -> bytes:
    kind = draw(st.sampled_from(["hole", "hole", "hole", "bytes", "text"]))
    if kind == "bytes":
        return draw(st.one_of(st.binary(max_size=300), st.sampled_from(RAW_BODIES)))
    if kind == "text":
        return draw(texts).encode("utf-8", "surrogatepass")
    fragment = draw(st.one_of(st.sampled_from(FRAGMENTS), json_values.map(json.dumps)))
    doc = with_hole(draw(st.sampled_from(PLACES)), draw(st.booleans()))
    text = json.dumps(doc).replace(json.dumps(HOLE), fragment)
    if draw(st.integers(0, 4)) == 0:
        text = text[:draw(st.integers(0, len(text)))]
    return text.encode("utf-8", "surrogatepass")


def usable(case: Case) -> None:
    """What an eval does with a loaded case before and after its run, without a server."""
    book = RecordedTools(case)
    for call in case.calls():
        book.result(call.tool, call.args)
        book.decision(call.tool, call.args)
    missing_tools([(Path("c.json"), case)], {"get_weather"})
    outcomes = [Outcome(case, Path("c.json"), "eval-x-1-c", score=score(case, case, c, a))
                for c in CALLS_MODES for a in ANSWER_MODES]  # type: ignore[arg-type]
    table(outcomes).encode()
    junit(outcomes).encode()
    json.dumps(report_json(outcomes, Options(), 1.0), ensure_ascii=False, default=str).encode()
    load_case(case.dump())


@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=case_files())
def test_any_case_file_loads_usable_or_is_refused_naming_the_file(data: bytes, tmp_path: Path):
    path = tmp_path / "hostile.json"
    path.write_bytes(data)
    try:
        [(_, case)] = load_cases([str(path)])
    except UsageError as err:
        assert str(path) in str(err) and len(str(err)) < 1000, str(err)[:2000]
    else:
        usable(case)


@pytest.mark.parametrize(("text", "said"), [
    ("[" * 100_000 + "]" * 100_000, "nests too deeply"),
    (json.dumps({**GOOD_JSON, "final_output": nested(MAX_CASE_DEPTH)}), "nests more than"),
    (GOOD.dump().replace('"version": 1', '"version": 1' + "0" * 5_000), "5,001 digits"),
])
def test_a_case_past_the_parsers_limits_is_a_usage_error_naming_the_file(
        text: str, said: str, tmp_path: Path):
    path = tmp_path / "deep.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=said) as refused:
        load_cases([str(path)])
    assert str(refused.value).startswith(str(path))


def test_a_file_larger_than_a_case_is_refused_unread(tmp_path: Path):
    path = tmp_path / "huge.json"
    with path.open("wb") as file:
        file.truncate(MAX_CASE_BYTES + 1)  # sparse: no disk spent
    with pytest.raises(UsageError, match=f"{path} is larger than 50 MiB"):
        load_cases([str(path)])


def test_lone_surrogates_in_a_case_are_made_valid_text(tmp_path: Path):
    path = tmp_path / "odd.json"
    path.write_text(GOOD.dump().replace("Weather, then a note", "Weather\\ud800"))
    [(_, case)] = load_cases([str(path)])
    assert case.turns[0].message == "Weather\ufffd"
    usable(case)
