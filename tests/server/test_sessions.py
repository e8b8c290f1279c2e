"""The dashboard's sign-in on a real server: a token becomes an HttpOnly, SameSite=Strict
cookie whose changes need the session's CSRF token, which ends within 2 s of the token's
revocation, and the page itself under a policy that runs only its own scripts."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet

from trainfleet.client import Client
from trainfleet.control.services.tokens import digest
from trainfleet.domain.records import TeamRole
from trainfleet.server.sessions import COOKIE, CSRF_HEADER, SESSION_SECONDS, Sessions
from trainfleet.server.throttle import Throttle

from .harness import LiveServer, add_user

API = "/api/v1"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path_factory.mktemp("sessions") / "data").start()
    yield live
    live.stop()


@contextmanager
def signed_in(server: LiveServer, token: str) -> Iterator[tuple[httpx.Client, str]]:
    """A browser-like client holding a session of ``token``, and the session's CSRF token."""
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        answer = browser.post(f"{API}/session", json={"token": token})
        assert answer.status_code == 200, answer.text
        yield browser, answer.json()["csrf"]


def submit(browser: httpx.Client, csrf: str, command: str = "sleep 600") -> str:
    text = f"name: s\nroles:\n  worker: {{command: {json.dumps(command)}}}\n"
    answer = browser.post(
        f"{API}/jobs",
        content=text,
        headers={"Content-Type": "application/yaml", CSRF_HEADER: csrf},
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["job"]["id"])


def test_a_token_becomes_a_cookie_the_browser_alone_holds(server: LiveServer) -> None:
    secret, _ = add_user(server.engine.store, "cookie-user", role=TeamRole.MEMBER)
    with httpx.Client(base_url=server.url) as browser:
        answer = browser.post(f"{API}/session", json={"token": secret})
        assert answer.status_code == 200, answer.text
        cookie = answer.headers["set-cookie"]
        for attribute in ("HttpOnly", "SameSite=strict", "Path=/", f"Max-Age={SESSION_SECONDS}"):
            assert attribute.lower() in cookie.lower(), cookie
        assert secret not in cookie and digest(secret) not in cookie  # sealed: neither shows
        view = answer.json()
        assert view["user"] == "cookie-user" and view["teams"] == {"default": "member"}
        assert len(view["csrf"]) >= 32
        again = browser.get(f"{API}/session").json()
        assert again["csrf"] == view["csrf"] and again["user"] == "cookie-user"
        assert browser.get(f"{API}/jobs").status_code == 200


def test_a_change_needs_the_sessions_csrf_token(server: LiveServer) -> None:
    secret, _ = add_user(server.engine.store, "csrf-user", role=TeamRole.MEMBER)
    with signed_in(server, secret) as (browser, csrf):
        job = submit(browser, csrf)
        for headers in ({}, {CSRF_HEADER: "not-it"}, {CSRF_HEADER: ""}):
            refused = browser.post(f"{API}/jobs/{job}/cancel", headers=headers)
            assert refused.status_code == 403, refused.text
            assert "X-CSRF-Token" in refused.json()["detail"]
        assert browser.get(f"{API}/jobs/{job}").json()["job"]["state"] != "cancelled"
        done = browser.post(f"{API}/jobs/{job}/cancel", headers={CSRF_HEADER: csrf})
        assert done.status_code == 200, done.text
        # the same request with the token itself needs no CSRF token (no cookie is sent
        # by a script of another site, so a bearer token cannot be forged by one)
        with httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {secret}"}
        ) as api:
            assert api.delete(f"{API}/jobs/{job}", params={"force": True}).status_code == 204


def test_revoking_the_token_or_disabling_the_user_ends_the_session_within_2_s(
    server: LiveServer,
) -> None:
    store = server.engine.store
    for ending in ("revoke", "disable"):
        secret, record = add_user(store, f"ending-{ending}", role=TeamRole.MEMBER)
        with signed_in(server, secret) as (browser, _):
            assert browser.get(f"{API}/jobs").status_code == 200
            if ending == "revoke":
                store.revoke_token(record.id)
            else:
                store.accounts.disable_user(record.user)
            ended = time.monotonic()
            while browser.get(f"{API}/jobs").status_code == 200:
                assert time.monotonic() - ended < 2.5, f"a {ending}d session still works"
                time.sleep(0.05)
            assert browser.get(f"{API}/session").status_code == 401


def test_a_made_up_stale_or_foreign_cookie_is_refused(server: LiveServer, tmp_path: Path) -> None:
    secret, _ = add_user(server.engine.store, "foreign", role=TeamRole.MEMBER)
    other = Sessions(Fernet.generate_key())
    _, foreign = other.new(digest(secret))
    ours = Sessions.of_data_dir(server.engine.data_dir.root)
    old = ours._fernet.encrypt_at_time(
        json.dumps([digest(secret), "x" * 32]).encode(), int(time.time()) - SESSION_SECONDS - 5
    ).decode()
    for cookie in (foreign, old, "garbage", ""):
        with httpx.Client(base_url=server.url, cookies={COOKIE: cookie}) as browser:
            answer = browser.get(f"{API}/jobs")
            assert answer.status_code == 401, (cookie, answer.text)
            if cookie:
                assert "sign in again" in answer.json()["detail"]


def test_a_bad_sign_in_is_refused_and_audited(server: LiveServer) -> None:
    server.app.state.auditor.throttle = Throttle()  # the other tests' refusals: not counted
    start = time.time()
    with httpx.Client(base_url=server.url) as browser:
        for body in ({"token": "no-such-token"}, {"token": ""}, {"tok": "x"}, ["x"]):
            answer = browser.post(f"{API}/session", json=body)
            assert answer.status_code == (401 if body == {"token": "no-such-token"} else 422)
            assert "set-cookie" not in answer.headers
        assert browser.get(f"{API}/session").status_code == 401
    with Client(server.url, server.token) as admin:
        failed = list(admin.audit(since=start, action="auth.failed", limit=None))
    assert any(
        record.detail == f"POST {API}/session" and record.outcome == "401 unknown token"
        for record in failed
    ), failed
    assert "no-such-token" not in repr(failed)


def test_an_address_that_floods_sign_ins_is_held_off_for_a_minute(server: LiveServer) -> None:
    from trainfleet.server.routes_session import SIGN_INS_PER_MINUTE, sign_in_throttle

    server.app.state.sign_ins = sign_in_throttle()  # the other tests' sign-ins: not counted
    secret, _ = add_user(server.engine.store, "flooded", role=TeamRole.MEMBER)
    with httpx.Client(base_url=server.url) as browser:
        for _ in range(SIGN_INS_PER_MINUTE):
            answer = browser.post(f"{API}/session", json={"token": "guess"})
            assert answer.status_code == 401
        held = browser.post(f"{API}/session", json={"token": secret})  # even a good one
        assert held.status_code == 429 and held.headers["retry-after"] == "60"
        assert "sign-ins from your address this minute" in held.json()["detail"]
        assert "set-cookie" not in held.headers
    server.app.state.sign_ins = sign_in_throttle()
    with signed_in(server, secret):  # a fresh window, as the next minute brings: in again
        pass


def test_signing_out_clears_the_cookie(server: LiveServer) -> None:
    secret, _ = add_user(server.engine.store, "leaver", role=TeamRole.MEMBER)
    with signed_in(server, secret) as (browser, csrf):
        refused = browser.delete(f"{API}/session")  # a sign-out is a change, as any other
        assert refused.status_code == 403
        answer = browser.delete(f"{API}/session", headers={CSRF_HEADER: csrf})
        assert answer.status_code == 204
        assert (
            'trainfleet_session=""' in answer.headers["set-cookie"]
            or "Max-Age=0" in answer.headers["set-cookie"]
        )
        assert browser.get(f"{API}/jobs").status_code == 401


def test_the_page_runs_only_its_own_scripts(server: LiveServer) -> None:
    with httpx.Client(base_url=server.url) as browser:
        page = browser.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "unsafe-inline" not in policy
        assert page.headers["x-content-type-options"] == "nosniff"
        assert '<script type="module" src="/assets/app.js">' in page.text
        script = browser.get("/assets/app.js")
        assert script.status_code == 200 and "javascript" in script.headers["content-type"]
        assert script.headers["content-security-policy"] == policy
        for sneaky in ("/assets/../app.py", "/assets/%2e%2e/ui.py", "/assets/..%2fui.py"):
            assert browser.get(sneaky).status_code == 404, sneaky
