import asyncio
import os
import sys

from client.cli import run


def main() -> None:
    try:
        code = asyncio.run(run(sys.argv[1:]))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without interpreter teardown: the Temporal runtime can abort there (sdk-python #300).
    os._exit(code)


if __name__ == "__main__":
    main()
