#!/usr/bin/env bash
# The system packages the tests drive: Debian's chromium (the pages, through Playwright, which
# downloads no browser here) and PostgreSQL (the memory store's second backend). Installs what
# is missing with apt-get, once; does nothing when both are there. `make test` and .ci/run call it.
set -euo pipefail

missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null || missing+=(postgresql)
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null; then
    echo "missing: ${missing[*]}, and there is no apt-get to install them with; install them by hand" >&2
    exit 1
fi
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
echo "Installing ${missing[*]} with apt-get (the tests' browser and database) ..."
lock=(-o DPkg::Lock::Timeout=300)  # apt run by something else on the machine
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get "${lock[@]}" update -qq
"${sudo[@]}" apt-get "${lock[@]}" install -y -qq "${missing[@]}" >/dev/null
