"""Payloads over HTTP: a tool call's whole result (the console's download), and Temporal's codec
endpoints (`/codec/encode`, `/codec/decode`), through which the Temporal UI shows histories whose
payloads `AGENT_PAYLOAD_KEYS` seals: to whoever may read every conversation, and nobody else.
The UI's origin (`AGENT_TEMPORAL_UI_URL`) may call these two from its pages (`api.guard`)."""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Path, Request, Response
from google.protobuf import json_format
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from temporalio.api.common.v1 import Payloads

from ...client.cases import full_result
from ...client.payloads import ClearCodec
from ..access import Forbidden, Principal
from ..bodies import StrictJsonRoute
from ..deps import Cid, Conversations, Who, allowed
from ..errors import errors, unprocessable

router = APIRouter(tags=["payloads"], route_class=StrictJsonRoute)
MAX_CODEC_PAYLOADS = 10_000


# base64, standard or URL-safe, padded or not (as protobuf's JSON reads it)
Base64 = Annotated[str, StringConstraints(
    pattern=r"^(?:[A-Za-z0-9+/_-]{4})*(?:[A-Za-z0-9+/_-]{2,3}={0,2})?$")]


class ExternalPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sizeBytes: int = Field(default=0, ge=0, le=2**53)  # noqa: N815 (Temporal's JSON name; JSON-safe)


class CodecPayload(BaseModel):
    """A payload as Temporal's JSON writes it: metadata values and data in base64, and for a
    reference to a stored payload the size of what it refers to."""

    model_config = ConfigDict(extra="forbid")
    metadata: dict[str, Base64] = {}
    data: Base64 = ""
    externalPayloads: list[ExternalPayload] = []  # noqa: N815 (Temporal's JSON name)


class CodecBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    payloads: list[CodecPayload] = Field(max_length=MAX_CODEC_PAYLOADS)


@router.get("/conversations/{cid}/results/{call_id}", response_class=Response,
            responses={**errors(404, 502, 503),
                       200: {"content": {"text/plain": {}}, "description": "the result"}})
async def result(cid: Cid, call_id: Annotated[str, Path(max_length=128)], s: Conversations,
                 _: Annotated[None, allowed("read")]) -> Response:
    """A tool call's result, whole where the model was shown it cut (read by reference from the
    history, as `agent result` does), as a file to download."""
    found = await full_result(s, cid, call_id)
    return Response(found.text, media_type="text/plain; charset=utf-8", headers={
        "Content-Disposition": f"attachment; filename*=UTF-8''{quote(call_id)}.txt",
        "X-Result-Whole": "true" if found.whole else "false"})


async def _coded(request: Request, body: CodecBody, who: Principal, encode: bool) -> Any:
    if not who.sees_all:
        raise Forbidden(f"{who.describe()} may not read every conversation, which the codec "
                        "would show")
    try:
        payloads = json_format.ParseDict(body.model_dump(exclude_defaults=True), Payloads())
    except json_format.ParseError as err:
        return unprocessable([{"loc": ["body", "payloads"], "msg": str(err)[:200],
                               "type": "value_error"}])
    codec = request.app.state.client.data_converter.payload_codec or ClearCodec()
    done = await (codec.encode if encode else codec.decode)(list(payloads.payloads))
    return json_format.MessageToDict(Payloads(payloads=done))


@router.post("/codec/encode", responses=errors(403, 413, 503))
async def codec_encode(request: Request, body: CodecBody, who: Who) -> Any:
    """Temporal's codec endpoint: payloads sealed as this deployment seals them."""
    return await _coded(request, body, who, encode=True)


@router.post("/codec/decode", responses=errors(403, 413, 503))
async def codec_decode(request: Request, body: CodecBody, who: Who) -> Any:
    """Temporal's codec endpoint: sealed payloads opened (for the Temporal UI); a payload
    sealed with a key AGENT_PAYLOAD_KEYS does not list is a 503 that names the key."""
    return await _coded(request, body, who, encode=False)
