"""Screenshots of the console's main views for docs/console.md.

    .venv/bin/python -m tests.console_screenshots [docs/console]

Starts a real ``tidings serve`` in a temporary folder, fills it with a little of
everything (publications, subscriptions with traffic, a failing subscriber's dead letters,
a replay held running, schemas), and photographs each view in headless Chromium at
1280x800, and the subscriptions view at a phone's width.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from playwright.async_api import Page, async_playwright

from .conftest import Endpoint, ServerProcess
from .test_console import CHROMIUM, Hook, api, principal


async def _fill(server: ServerProcess, ok: Endpoint, bad_hook: Hook, bad: Endpoint) -> None:
    await api(server, "icrc72_register_publication", [
        {"namespace": ns} for ns in ("com.shop.orders", "com.shop.payments", "com.shop.stock", "org.news.wire")
    ])
    alice = await principal(server, "alice")
    await principal(server, "bob")
    await api(server, "icrc72_register_subscription", [
        {"namespace": "com.shop.orders", "endpoint": ok.url},
        {"namespace": "com.shop.payments", "endpoint": ok.url, "mode": "oneshot"},
        {"namespace": "com.shop.stock", "endpoint": ok.url, "filter": "$.qty > 10"},
    ])
    await api(server, "icrc72_register_subscription", [{"namespace": "com.shop.orders", "endpoint": bad.url}], alice)
    bad_hook.status = 500
    await api(server, "icrc72_publish", [
        {"namespace": "com.shop.orders", "data": {"Map": [["order", {"Nat": i}], ["item", {"Text": "tea"}]]}}
        for i in range(1, 301)
    ])
    for model in ({"type": "object", "properties": {"order": {"type": "integer"}}},
                  {"type": "object", "properties": {"order": {"type": "integer", "description": "its number"}}}):
        await api(server, "register_schema", [{"name": "com.shop.order", "model": json.dumps(model)}])
    await api(server, "register_schema", [{"name": "com.shop.payment", "model": '{"type": "object"}'}])


async def _traffic(server: ServerProcess, stop: asyncio.Event) -> None:
    i = 0
    while not stop.is_set():
        i += 1
        await api(server, "icrc72_publish", [
            {"namespace": "com.shop.orders", "data": {"Map": [["order", {"Nat": 1000 + i}], ["item", {"Text": "tea"}]]}}
        ] * (1 + i % 4))
        await asyncio.sleep(0.2)


async def _shot(page: Page, out: Path, name: str) -> None:
    await page.screenshot(path=str(out / f"{name}.png"), full_page=False)
    print(out / f"{name}.png")


async def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(Path(tmp), env={"TIDINGS_MAX_ATTEMPTS": "2", "TIDINGS_RETRY_INITIAL_S": "0.05",
                                               "TIDINGS_RETRY_MAX_S": "0.1"})
        server.start()
        ok_hook, bad_hook = Hook(), Hook()
        held = Hook()
        held.hold = asyncio.Event()
        ok, bad, slow = Endpoint(ok_hook), Endpoint(bad_hook), Endpoint(held)
        for ep in (ok, bad, slow):
            await ep.start()
        stop = asyncio.Event()
        try:
            await _fill(server, ok, bad_hook, bad)
            await api(server, "icrc72_register_subscription", [{"namespace": "org.news.wire", "endpoint": slow.url}])
            await api(server, "icrc72_publish", [{"namespace": "org.news.wire", "data": {"Text": f"story {i}"}}
                                                 for i in range(400)])
            await api(server, "icrc77_register_replay", [{"namespace": "org.news.wire", "range": [1, 401]}])
            await api(server, "icrc77_register_replay", [{"namespace": "org.news.wire", "range": [1, 50]}])
            traffic = asyncio.create_task(_traffic(server, stop))
            async with async_playwright() as p:
                browser = await p.chromium.launch(executable_path=CHROMIUM, headless=True)
                page = await browser.new_page(viewport={"width": 1280, "height": 800})
                await page.goto(f"{server.url}/console")
                await _shot(page, out, "sign-in")
                await page.fill("#token", server.admin_token)
                await page.press("#token", "Enter")
                await page.wait_for_selector("#chart")
                await asyncio.sleep(30)  # the charts fill with half a minute of live traffic
                await _shot(page, out, "subscriptions")
                tail = await browser.new_page(viewport={"width": 1280, "height": 800})
                await tail.goto(f"{server.url}/console")
                await tail.fill("#token", server.admin_token)
                await tail.press("#token", "Enter")
                await tail.goto(f"{server.url}/console#/tail/com.shop.orders")
                await asyncio.sleep(3)
                await _shot(tail, out, "tail")
                for view in ("publications", "dead-letters", "replays", "principals", "broadcasters"):
                    await page.goto(f"{server.url}/console#/{view}")
                    await asyncio.sleep(1)
                    await _shot(page, out, view)
                await page.goto(f"{server.url}/console#/schemas")
                await page.fill("#schema-versions input[name=subject]", "com.shop.order")
                await page.click("#schema-versions button[type=submit]")
                await page.wait_for_selector("#schema-version-list li")
                await page.get_by_role("button", name="Diff", exact=True).click()
                await page.wait_for_selector("#schema-diff .diff")
                await page.locator("#schema-diff").scroll_into_view_if_needed()
                await _shot(page, out, "schemas")
                phone = await browser.new_page(viewport={"width": 390, "height": 844})
                await phone.goto(f"{server.url}/console")
                await phone.fill("#token", server.admin_token)
                await phone.press("#token", "Enter")
                await phone.wait_for_selector("#chart")
                await asyncio.sleep(3)
                await _shot(phone, out, "phone")
                await browser.close()
        finally:
            stop.set()
            held.hold.set()
            for ep in (ok, bad, slow):
                await ep.stop()
            server.stop()
        await asyncio.gather(traffic, return_exceptions=True)


def _run(args: list[str]) -> Any:
    return asyncio.run(main(Path(args[0] if args else "docs/console")))


if __name__ == "__main__":
    _run(sys.argv[1:])
