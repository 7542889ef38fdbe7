"""The web console in a real headless Chromium (the system's ``/usr/bin/chromium``, driven by
Playwright; no browser is downloaded) against the real ``tidings serve`` process.

Every check reads what a person would see: the rows of a table, the itemised answer next
to a button, the lines of the live tail, the samples the live chart draws.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from collections.abc import AsyncIterator, Callable
from importlib import resources
from typing import Any

import aiohttp
import pytest

from .conftest import ServerProcess, eventually, read_body, respond

pytestmark = pytest.mark.e2e

CHROMIUM = os.environ.get("TIDINGS_CHROMIUM", "/usr/bin/chromium")
NS = "com.example.console"

if not shutil.which(CHROMIUM):
    pytest.skip(f"no Chromium at {CHROMIUM} (Debian package chromium; .ci/run installs it)", allow_module_level=True)

from playwright.async_api import Browser, Page, async_playwright, expect  # noqa: E402


class Hook:
    """A subscriber endpoint: records the event ids pushed to it, answers ``status``;
    while ``hold`` is set, a push of replayed notifications waits for it."""

    def __init__(self) -> None:
        self.status = 200
        self.events: list[int] = []
        self.hold: asyncio.Event | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        batch = json.loads(await read_body(receive))
        replayed = any(k == "icrc77:replay:id" for n in batch for k, _ in n.get("headers", []))
        if replayed and self.hold is not None:
            await self.hold.wait()
        if self.status == 200:
            self.events.extend(int(n["eventId"]) for n in batch)
        await respond(send, self.status)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        b = await p.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield b
        finally:
            await b.close()


@pytest.fixture
def console_server(server_factory: Callable[..., ServerProcess]) -> ServerProcess:
    return server_factory(retry_initial_s="0.05", retry_max_s="0.1", ack_deadline_s="1", max_attempts="3")


async def api(server: ServerProcess, method: str, arg: Any, token: str | None = None) -> Any:
    async with aiohttp.ClientSession() as http, http.post(
        f"{server.url}/v1/{method}", data=json.dumps(arg),
        headers={"authorization": f"Bearer {token or server.admin_token}"},
    ) as resp:
        body = await resp.json()
        assert resp.status == 200, body
        return body


async def principal(server: ServerProcess, name: str) -> str:
    return str((await api(server, "tidings_create_principal", {"name": name}))["token"])


async def open_console(browser: Browser, server: ServerProcess, token: str, *, width: int = 1280,
                       height: int = 800) -> Page:
    """A new tab on the console, signed in with ``token``; CSP violations fail the test."""
    page = await browser.new_page(viewport={"width": width, "height": height})
    violations: list[str] = []
    page.on("console", lambda m: violations.append(m.text) if "Content Security Policy" in m.text else None)
    page.violations = violations  # type: ignore[attr-defined]
    page.on("dialog", lambda d: asyncio.ensure_future(d.accept()))  # "Delete …?": yes
    await page.goto(f"{server.url}/console")
    await page.fill("#token", token)
    await page.press("#token", "Enter")
    await expect(page.locator("#nav")).to_be_visible()
    return page


async def test_sign_in_create_publish_and_see_it_in_the_tail_and_the_charts(
    browser: Browser, console_server: ServerProcess, endpoints: Any
) -> None:
    server = console_server
    hook = Hook()
    ep = await endpoints(hook)
    page = await open_console(browser, server, server.admin_token)
    await expect(page.locator("#who")).to_have_text("admin (admin)")

    # A publication, through the page's form (icrc72_register_publication), answer inline.
    await page.click("#nav >> text=Publications")
    await page.fill("#create-publication input[name=namespace]", NS)
    await page.click("#create-publication button[type=submit]")
    await expect(page.locator("#create-publication + div .results")).to_contain_text(f"{NS}: ok")
    await expect(page.locator(f'#publications tr[data-namespace="{NS}"]')).to_be_visible()

    # A subscription, the same way. Refusals show as the API answers them: a call refused
    # as a whole (an unknown namespace), or item by item (a filter that does not parse).
    await page.click("#nav >> text=Subscriptions")
    form = page.locator("#create-subscription")
    answer = page.locator("#create-subscription + div")
    await form.locator("input[name=namespace]").fill("com.example.nothing")
    await form.locator("input[name=endpoint]").fill(ep.url)
    await form.locator("button[type=submit]").click()
    await expect(answer.locator("[role=alert]")).to_contain_text("namespace_not_found")
    await form.locator("input[name=namespace]").fill(NS)
    await form.locator("input[name=filter]").fill("((")
    await form.locator("button[type=submit]").click()
    await expect(answer.locator(".results .error")).to_contain_text(f"{NS}: ImproperConfig")
    await form.locator("input[name=filter]").fill("")
    await form.locator("button[type=submit]").click()
    await expect(answer.locator(".results .ok")).to_contain_text(f"{NS}: ok")
    (sub,) = [s["id"] for s in await api(server, "icrc72_get_subscriptions", {})]
    row = page.locator(f'#subscriptions tr[data-id="{sub}"]')
    await expect(row).to_be_visible()
    await row.locator("button").click()
    await expect(page.locator("#subscription-detail h2").first).to_contain_text(f"Subscription {sub}")

    # A second tab follows the namespace's tail.
    tail = await open_console(browser, server, server.admin_token)
    await tail.goto(f"{server.url}/console#/tail/{NS}")
    await expect(tail.locator("text=Following")).to_be_visible()

    # Publish from the page; the event shows in the tail, decoded, and the charts move.
    await page.click("#nav >> text=Publications")
    await page.fill("#publish input[name=namespace]", NS)
    await page.fill("#publish textarea[name=data]", '{"order": 42, "item": "tea"}')
    await page.click("#publish button[type=submit]")
    await expect(page.locator("#publish + div .results .ok")).to_be_visible()
    await expect(tail.locator("#tail li")).to_have_count(1)
    await expect(tail.locator("#tail li pre").first).to_contain_text('"item": "tea"')
    await eventually(lambda: hook.events == [1])

    await page.click("#nav >> text=Subscriptions")
    await expect(row.locator('[data-stat="sent"]')).to_have_text("1")
    await row.locator("button").click()
    for _ in range(3):
        await api(server, "icrc72_publish", [{"namespace": NS, "data": {"Nat": 1}}])
    await eventually(lambda: len(hook.events) == 4)
    chart = page.locator("#chart")
    await expect(row.locator('[data-stat="sent"]')).to_have_text("4")
    peak = json.loads(await chart.get_attribute("data-peak") or "[]")
    assert peak[0] > 0 and peak[1] > 0, peak  # publish rate and delivery rate rose

    # Stop and start it from its panel: the API's answer inline, the state in the table.
    detail = page.locator("#subscription-detail")
    await detail.get_by_role("button", name="Stop", exact=True).click()
    await expect(detail.locator(".results .ok")).to_have_text(f"Stop {sub}: ok true")
    await expect(row.locator(".badge")).to_have_text("stopped")
    await row.locator("button").click()
    await detail.get_by_role("button", name="Start", exact=True).click()
    await expect(row.locator(".badge")).to_have_text("active")

    # The publications' statistics are live too.
    await page.click("#nav >> text=Publications")
    events = page.locator(f'#publications tr[data-namespace="{NS}"] [data-stat="events"]')
    await expect(events).to_have_text("4")
    await api(server, "icrc72_publish", [{"namespace": NS, "data": {"Nat": 5}}])
    await expect(events).to_have_text("5")
    assert page.violations == [] and tail.violations == []  # type: ignore[attr-defined]


async def test_a_failing_subscriber_dead_letters_and_the_console_redrives_it(
    browser: Browser, console_server: ServerProcess, endpoints: Any
) -> None:
    server = console_server
    hook = Hook()
    ep = await endpoints(hook)
    bob = await principal(server, "bob")
    await api(server, "icrc72_register_publication", [{"namespace": NS}])
    (s,) = await api(server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}], bob)
    sub = s["Ok"]

    hook.status = 500  # tried max_attempts (3) times, then dead-lettered
    await api(server, "icrc72_publish", [{"namespace": NS, "data": {"Text": "first"}},
                                         {"namespace": NS, "data": {"Text": "second"}}])
    page = await open_console(browser, server, bob)
    await page.goto(f"{server.url}/console#/dead-letters/{sub}")
    rows = page.locator("#dead-letters tbody tr")
    for _ in range(50):
        if await rows.count() == 2:
            break
        await page.click("text=Show")
        await asyncio.sleep(0.2)
    await expect(rows).to_have_count(2)
    await expect(rows.first).to_contain_text("attempts_exhausted")
    first, second = [int(x) for x in await rows.evaluate_all("rs => rs.map(r => r.dataset.id)")]

    # A box ticked stays ticked when the list is loaded again, as it is after every
    # redrive or drop (a tick made while that answer was on its way was lost).
    shown = await page.query_selector("#dead-letters")
    await page.check(f'#dead-letters input[value="{second}"]')
    await page.click("text=Show")
    await page.wait_for_function("t => !t.isConnected", arg=shown)
    await expect(page.locator(f'#dead-letters input[value="{second}"]')).to_be_checked()
    await expect(page.locator(f'#dead-letters input[value="{first}"]')).not_to_be_checked()
    await page.uncheck(f'#dead-letters input[value="{second}"]')

    # Redrive the first, drop the second: itemised answers inline, the rows go.
    hook.status = 200
    await page.check(f'#dead-letters input[value="{first}"]')
    await page.click("#redrive")
    await expect(page.locator("#dead-letter-results .ok")).to_have_text(f"notification {first}: ok true")
    await expect(rows).to_have_count(1)
    await eventually(lambda: hook.events == [1])
    await page.check(f'#dead-letters input[value="{second}"]')
    await page.click("#drop")
    await expect(page.locator("#dead-letter-results .ok")).to_have_text(f"notification {second}: ok true")
    await expect(rows).to_have_count(0)


async def test_a_replay_shows_its_progress_and_is_canceled_from_the_console(
    browser: Browser, console_server: ServerProcess, endpoints: Any
) -> None:
    server = console_server
    hook = Hook()
    hook.hold = asyncio.Event()  # replayed pushes wait: the replay stays running
    ep = await endpoints(hook)
    await api(server, "icrc72_register_publication", [{"namespace": NS}])
    await api(server, "icrc72_publish", [{"namespace": NS, "data": {"Nat": i}} for i in range(1, 501)])
    await api(server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}])
    page = await open_console(browser, server, server.admin_token)
    await page.click("#nav >> text=Replays")
    form = page.locator("#register-replay")
    await form.locator("input[name=namespace]").fill(NS)
    await form.locator("input[name=from]").fill("1")
    await form.locator("input[name=to]").fill("501")
    await form.locator("button[type=submit]").click()
    await expect(page.locator("#register-replay + div .ok")).to_contain_text(f"{NS}: ok")
    row = page.locator("#replays tbody tr").first
    await expect(row.locator(".badge")).to_have_text("running")
    await expect(row.locator("progress")).to_have_attribute("max", "500")
    rid = await row.get_attribute("data-id")

    await row.get_by_role("button", name="Cancel", exact=True).click()
    await expect(page.locator("#replay-results .ok")).to_have_text(f"replay {rid}: ok {rid}")
    hook.hold.set()
    await expect(row.locator(".badge")).to_have_text("canceled")
    await expect(row.get_by_role("button", name="Cancel", exact=True)).to_have_count(0)


async def test_a_principal_sees_only_what_its_rights_allow(
    browser: Browser, console_server: ServerProcess, endpoints: Any
) -> None:
    server = console_server
    ep = await endpoints(Hook())
    alice, bob = await principal(server, "alice"), await principal(server, "bob")
    await api(server, "icrc72_register_publication", [{"namespace": "com.alice.private"}], alice)
    await api(server, "icrc72_register_publication", [{"namespace": "com.bob.own"}], bob)
    (a,) = await api(server, "icrc72_register_subscription",
                     [{"namespace": "com.alice.private", "endpoint": ep.url}], alice)
    (b,) = await api(server, "icrc72_register_subscription", [{"namespace": "com.bob.own", "endpoint": ep.url}], bob)
    alice_sub, bob_sub = a["Ok"], b["Ok"]

    page = await open_console(browser, server, bob)
    await expect(page.locator(f'#subscriptions tr[data-id="{bob_sub}"]')).to_be_visible()
    await expect(page.locator(f'#subscriptions tr[data-id="{alice_sub}"]')).to_have_count(0)
    await expect(page.locator("#nav a[data-admin]")).to_be_hidden()
    # Searching for it on the server finds nothing either.
    await page.fill("input[name=q]", "com.alice")
    await page.press("input[name=q]", "Enter")
    await expect(page.locator("text=0 matches")).to_be_visible()
    # Nor can the page be talked into it: the server refuses the tail and leaves the
    # subscription out of counters and pages, whatever the page asks.
    await page.goto(f"{server.url}/console#/tail/com.alice.private")
    await expect(page.locator("#view [role=alert]")).to_contain_text("may not tail")
    answers = await page.evaluate("""async ([t, id]) => {
        const h = {Authorization: "Bearer " + t};
        const page = await (await fetch("/console/api/subscriptions?q=" + id, {headers: h})).json();
        const principals = await fetch("/console/api/principals", {headers: h});
        const ctrl = new AbortController();
        const feed = await fetch("/console/api/stats?ids=" + id, {headers: h, signal: ctrl.signal});
        const reader = feed.body.getReader();
        const first = new TextDecoder().decode((await reader.read()).value);
        ctrl.abort();
        const anon = await fetch("/console/api/subscriptions");
        return {page, principals: principals.status, first, anon: anon.status};
    }""", [bob, alice_sub])
    assert all(s["id"] != alice_sub for s in answers["page"]["items"])
    assert answers["principals"] == 403 and answers["anon"] == 401
    assert answers["first"].startswith("event: stats") and '"subs":{}' in answers["first"]

    # alice sees hers (and not bob's); the admin sees both.
    page_a = await open_console(browser, server, alice)
    await expect(page_a.locator(f'#subscriptions tr[data-id="{alice_sub}"]')).to_be_visible()
    await expect(page_a.locator(f'#subscriptions tr[data-id="{bob_sub}"]')).to_have_count(0)
    admin = await open_console(browser, server, server.admin_token)
    await expect(admin.locator("#subscriptions tbody tr")).to_have_count(2)

    # A token revoked while signed in: the next request sends the page back to sign-in.
    await api(server, "tidings_revoke_tokens", {"principal": "bob"})
    await asyncio.sleep(2.5)  # the server's token cache holds for at most 2 s
    await page.goto(f"{server.url}/console#/subscriptions")
    await expect(page.locator("#signin")).to_be_visible()


def _model(**props: Any) -> str:
    return json.dumps({"type": "object", "properties": props})


async def test_schema_registry_versions_diff_and_compatibility(browser: Browser, console_server: ServerProcess) -> None:
    server = console_server
    page = await open_console(browser, server, server.admin_token)
    await page.click("#nav >> text=Schemas")
    register = page.locator("section", has=page.locator("h2", has_text="Register a schema"))
    for model in (_model(a={"type": "string"}), _model(a={"type": "string", "description": "the a"})):
        await register.locator("input[name=subject]").fill("com.example.order")
        await register.locator("textarea[name=model]").fill(model)
        await register.locator("button[type=submit]").click()
        await expect(register.locator(".results .ok").last).to_contain_text("com.example.order: ok")
    # One refused item by item: the registry's own compatibility error, inline.
    await register.locator("textarea[name=model]").fill(_model(a={"type": "integer"}))
    await register.locator("button[type=submit]").click()
    await expect(register.locator(".results .error")).to_contain_text("IncompatibleSchema")
    await expect(page.locator("#schemas tbody tr")).to_have_count(2)
    await expect(page.locator('#schemas tr[data-id="1"]')).to_contain_text("com.example.order v1")

    # Versions and the diff between them.
    await page.fill("#schema-versions input[name=subject]", "com.example.order")
    await page.click("#schema-versions button[type=submit]")
    await expect(page.locator("#schema-version-list li")).to_have_text(["v1 → schema 1", "v2 → schema 2"])
    await page.get_by_role("button", name="Diff", exact=True).click()
    diff = page.locator("#schema-diff .diff")
    await expect(diff.locator(".del")).to_have_text(['-       "type": "string"'])
    await expect(diff.locator(".add")).to_have_text(['+       "type": "string",', '+       "description": "the a"'])

    # The compatibility check: issues listed, or "Compatible".
    check = page.locator("section", has=page.locator("h2", has_text="Compatibility check"))
    await check.locator("input[name=subject]").fill("com.example.order")
    await check.locator("textarea[name=model]").fill(_model(a={"type": "integer"}))
    await check.locator("button[type=submit]").click()
    await expect(page.locator("#compatibility .error")).to_contain_text("type-changed")
    await check.locator("textarea[name=model]").fill(_model(a={"type": "string"}))
    await check.locator("button[type=submit]").click()
    await expect(page.locator("#compatibility .ok")).to_contain_text("Compatible")

    # States (admins): deprecate version 1.
    await page.locator('#schemas tr[data-id="1"]').get_by_role("button", name="Deprecate").click()
    await expect(page.locator('#schemas tr[data-id="1"] .badge')).to_have_text("Deprecated")


async def test_principals_and_tokens_for_admins_and_broadcasters(
    browser: Browser, console_server: ServerProcess
) -> None:
    server = console_server
    page = await open_console(browser, server, server.admin_token)
    await page.click("#nav >> text=Principals")
    await page.fill("input[name=name]", "carol")
    await page.get_by_role("button", name="Create", exact=True).click()
    token = (await page.locator("#created-token .token").inner_text()).strip()
    assert token.startswith("tid_")
    await expect(page.locator('#principals tr[data-name="carol"]')).to_be_visible()
    # The token shown works, until revoked from the console.
    assert (await api(server, "tidings_whoami", None, token))["name"] == "carol"
    await page.locator('#principals tr[data-name="carol"]').get_by_role("button", name="Revoke all tokens").click()
    await expect(page.locator("#principal-results .ok")).to_have_text("carol: 1 token(s) revoked")
    async with aiohttp.ClientSession() as http, http.post(
        f"{server.url}/v1/tidings_whoami", headers={"authorization": f"Bearer {token}"}
    ) as resp:
        assert resp.status == 401
    # One token revoked by pasting it: only that one.
    dave = await principal(server, "dave")
    form = page.locator("#revoke-one")
    await form.locator("input[name=principal]").fill("dave")
    await form.locator("input[name=token]").fill("tid_not_a_token")
    await form.locator("button[type=submit]").click()
    await expect(page.locator("#revoked-token .error")).to_have_text("dave: 0 token(s) revoked")
    await form.locator("input[name=token]").fill(dave)
    await form.locator("button[type=submit]").click()
    await expect(page.locator("#revoked-token .ok")).to_have_text("dave: 1 token(s) revoked")
    # Creating a principal that exists: the API's refusal, inline.
    await page.fill("input[name=name]", "carol")
    await page.get_by_role("button", name="Create", exact=True).click()
    await expect(page.locator("#created-token [role=alert]")).to_contain_text("already_exists")

    await page.click("#nav >> text=Broadcasters")
    await expect(page.locator("#broadcasters tbody tr")).to_have_count(1)
    await expect(page.locator("#broadcasters")).to_contain_text("all 0 publications")


async def test_headers_keyboard_and_phone_width(browser: Browser, console_server: ServerProcess) -> None:
    server = console_server
    async with aiohttp.ClientSession() as http:
        for path in ("/console", "/console/static/app.js", "/console/api/subscriptions"):
            async with http.get(server.url + path) as resp:
                csp = resp.headers["content-security-policy"]
                assert "default-src 'self'" in csp and "script-src 'self'" in csp and "'unsafe-inline'" not in csp
                assert resp.headers["x-content-type-options"] == "nosniff"
                assert "set-cookie" not in resp.headers
        async with http.get(server.url + "/console/static/..%2F__init__.py") as resp:
            assert resp.status == 404
        async with http.get(server.url + "/console/api/subscriptions?after=x",
                            headers={"authorization": f"Bearer {server.admin_token}"}) as resp:
            assert resp.status == 400 and (await resp.json())["error"]["code"] == "invalid_argument"
    # No markup is built from strings anywhere in the page's code, and no inline script or style.
    static = resources.files("tidings.console").joinpath("static")
    for f in static.iterdir():
        text = f.read_text()
        for risky in (".innerHTML", ".outerHTML", "insertAdjacentHTML", "document.write", "eval(", " style="):
            assert risky not in text, (f.name, risky)
    assert "<script>" not in static.joinpath("index.html").read_text()

    # Phone width, keyboard only: sign in, move between views with Tab and Enter.
    page = await browser.new_page(viewport={"width": 390, "height": 844})
    await page.goto(f"{server.url}/console")
    await expect(page.locator("#token")).to_be_focused()
    await page.keyboard.type(server.admin_token)
    await page.keyboard.press("Enter")
    await expect(page.locator("#view h1")).to_have_text("Subscriptions")
    await expect(page.locator("#view h1")).to_be_focused()  # focus moves to the new view
    seen = []
    for _ in range(12):  # back from the heading: Sign out, the navigation links
        await page.keyboard.press("Shift+Tab")
        seen.append(await page.evaluate("document.activeElement.textContent"))
        if seen[-1] == "Publications":
            break
    assert "Publications" in seen, seen
    await page.keyboard.press("Enter")
    await expect(page.locator("#view h1")).to_have_text("Publications")
    # Nothing is wider than the phone's screen.
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, width


async def test_ten_thousand_subscriptions_are_paged_and_searched_on_the_server(
    browser: Browser, console_server: ServerProcess, endpoints: Any
) -> None:
    server = console_server
    ep = await endpoints(Hook())
    await api(server, "icrc72_register_publication", [{"namespace": f"com.example.bulk{i}"} for i in range(10)])
    for lo in range(0, 10_000, 2_000):
        results = await api(server, "icrc72_register_subscription", [
            {"namespace": f"com.example.bulk{i % 10}", "endpoint": ep.url} for i in range(lo, lo + 2_000)
        ])
        assert all("Ok" in r for r in results)
    page = await open_console(browser, server, server.admin_token)
    await expect(page.locator("text=10000 matches")).to_be_visible()
    rows = page.locator("#subscriptions tbody tr")
    await expect(rows).to_have_count(20)  # one page, not ten thousand rows
    await expect(rows.first).to_have_attribute("data-id", "1")
    await page.get_by_role("button", name="Next page").click()
    await expect(rows.first).to_have_attribute("data-id", "21")
    await page.fill("input[name=q]", "9999")
    await page.press("input[name=q]", "Enter")
    await expect(page.locator("text=1 match")).to_be_visible()
    await expect(rows).to_have_count(1)
    await page.fill("input[name=q]", "bulk7")
    await page.press("input[name=q]", "Enter")
    await expect(page.locator("text=1000 matches")).to_be_visible()
    await expect(rows.first).to_contain_text("com.example.bulk7")


async def test_publication_config_and_deleting_publications_and_subscriptions(
    browser: Browser, console_server: ServerProcess, endpoints: Any
) -> None:
    server = console_server
    ep = await endpoints(Hook())
    page = await open_console(browser, server, server.admin_token)
    await page.click("#nav >> text=Publications")
    form = page.locator("#create-publication")
    answer = page.locator("#create-publication + div")
    await form.locator("input[name=namespace]").fill(NS)
    await form.locator("textarea[name=config]").fill("not json")
    await form.locator("button[type=submit]").click()
    await expect(answer.locator("[role=alert]")).to_contain_text("not a JSON object")
    allowed = "icrc72:publication:subscribers:allowed:list"
    await form.locator("textarea[name=config]").fill(json.dumps({allowed: ["alice", "admin"]}))
    await form.locator("button[type=submit]").click()
    await expect(answer.locator(".ok")).to_contain_text(f"{NS}: ok")
    row = page.locator(f'#publications tr[data-namespace="{NS}"]')
    await expect(row.locator("pre")).to_contain_text(f'"{allowed}": [\n    "alice",\n    "admin"')
    # The API's own check of a config, item by item.
    await form.locator("input[name=namespace]").fill("com.example.bad")
    await form.locator("textarea[name=config]").fill(json.dumps({allowed: 7}))
    await form.locator("button[type=submit]").click()
    await expect(answer.locator(".error")).to_contain_text("com.example.bad: ImproperConfig")

    (s,) = await api(server, "icrc72_register_subscription", [{"namespace": NS, "endpoint": ep.url}])
    await page.click("#nav >> text=Subscriptions")
    detail = page.locator("#subscription-detail")
    await expect(detail.locator("h2").first).to_contain_text(f"Subscription {s['Ok']}")
    await detail.get_by_role("button", name="Delete", exact=True).click()  # confirmed in the dialog
    await expect(page.locator("#subscriptions tbody tr")).to_have_count(0)
    assert await api(server, "icrc72_get_subscriptions", {}) == []

    await page.click("#nav >> text=Publications")
    await row.get_by_role("button", name="Delete", exact=True).click()
    await expect(page.locator("#publications .results .ok")).to_have_count(0)
    await expect(row).to_have_count(0)
    assert await api(server, "icrc72_get_publications", {}) == []


async def test_broadcasters_and_their_assignments_when_there_are_several(
    browser: Browser, server_factory: Callable[..., ServerProcess], pg_database: str
) -> None:
    """Two broadcasters on one PostgreSQL database (docs/scaling.md): the console lists
    both, with the publications each owns and the subscriptions each delivers."""
    from .pg_support import schema_address

    store = schema_address(pg_database)
    fast = {"workers": "1", "heartbeat_s": "0.25", "lease_s": "1"}
    first = server_factory(store=store, broadcaster_id="b0", **fast)
    d = first.data_dir.parent / "second"
    d.mkdir()
    shutil.copy(first.data_dir / "admin.token", d / "admin.token")
    second = ServerProcess(d, env={f"TIDINGS_{k.upper()}": v for k, v in {**fast, "store": store,
                                                                         "broadcaster_id": "b1"}.items()})
    second.start(new_port_if_taken=True)
    try:
        await api(first, "icrc72_register_publication", [{"namespace": NS}])
        subs = [{"namespace": NS, "endpoint": f"http://127.0.0.1:9/{i}"} for i in range(20)]
        await api(first, "icrc72_register_subscription", subs)

        async def delivered() -> bool:
            rows = await api(second, "icrc72_get_broadcasters", {})
            return len(rows) == 2 and sum(
                dict(r["stats"])["tidings:broadcaster:subscriptions"]["Nat"] for r in rows) == 20

        await eventually(delivered, timeout=20)
        page = await open_console(browser, second, second.admin_token)
        await page.click("#nav >> text=Broadcasters")
        rows = page.locator("#broadcasters tbody tr")
        await expect(rows).to_have_count(2)
        await expect(rows.nth(0).locator("td").first).to_have_text("b0")
        await expect(rows.nth(1).locator("td").first).to_have_text("b1")
        counts = [int(await rows.nth(i).locator("td").nth(3).inner_text()) for i in range(2)]
        assert sum(counts) == 20
        # The publication, and each broadcaster's own control-plane namespace.
        owned = [int(await rows.nth(i).locator("td").nth(2).inner_text()) for i in range(2)]
        assert sorted(owned) == [1, 2]
        await expect(page.locator("#view")).to_contain_text("2 broadcasters share one store")
    finally:
        second.stop()
