'''Write your own tools for the durable ReAct agent: everything a tool module imports.

```python
# acme_tools.py, anywhere on the worker's PYTHONPATH; run the worker with AGENT_TOOLS=acme_tools
from durable_react_agent import tool, ToolContext, ToolError, NeedsInput

@tool                                     # safe and idempotent unless told otherwise
def add(a: int, b: int = 0) -> int:
    """Add two integers.

    Args:
        a: the first addend
        b: the second addend
    """
    return a + b

@tool(risk="sensitive", keyed=True, timeout_s=20)
async def send_sms(to: str, text: str, ctx: ToolContext) -> str:
    """Send one SMS."""
    ...  # send under ctx.idempotency_key, so that a retry after a crash sends nothing twice
```

- The schema is the signature: pydantic builds the arguments from the type hints (`int`, `str`,
  `Literal`, `Enum`, `Optional`, lists, pydantic models, `Annotated[..., Field(...)]`, defaults).
  A tool whose one argument is a pydantic model takes that model's fields as its arguments.
- The description is the docstring's first paragraph; an argument's is its entry in the
  docstring's `Args:` section (Google, NumPy or Sphinx style), unless `Field(description=...)`
  gives one.
- A parameter typed `ToolContext` receives the call's context: `ctx.idempotency_key`,
  `ctx.answer`, `ctx.heartbeat(details)`, `ctx.progress("...")`, `ctx.http`, `ctx.settings`.
- A sync function runs in a thread, an async one on the worker's loop.
- The result is what the model reads: a `str` as it is, anything else as compact JSON (`None`
  becomes `null`); a long one is cut to the conversation's bound.
- `raise ToolError("...")` tells the model what went wrong; `raise NeedsInput("Which one?",
  options=[...])` asks the human, and the tool runs again with `ctx.answer`. Any other exception
  is retried (when the tool is idempotent or keyed) and then reported as a failure.

The worker imports the modules named in `AGENT_TOOLS` (comma-separated) and those of installed
packages that declare the entry-point group `durable_react_agent.tools`.
'''

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .activities.tools.function_tool import tool
    from .activities.tools.registry import NeedsInput, ToolContext, ToolError

__all__ = ["NeedsInput", "ToolContext", "ToolError", "tool"]

# Imported when first asked for, not with the package: every layer is a subpackage of this
# one, and the workflow's own modules (imported afresh in Temporal's sandbox) must not bring
# the tool API's I/O with them.
_WHERE = {"tool": ".activities.tools.function_tool", "NeedsInput": ".activities.tools.registry",
          "ToolContext": ".activities.tools.registry", "ToolError": ".activities.tools.registry"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(_WHERE[name], __name__), name)
