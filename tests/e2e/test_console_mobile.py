"""The web console on a phone: chromium with a 390 px wide touch screen, driven by Playwright.

At a phone's width the console shows one pane at a time: the inbox and the conversation list,
or one conversation (with a link back), and the page scrolls rather than its panes. A person
opens a waiting conversation from the inbox, edits a call's arguments and approves them with
taps, and answers a choice question; nothing overflows the screen sideways, nothing overlaps,
the conversation's id is shown whole, and every control needed is on screen and takes the tap.
The desktop layout stays two panes. The tests write docs/screenshots/phone-*.png.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from urllib.parse import quote

import pytest_asyncio
from playwright.async_api import Browser, Locator, Page, expect
from playwright.async_api import Error as PlaywrightError

from durable_react_agent.testing import ScriptedModelServer, ScriptedReply
from tests.api_support import ApiServer
from tests.browser_support import PHONE
from tests.console_support import VIEWPORT, Console, call, screenshot, status_of
from tests.helpers import note_rows, script, tool_call, unique


@pytest_asyncio.fixture
async def phone(browser: Browser) -> AsyncIterator[Console]:
    context = await browser.new_context(**PHONE)
    try:
        yield Console(await context.new_page())
    finally:
        await context.close()


# ----- what a phone's screen must hold -----

async def fits_sideways(page: Page) -> None:
    """Nothing wider than the screen: the page does not scroll sideways."""
    widths = await page.evaluate("""() => ({
        inner: window.innerWidth,
        doc: document.documentElement.scrollWidth,
        body: document.body.scrollWidth,
        wider: [...document.querySelectorAll('body *')]
          .filter((el) => el.getClientRects().length
                          && el.getBoundingClientRect().right > window.innerWidth + 0.5
                          && !el.closest('.audit, pre, textarea'))
          .map((el) => el.dataset.testid || el.className || el.tagName).slice(0, 5),
    })""")
    assert widths["inner"] == 390, widths
    assert widths["doc"] <= widths["inner"] and widths["body"] <= widths["inner"], widths
    assert widths["wider"] == [], widths


async def on_screen(page: Page, control: Locator) -> None:
    """The control is brought into view, lies wholly within the screen, is not covered by
    anything at its centre (a tap there reaches it), and is big enough for a finger."""
    size = page.viewport_size
    for _ in range(20):  # a view that re-renders (the audit trail, on a stream event, the inbox
        await expect(control).to_be_visible()  # on a poll) may replace or move the element
        try:  # between two looks at it: it is looked at again, as a person's eye would
            await control.scroll_into_view_if_needed()
            box = await control.bounding_box()
            hit = await control.evaluate("""(el) => {
                const r = el.getBoundingClientRect();
                const at = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
                const labels = el.labels ? [...el.labels] : [];
                return at === el || el.contains(at) || labels.some((label) => label.contains(at));
            }""")
        except PlaywrightError as err:
            if "not attached" not in str(err):
                raise
            box = None
        if box is not None and hit and box["y"] >= 0 and box["y"] + box["height"] <= size["height"] + 0.5:
            break  # settled where a tap lands; a control that stays covered fails below
        await asyncio.sleep(0.1)
    assert box is not None
    assert box["x"] >= 0 and box["x"] + box["width"] <= size["width"] + 0.5, box
    assert box["y"] >= 0 and box["y"] + box["height"] <= size["height"] + 0.5, box
    assert hit, f"{control} is covered where a tap would land"
    assert box["height"] >= 20 and box["width"] >= 20, box


async def shown_whole(page: Page, element: Locator) -> None:
    """Its text is neither clipped nor cut short with an ellipsis: it wraps if it must."""
    await expect(element).to_be_visible()
    clipped = await element.evaluate("""(el) => {
        const r = el.getBoundingClientRect();
        const style = getComputedStyle(el);
        return {scroll: el.scrollWidth, client: el.clientWidth, left: r.left, right: r.right,
                scrollHeight: el.scrollHeight, clientHeight: el.clientHeight,
                cut: style.whiteSpace === 'nowrap' && style.overflowX !== 'visible'};
    }""")
    assert clipped["scroll"] <= clipped["client"], clipped
    assert clipped["scrollHeight"] <= clipped["clientHeight"], clipped
    assert clipped["left"] >= 0 and clipped["right"] <= page.viewport_size["width"] + 0.5, clipped
    assert not clipped["cut"], clipped  # one line, cut off when longer: it must wrap instead


async def stacked(page: Page, *selectors: str) -> None:
    """The visible ones follow each other down the page: no two overlap (measured at once)."""
    boxes = await page.evaluate("""(selectors) => selectors.map((selector) => {
        const el = document.querySelector(selector);
        const r = el && el.getClientRects().length ? el.getBoundingClientRect() : null;
        return r && {selector, top: r.top, bottom: r.bottom, left: r.left, right: r.right};
    }).filter(Boolean)""", list(selectors))
    assert len(boxes) >= 2, boxes
    for upper, lower in zip(boxes, boxes[1:], strict=False):
        assert upper["bottom"] <= lower["top"] + 0.5, (upper, lower)
    for box in boxes:
        assert box["left"] >= 0 and box["right"] <= page.viewport_size["width"] + 0.5, box


async def one_conversation(page: Page, cid: str) -> None:
    """The conversation fills the screen: the list and the inbox are not shown beside it (or
    under it), its id is whole, and the header, chat, what waits and the composer are stacked."""
    conversation = page.get_by_test_id("conversation")
    await expect(conversation).to_have_attribute("data-id", cid)
    await expect(page.get_by_test_id("conversation-list")).to_be_hidden()
    await expect(page.get_by_test_id("inbox")).to_be_hidden()
    await expect(page.get_by_test_id("back")).to_be_visible()
    box = await conversation.bounding_box()
    assert box["x"] >= 0 and box["x"] + box["width"] <= 390.5, box
    title = page.get_by_test_id("conversation-id")
    await expect(title).to_have_text(cid)
    await shown_whole(page, title)
    await stacked(page, ".topbar", ".conv-head", '[data-testid="facts"]', ".tabs",
                  '[data-testid="chat"]', '[data-testid="pending"]', '[data-testid="composer"]')
    await fits_sideways(page)


async def the_list(page: Page) -> None:
    """The inbox and the list fill the screen, with no conversation pane over them."""
    await expect(page.get_by_test_id("inbox")).to_be_visible()
    await expect(page.get_by_test_id("conversation-list")).to_be_visible()
    await expect(page.get_by_test_id("main")).to_be_hidden()
    await stacked(page, ".topbar", ".inbox-section", '[data-testid="new-conversation"]',
                  '[data-testid="conversation-list"]')
    await fits_sideways(page)


# ----- the tests -----

async def test_phone_inbox_and_an_approval_with_edited_args(
        api: ApiServer, model: ScriptedModelServer, activity_settings, phone: Console):
    trigger, edited = unique("phone"), unique("Groceries-edited")
    script(model, trigger,
           ScriptedReply(content="I'll keep that as a note.",
                         tool_calls=[tool_call("create_note",
                                               {"title": "Groceries", "body": "milk, eggs"})]),
           ScriptedReply(content="Done: {last_tool}"))
    page = phone.page
    await page.goto(f"{api.url}/")
    await the_list(page)
    await on_screen(page, page.get_by_test_id("start"))
    cid = await phone.start(f"Keep a note of the groceries ({trigger}).")
    await one_conversation(page, cid)
    card = page.get_by_test_id("approval-card")
    await expect(card.get_by_test_id("approval-args")).to_contain_text('"title": "Groceries"')

    # Back to the inbox, which lists it while it waits; it opens the conversation again.
    await on_screen(page, page.get_by_test_id("back"))
    await page.get_by_test_id("back").tap()
    waiting = page.get_by_test_id("inbox").locator(f'[data-id="{cid}"]')
    await expect(waiting).to_contain_text("waits for approval")
    await the_list(page)
    await on_screen(page, waiting)
    await shown_whole(page, waiting.locator(".conv-id"))
    await page.evaluate("window.scrollTo(0, 0)")
    await screenshot(page, "phone-inbox.png")
    await waiting.tap()
    await one_conversation(page, cid)

    # The args editor, and every control of the card, on screen and tappable.
    card = page.get_by_test_id("approval-card")
    await on_screen(page, card.get_by_test_id("edit-args"))
    await card.get_by_test_id("edit-args").tap()
    editor = card.get_by_test_id("args-editor")
    await expect(editor).to_have_value('{\n  "title": "Groceries",\n  "body": "milk, eggs"\n}')
    for control in ("args-editor", "approve", "edit-args", "reject-reason", "reject"):
        await on_screen(page, card.get_by_test_id(control))
    await expect(card.get_by_test_id("approve")).to_have_text("Approve with these args")
    await fits_sideways(page)

    await editor.fill(json.dumps({"title": 7, "body": "milk, eggs"}, indent=2))
    await card.get_by_test_id("approve").tap()  # refused in the page: nothing is sent
    await expect(card.get_by_test_id("args-error")).to_contain_text("title: must be string")
    await on_screen(page, card.get_by_test_id("args-error"))
    assert phone.posted(cid, "confirm") == []
    await editor.fill(json.dumps({"title": edited, "body": "milk, eggs, bread"}, indent=2))
    await expect(card.get_by_test_id("args-error")).to_be_hidden()
    await card.evaluate("(el) => el.scrollIntoView({block: 'end'})")
    await fits_sideways(page)
    await screenshot(page, "phone-approval.png")
    await card.get_by_test_id("approve").tap()

    # The edited call ran: the answer says so, the note holds it, the audit trail records it.
    chat = page.get_by_test_id("chat")
    final = chat.get_by_test_id("final-answer")
    await expect(final).to_contain_text("Done: Created note #")
    await expect(final).to_contain_text(edited)
    await expect(page.get_by_test_id("approval-card")).to_have_count(0)
    assert [body.get("args") for body in phone.posted(cid, "confirm")] == [
        {"title": edited, "body": "milk, eggs, bread"}]
    rows = note_rows(activity_settings.data_dir, edited)
    assert len(rows) == 1 and rows[0][2] == "milk, eggs, bread"
    tool = chat.get_by_test_id("tool-card")
    await expect(tool).to_have_attribute("data-status", "ok")
    await expect(tool.get_by_test_id("tool-args")).to_contain_text(edited)
    await one_conversation(page, cid)
    await on_screen(page, final)

    await page.get_by_test_id("tab-audit").tap()
    action = page.get_by_test_id("audit").locator(
        '[data-testid="audit-action"][data-tool="create_note"]')
    await expect(action).to_contain_text(edited)
    await expect(action.get_by_test_id("audit-decision")).to_contain_text("approved by anonymous")
    await on_screen(page, action)
    await fits_sideways(page)
    audit = await page.get_by_test_id("audit").evaluate("(el) => [el.scrollWidth, el.clientWidth]")
    assert audit[0] <= audit[1], audit  # the trail reads down the screen, not sideways
    assert phone.errors == []


async def test_phone_answers_a_choice_question(
        api: ApiServer, model: ScriptedModelServer, phone: Console):
    """A conversation with a long id, started elsewhere, waits for an answer: the phone opens it
    from the inbox, shows its id whole, and a tapped choice lets the conversation go on."""
    trigger = unique("phone-ask")
    script(model, trigger,
           ScriptedReply(content="One thing first.",
                         tool_calls=[tool_call("ask_choice", {
                             "message": "Which colour should the shed be painted?",
                             "options": ["red", "sage green", "midnight blue"]})]),
           ScriptedReply(content="Painting it {last_tool}."))
    cid = f"shed-painting-{unique('question')}-{'0123456789abcdef' * 2}"
    started = await call("POST", f"{api.url}/conversations",
                         json={"prompt": f"Plan the shed ({trigger}).", "id": cid})
    assert started.status_code == 201, started.text
    page = phone.page
    await page.goto(f"{api.url}/")
    waiting = page.get_by_test_id("inbox").locator(f'[data-id="{cid}"]')
    await expect(waiting).to_contain_text("waits for an answer")
    await the_list(page)
    await shown_whole(page, waiting.locator(".conv-id"))
    await waiting.tap()
    await one_conversation(page, cid)

    form = page.get_by_test_id("answer-form")
    await expect(form).to_have_attribute("data-kind", "choice")
    await expect(form.get_by_test_id("question-text")).to_have_text(
        "Which colour should the shed be painted?")
    for option in await form.get_by_test_id("answer-option").all():
        await on_screen(page, option)
    await on_screen(page, form.get_by_test_id("answer-submit"))
    await form.get_by_label("sage green").tap()
    await expect(form.get_by_label("sage green")).to_be_checked()
    await form.evaluate("(el) => el.scrollIntoView({block: 'end'})")
    await fits_sideways(page)
    await screenshot(page, "phone-question.png")
    await form.get_by_test_id("answer-submit").tap()

    chat = page.get_by_test_id("chat")
    await expect(chat.get_by_test_id("answer")).to_contain_text("sage green")
    await expect(chat.get_by_test_id("final-answer")).to_contain_text("sage green")
    await expect(page.get_by_test_id("answer-form")).to_have_count(0)
    await expect(page.get_by_test_id("status")).to_have_attribute("data-status", "idle")
    assert [a["values"] for a in phone.posted(cid, "answer")] == [["sage green"]]
    assert (await status_of(api.url, cid))["status"] == "idle"
    await one_conversation(page, cid)
    await on_screen(page, page.get_by_test_id("message-input"))
    await on_screen(page, page.get_by_test_id("send"))

    # Back to the list: the inbox no longer holds it.
    await page.get_by_test_id("back").tap()
    await the_list(page)
    await expect(page.get_by_test_id("inbox").locator(f'[data-id="{cid}"]')).to_have_count(0)
    assert phone.errors == []


async def test_desktop_keeps_two_panes(api: ApiServer, browser: Browser):
    """On a desktop the list stays beside the conversation, and there is no back link."""
    context = await browser.new_context(viewport=VIEWPORT)
    try:
        desktop = Console(await context.new_page())
        page = desktop.page
        cid = unique("desktop-layout")
        await page.goto(f"{api.url}/#/c/{quote(cid)}")
        await expect(page.get_by_test_id("conversation")).to_have_attribute("data-id", cid)
        await expect(page.get_by_test_id("back")).to_be_hidden()
        await expect(page.get_by_test_id("conversation-list")).to_be_visible()
        side = await page.locator(".sidebar").bounding_box()
        main = await page.get_by_test_id("main").bounding_box()
        assert side["width"] == 330 and side["x"] + side["width"] <= main["x"], (side, main)
        assert abs(side["height"] - main["height"]) < 1, (side, main)  # both down to the bottom
        assert abs(side["y"] + side["height"] - VIEWPORT["height"]) < 1, (side, main)
        title = await page.get_by_test_id("conversation-id").evaluate(
            "(el) => getComputedStyle(el).whiteSpace")
        assert title == "nowrap"
        assert desktop.errors == []
    finally:
        await context.close()
