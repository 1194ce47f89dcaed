"""The HTTP every runner shares: timeouts, retries that honour Retry-After, clear errors."""

from __future__ import annotations

import email.utils
import socket

import pytest

from stretto.oracle import http
from stretto.oracle.errors import HttpError, Malformed, RateLimited, TimedOut, Unreachable
from tests.stretto.oracle.apiserver import HANG

OK = (200, {}, {"ok": True})


def post(api, sleeps, **options):
    opts = http.HttpOptions(**{"timeout": 5.0, "sleep": sleeps, **options})
    return http.post_json(f"{api.url}/x", {"q": 1}, label="test://m", options=opts)


def test_a_429_is_retried_after_the_wait_the_server_asks(api, sleeps) -> None:
    api.script("POST", "/x", (429, {"retry-after": "2"}, {"error": "slow down"}), OK)
    assert post(api, sleeps) == {"ok": True}
    assert sleeps == [2.0]
    assert len(api.requests_to("/x")) == 2


def test_retry_after_as_an_http_date() -> None:
    when = email.utils.formatdate(1_000_000 + 7, usegmt=True)
    assert http.retry_after({"retry-after": when}, now=1_000_000) == pytest.approx(7.0)
    assert http.retry_after({"retry-after": "soon"}) is None
    assert http.retry_after({}) is None


def test_without_retry_after_the_wait_doubles(api, sleeps) -> None:
    api.script("POST", "/x", (503, {}, "busy"), (503, {}, "busy"), OK)
    assert post(api, sleeps) == {"ok": True}
    assert sleeps == [0.5, 1.0]


def test_rate_limited_past_the_retries(api, sleeps) -> None:
    api.script("POST", "/x", *[(429, {"retry-after": "1"}, {"error": {"message": "rate"}})] * 3)
    with pytest.raises(RateLimited, match=r"answered 429 \(rate\) 3 times; giving up"):
        post(api, sleeps, retries=2)
    assert sleeps == [1.0, 1.0]


def test_a_retry_after_longer_than_we_may_wait_gives_up_at_once(api, sleeps) -> None:
    api.script("POST", "/x", (429, {"retry-after": "3600"}, {"error": "quota"}))
    with pytest.raises(RateLimited, match="asks to wait 3600 s, longer than 30 s"):
        post(api, sleeps)
    assert sleeps == []


def test_a_server_that_does_not_answer_in_time(api, sleeps) -> None:
    api.script("POST", "/x", HANG)
    with pytest.raises(
        TimedOut, match=r"test://m: no answer from http://127\.0\.0\.1:\d+ within 0\.2 s"
    ):
        post(api, sleeps, timeout=0.2)


def test_a_server_that_is_down(sleeps) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nobody listens there
    opts = http.HttpOptions(timeout=5.0, sleep=sleeps)
    with pytest.raises(Unreachable, match=rf"cannot reach http://127\.0\.0\.1:{port}"):
        http.post_json(f"http://127.0.0.1:{port}/x", {}, label="test://m", options=opts)


def test_an_error_status_carries_the_servers_message(api, sleeps) -> None:
    api.script(
        "POST",
        "/x",
        (
            400,
            {},
            {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": "bad  field\n`x`"},
            },
        ),
    )
    with pytest.raises(HttpError, match=r"answered 400: bad field `x`$") as caught:
        post(api, sleeps)
    assert caught.value.status == 400
    assert sleeps == []  # a client error is not retried


def test_an_answer_that_is_not_json_is_refused(api, sleeps) -> None:
    api.script("POST", "/x", (200, {}, "<html>gateway</html>"))
    with pytest.raises(Malformed, match="the answer is not JSON"):
        post(api, sleeps)


def test_error_text_reads_each_apis_error_shape() -> None:
    assert http.error_text(b'{"error": "model \'x\' not found"}') == "model 'x' not found"
    assert http.error_text(b'{"error": {"message": "Incorrect API key", "code": 401}}') == (
        "Incorrect API key"
    )
    assert http.error_text(b'{"detail": "Unprocessable"}') == "Unprocessable"
    assert http.error_text(b"x" * 400).endswith("…")
