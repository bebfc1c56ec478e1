"""The web console in a real browser: a page of it (`Console`), and the API called as the page
does (not collected: no `test_` prefix). The `console` fixture is in conftest.py."""

from __future__ import annotations

import json
import os
import re
from urllib.parse import quote, unquote

import httpx
from playwright.async_api import Page, Request, expect

from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.api_support import ROOT
from tests.helpers import script, tool_call, unique

SCREENSHOTS = ROOT / "docs" / "screenshots"
# The docs' screenshots are written again only when asked: a test run leaves the tree as it was.
UPDATE_SCREENSHOTS = os.environ.get("UPDATE_SCREENSHOTS") == "1"
VIEWPORT = {"width": 1280, "height": 800}
WAIT_MS = 30_000

expect.set_options(timeout=WAIT_MS)


class Console:
    """A page of the console, with what it sent and every script error it raised."""

    def __init__(self, page: Page):
        self.page = page
        self.errors: list[str] = []
        self.posts: list[Request] = []
        self.streams: list[Request] = []
        page.on("pageerror", lambda err: self.errors.append(str(err)))
        page.on("request", self._sent)

    def _sent(self, request: Request) -> None:
        if request.method == "POST":
            self.posts.append(request)
        elif "/events" in request.url:
            self.streams.append(request)

    def posted(self, cid: str, action: str) -> list[dict]:
        path = f"/conversations/{quote(cid)}/{action}"
        return [json.loads(r.post_data or "null") for r in self.posts if r.url.endswith(path)]

    async def start(self, prompt: str) -> str:
        """Start a conversation from the New conversation box; the console opens it."""
        await self.page.get_by_test_id("new-prompt").fill(prompt)
        await self.page.get_by_test_id("start").click()
        await expect(self.page).to_have_url(re.compile(r"#/c/.+"))
        await expect(self.page.get_by_test_id("conversation")).to_be_visible()
        return unquote(self.page.url.split("#/c/", 1)[1])


async def sign_in(page: Page, url: str, token: str) -> None:
    """Open the console of an API with tokens, and give it `token` through its token box."""
    await page.goto(f"{url}/")
    await expect(page.get_by_test_id("token-box")).to_be_visible()
    await page.get_by_test_id("token-input").fill(token)
    await page.get_by_test_id("token-save").click()
    await expect(page.get_by_test_id("token-box")).to_be_hidden()


async def screenshot(page: Page, name: str) -> None:
    """The page as docs/screenshots/`name` shows it, with UPDATE_SCREENSHOTS=1."""
    if UPDATE_SCREENSHOTS:
        await page.screenshot(path=SCREENSHOTS / name)


async def call(method: str, url: str, **kwargs) -> httpx.Response:
    """The API, asynchronously: the tests' worker runs on this event loop, so a blocking call
    would keep it from answering the API's queries."""
    async with httpx.AsyncClient(timeout=20) as http:
        return await http.request(method, url, **kwargs)


async def status_of(api_url: str, cid: str) -> dict:
    return (await call("GET", f"{api_url}/conversations/{quote(cid)}")).json()


async def as_if_asked(console: Console, api_url: str, model: ScriptedModelServer,
                      question: dict, **status: object) -> tuple[dict, list[dict]]:
    """The console's page of a new conversation that waits on a question (`ask_input`), shown
    as if that question were `question` (over the one it has), and the rest of its status
    `status`: the conversation's status and answer routes are served from here, and the page
    reloaded. Returns the status shown, and what the page posts as answers or declines (each
    taken)."""
    trigger = script(model, unique("as-if-asked"),
                     ScriptedReply(tool_calls=[tool_call("ask_input", {"message": "?"})]),
                     ScriptedReply(content="ok"))
    page = console.page
    await page.goto(f"{api_url}/")
    cid = await console.start(f"Ask me ({trigger}).")
    await expect(page.get_by_test_id("answer-form")).to_have_attribute("data-kind", "input")
    shown = await status_of(api_url, cid)
    shown["pending_question"].update(question)
    shown.update(status)
    await page.route(f"**/conversations/{quote(cid)}", lambda route: route.fulfill(json=shown))
    posted: list[dict] = []

    async def answered(route) -> None:
        posted.append(route.request.post_data_json)
        await route.fulfill(json={"request_id": "r", "accepted": True})

    for said in ("answer", "decline"):
        await page.route(f"**/conversations/{quote(cid)}/{said}", answered)
    await page.reload()
    return shown, posted
