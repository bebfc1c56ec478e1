"""The `python -m client` commands a person is shown to paste (the CLI, `watch`, the Temporal UI's
current details): every argument quoted for a POSIX shell, so that a line runs as the one command
it shows, whatever a model named its call or a person named a conversation."""

from __future__ import annotations

import shlex

CLIENT = ("python", "-m", "client")
REASON, TEXT = '--reason "..."', '"..."'  # placeholders a person fills in


def client_command(*args: str, then: str = "") -> str:
    """`python -m client ARGS...`, each argument quoted; `then`, a fixed placeholder of ours
    (`--reason "..."`), is appended as it is."""
    line = " ".join(shlex.quote(a) for a in (*CLIENT, *args))
    return f"{line} {then}" if then else line


def code_span(text: str) -> str:
    """`text` as one Markdown code span whatever it holds (the Temporal UI renders the details
    as Markdown: a model's text shown bare could be a link, or close our spans early): fenced
    by more backticks than its longest run of them, as CommonMark reads it."""
    longest = run = 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    # padded by a space at each end (which CommonMark takes off again) where it would touch the
    # fence or begin and end with spaces of its own; an empty text is a space (no span is empty)
    touches = text.startswith("`") or text.endswith("`")
    spaced = text.startswith(" ") and text.endswith(" ") and text.strip(" ") != ""
    pad = " " if touches or spaced else ""
    fence = "`" * (longest + 1)
    return f"{fence}{pad}{text}{pad}{fence}" if text else "` `"
