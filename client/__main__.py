import asyncio
import os
import sys

from .cli import run

# What a shell reports for a tool whose reader went away (128 + SIGPIPE): `status ID | head`.
PIPE_CLOSED = 141


def main() -> None:
    try:
        code = asyncio.run(run(sys.argv[1:]))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except BrokenPipeError:  # the reader of our output has gone: stop quietly, as Unix tools do
        code = PIPE_CLOSED
    except SystemExit:  # argparse's --help or bad usage, before anything connected: as usual
        _flush()
        raise
    if not _flush():
        code = PIPE_CLOSED
    # Leave without interpreter teardown: the Temporal runtime can abort there (sdk-python #300).
    os._exit(code)


def _flush() -> bool:
    """Flush what was printed; False if a reader has gone. What is left for that reader then
    goes to /dev/null, so that no later flush (the interpreter's at exit) fails again."""
    flushed = True
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
            flushed = False
    return flushed


if __name__ == "__main__":
    main()
