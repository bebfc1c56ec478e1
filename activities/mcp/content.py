"""A tool result as the model reads it: text as is, binary content summarised, never inlined."""

from __future__ import annotations

import json
from typing import assert_never

from mcp.types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from ...contract.bounds import valid_text


def _decoded_size(data: str) -> int:
    """Bytes a base64 string decodes to, without decoding it."""
    return len(data.rstrip("=")) * 3 // 4


def _block_text(block: ContentBlock) -> str:
    match block:
        case TextContent():
            return block.text
        case ImageContent() | AudioContent():
            return f"[{block.type} {block.mime_type}, {_decoded_size(block.data)} bytes]"
        case EmbeddedResource(resource=TextResourceContents() as resource):
            return resource.text
        case EmbeddedResource(resource=BlobResourceContents() as resource):
            mime = resource.mime_type or "unknown type"
            return f"[resource {resource.uri} ({mime}), {_decoded_size(resource.blob)} bytes]"
        case ResourceLink():
            return f"[resource link: {block.uri}]"
    assert_never(block)


def result_text(result: CallToolResult) -> str:
    """The observation for a result: its blocks one per line, or its structured content as JSON."""
    parts = [_block_text(block) for block in result.content]
    has_text = any(isinstance(block, TextContent) for block in result.content)
    if result.structured_content is not None and not has_text:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return valid_text("\n".join(parts))  # a server's "\ud800" is valid JSON, not valid text


def progress_text(progress: float, total: float | None, message: str | None) -> str:
    """An MCP progress notification as a `tool_progress` line: its message, and how far."""
    done = f"{progress:g}" + (f"/{total:g}" if total is not None else "")
    message = valid_text(message).strip() if isinstance(message, str) else ""
    return f"{message} ({done})" if message else done
