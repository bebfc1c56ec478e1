"""Screenshot a trace's detail view (span tree + span details) in a local Arize Phoenix UI.

Run with the project venv (has Playwright); uses Debian's chromium, no browser download:

  /work/main/.venv/bin/python scripts/phoenix/screenshot.py \
      --phoenix-url http://127.0.0.1:6006 [--trace-id <32 hex>] [--span "chat gpt-4o-mini"] \
      --out /tmp/trace.png

Without --trace-id the most recent trace (by start time, across all projects, or within
--project) is used. Exit code 0 on success; prints the trace page URL and the output path.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.parse
import urllib.request

from playwright.sync_api import sync_playwright

TRACE_QUERY = """query($t: String!) {
  trace: getTraceByOtelId(traceId: $t) { id traceId project { id name } }
}"""


def _get_json(url: str, body: dict | None = None, timeout: float = 10.0) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.load(resp)


def find_trace(base: str, trace_id: str, wait_s: float) -> dict:
    """Return {'id', 'traceId', 'project': {'id','name'}}; polls because OTLP ingestion is async."""
    deadline = time.monotonic() + wait_s
    while True:
        res = _get_json(f"{base}/graphql", {"query": TRACE_QUERY, "variables": {"t": trace_id}})
        trace = (res.get("data") or {}).get("trace")
        if trace:
            return trace
        if time.monotonic() > deadline:
            raise SystemExit(f"trace {trace_id} not found in Phoenix at {base}: {res.get('errors')}")
        time.sleep(0.5)


def latest_trace_id(base: str, project: str | None) -> str:
    if project:
        names = [project]
    else:
        names = [p["name"] for p in _get_json(f"{base}/v1/projects?limit=1000")["data"]]
    best = None
    for name in names:
        q = urllib.parse.urlencode({"limit": 1, "sort": "start_time", "order": "desc"})
        data = _get_json(f"{base}/v1/projects/{urllib.parse.quote(name, safe='')}/traces?{q}")["data"]
        if data and (best is None or data[0]["start_time"] > best["start_time"]):
            best = data[0]
    if best is None:
        raise SystemExit(f"no traces found in Phoenix at {base}")
    return best["trace_id"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phoenix-url", default="http://127.0.0.1:6006")
    ap.add_argument("--trace-id", help="OTel trace id (32 hex chars); default: latest trace")
    ap.add_argument("--project", help="project name to pick the latest trace from")
    ap.add_argument("--span", help="name of a span to select in the tree (default: root span)")
    ap.add_argument("--out", required=True, help="output PNG path")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=900)
    ap.add_argument("--wait", type=float, default=15.0, help="seconds to wait for the trace to be ingested")
    ap.add_argument("--chromium", default="/usr/bin/chromium")
    args = ap.parse_args()

    base = args.phoenix_url.rstrip("/")
    trace_id = (args.trace_id or latest_trace_id(base, args.project)).lower()
    trace = find_trace(base, trace_id, args.wait)
    # Same URL the UI's /redirects/traces/<trace_id> route resolves to.
    url = f"{base}/projects/{trace['project']['id']}/traces/{urllib.parse.quote(trace_id)}"

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=args.chromium,
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
        )
        try:
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.goto(url, wait_until="domcontentloaded", timeout=60_000)
            tree = page.locator('[data-testid="trace-tree"]').first
            tree.wait_for(state="visible", timeout=60_000)
            # Wait until span rows (name + duration) are rendered and the details pane is up.
            page.locator('[data-testid="trace-tree"] [data-testid="span-controls"]').first.wait_for(
                state="attached", timeout=30_000
            )
            page.locator('[data-testid="span-details"]').first.wait_for(state="visible", timeout=30_000)
            if args.span:
                page.locator('[data-testid="trace-tree"]').get_by_text(args.span, exact=True).first.click()
                page.locator('[data-testid="span-details"]').get_by_text(args.span, exact=True).first.wait_for(
                    state="visible", timeout=15_000
                )
            try:
                page.wait_for_load_state("networkidle", timeout=10_000)
            except Exception:
                pass
            page.wait_for_timeout(500)  # let transitions/fonts settle
            page.screenshot(path=args.out)
        finally:
            browser.close()
    print(url)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
