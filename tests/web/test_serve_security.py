"""``recurrence serve`` is safe to expose (issue 26): the token, the headers, quiet refusals of hostile requests.

A server with a token (``RECURRENCE_HTTP_TOKEN``) over the RFC example is
asked as a stranger would (``tests/support/hostile.py``, the same checks as the
worker's in ``tests/kafka/test_web.py``); its log is read afterwards.
"""

import json
import os
import re
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from devkit.localrun import free_port, recurrence_command, wait_for
from tests.support.hostile import PATH_VALUES, PUBLIC, TOKEN, check_hostile_requests, check_token_guard, report, request
from tests.support.tools import REPO

# The product's own modules are imported by the tests that use them, so the behavioural tests above them
# also run (and fail) against a version without them.
TOKEN_ENV = "RECURRENCE_HTTP_TOKEN"

EXAMPLE = REPO / "examples" / "rfc-minimum.jsonl"


class Server:
    def __init__(self, url: str, log: Path) -> None:
        self.url, self.log = url, log


def _replayed(work: Path) -> Path:
    state = work / "state"
    subprocess.run(
        [*recurrence_command(), "replay", str(EXAMPLE), "--state", str(state), "--out", str(work / "ledger.jsonl")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return state


@contextmanager
def _serving(
    state: Path, log: Path, *extra: str, env: dict[str, str] | None = None, host: str = "127.0.0.1"
) -> Iterator[str]:
    """A running ``recurrence serve`` (its output in ``log``); its URL. Stopped by SIGTERM afterwards."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [*recurrence_command(), "serve", "--state", str(state), "--host", host, "--port", str(port), *extra],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    try:
        wait_for(lambda: process.poll() is None and _answers(url), 30, 0.1, "recurrence serve")
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    work = tmp_path_factory.mktemp("serve-security")
    log = work / "serve.log"
    with _serving(_replayed(work), log, env={TOKEN_ENV: TOKEN}) as url:
        yield Server(url, log)


def _answers(url: str) -> bool:
    try:
        return request(url, "/livez").status == 200
    except OSError:
        return False


def test_every_data_path_asks_for_the_token_and_the_probes_and_the_page_shell_do_not(served: Server) -> None:
    documented = request(served.url, "/openapi.json", TOKEN).json()["paths"]
    asked = check_token_guard(served.url, documented, PATH_VALUES)
    assert {"/statistics", "/openapi.json", "/explain/experience%2FE7%401", "/ui", "/livez"} <= set(asked)
    # A path that does not exist says nothing without the token, and is a plain 404 with it.
    assert request(served.url, "/no-such-path").status == 401
    assert request(served.url, "/no-such-path", TOKEN).status == 404


def test_hostile_requests_are_refused_with_a_4xx_and_at_most_a_line_of_log_each_kind(served: Server) -> None:
    before = served.log.read_text(errors="replace")
    for _ in range(3):  # the same hostile requests again and again: the log must not grow with them
        seen = check_hostile_requests(served.url)
    assert seen["GET /explain/experience%2FE7@18446744073709551616 (token)"] == 404
    assert seen["POST /statistics (token)"] == 405
    print(f"\n[hostile: recurrence serve]\n{report(seen)}")
    time.sleep(0.5)
    logged = served.log.read_text(errors="replace")[len(before) :]
    assert "Traceback" not in logged and "\x1b" not in logged
    lines = [line for line in logged.splitlines() if line.strip()]
    # One line per kind of refusal at most (no token; each kind of unparseable request), however many came.
    assert len(lines) <= 6, lines
    assert all("without a valid token" in line or "that is not valid HTTP" in line for line in lines), lines


def test_the_document_declares_the_token_and_the_public_paths(served: Server) -> None:
    document = request(served.url, "/openapi.json", TOKEN).json()
    assert document["components"]["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}
    assert document["security"] == [{"bearer": []}]
    for path, item in document["paths"].items():
        assert (item["get"].get("security") == []) == (path in PUBLIC), path
        assert ("401" in item["get"]["responses"]) == (path not in PUBLIC), path


def test_a_token_file_works_and_a_bad_token_setting_stops_serve_at_once(tmp_path: Path) -> None:
    state = _replayed(tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    with _serving(state, tmp_path / "file.log", "--http-token-file", str(token_file)) as url:
        assert request(url, "/statistics").status == 401
        assert request(url, "/statistics", TOKEN).status == 200
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    bad: list[tuple[list[str], dict[str, str], str]] = [
        ([], {TOKEN_ENV: ""}, "is empty"),
        ([], {TOKEN_ENV: "short"}, "at least 16"),
        ([], {TOKEN_ENV: "with a space in it, long enough"}, "spaces"),
        (["--http-token-file", "/dev/zero"], {}, "is a device"),
        (["--http-token-file", str(fifo)], {}, "is a FIFO"),
        (["--http-token-file", str(tmp_path)], {}, "is a directory"),
        (["--http-token-file", str(tmp_path / "absent")], {}, "No such file"),
    ]
    for extra, env, said in bad:
        began = time.monotonic()
        result = subprocess.run(
            [*recurrence_command(), "serve", "--state", str(state), "--port", str(free_port()), *extra],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
            env={**os.environ, **env},
        )
        assert result.returncode == 2, (extra, env, result.stderr)
        assert said in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert time.monotonic() - began < 10


def test_binding_beyond_loopback_without_a_token_warns(tmp_path: Path) -> None:
    state = _replayed(tmp_path)
    for env, warned in (({}, True), ({TOKEN_ENV: TOKEN}, False)):
        log = tmp_path / f"bind-{warned}.log"
        with _serving(state, log, env=env, host="0.0.0.0"):
            pass
        assert ("warning: serving 0.0.0.0 without a token" in log.read_text()) == warned
    from recurrence_ledger.processor.web.websecurity import exposure_warning
    from recurrence_ledger.processor.web.webtoken import Access

    for host, warns in (
        ("127.0.0.1", False),
        ("::1", False),
        ("localhost", False),
        ("127.0.0.2", False),
        ("0.0.0.0", True),
        ("::", True),
        ("", True),
        ("10.1.2.3", True),
        ("example.org", True),
    ):
        assert (exposure_warning(host, Access()) is not None) == warns, host
        assert exposure_warning(host, Access(TOKEN)) is None


def test_tokens_are_compared_by_their_digests_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    import hmac

    from recurrence_ledger.processor.web.webtoken import Access

    compared: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((len(a), len(b)))
        return bool(real(a, b))

    monkeypatch.setattr(hmac, "compare_digest", spy)
    access = Access(TOKEN)
    for header, allowed in (
        (f"Bearer {TOKEN}", True),
        (f"bearer  {TOKEN} ", True),
        (f"Bearer {TOKEN}x", False),
        ("Bearer x", False),
        ("Bearer " + "x" * 10_000, False),
        (f"Basic {TOKEN}", False),
        (None, False),
        ("", False),
    ):
        assert access.allows(header) is allowed, header
    # Every request is one comparison of two SHA-256 digests, whatever was sent: no early exit on length.
    assert compared == [(32, 32)] * 8
    assert Access().allows(None) and not Access().required


def test_load_token_reads_the_file_first_then_the_environment(tmp_path: Path) -> None:
    from recurrence_ledger.processor.exceptions import SettingsError
    from recurrence_ledger.processor.web.webtoken import load_token

    token_file = tmp_path / "token"
    token_file.write_bytes(b"from-the-file-0123456789\n")
    assert load_token(token_file, {TOKEN_ENV: TOKEN}) == "from-the-file-0123456789"
    assert load_token(None, {TOKEN_ENV: TOKEN}) == TOKEN
    assert load_token(None, {}) is None
    token_file.write_bytes(b"\xff" * 20)
    with pytest.raises(SettingsError, match="not ASCII"):
        load_token(token_file, {})
    token_file.write_bytes(b"x" * 5000)
    with pytest.raises(SettingsError, match="larger than"):
        load_token(token_file, {})


def test_a_repeated_warning_is_logged_once_per_interval_with_how_many_were_left_out() -> None:
    import logging

    from recurrence_ledger.processor.web.websecurity import QuietLog

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("test.quiet")
    logger.addHandler(Keep())
    logger.propagate = False
    now = [0.0]
    quiet = QuietLog(logger, every=10.0, clock=lambda: now[0])
    for _ in range(1000):
        quiet.warning("kind", "refused %s", "\x1b[31mred")
    now[0] = 11.0
    quiet.warning("kind", "refused %s", "again")
    assert records == ["refused \\x1b[31mred", "refused again (999 more like it in the last 10 s not logged)"]


def test_the_api_check_finds_a_server_that_does_not_ask_for_its_token(tmp_path: Path) -> None:
    """schemathesis' run with the token set also sends each protected operation without it: a server that
    declares the token but lets anyone read is a failure (so the clean runs in test_serve.py mean something)."""
    from recurrence_ledger.processor.embedded.reading import open_state
    from recurrence_ledger.processor.web.serve import EmbeddedReadSurface, application
    from recurrence_ledger.processor.web.webtoken import Access
    from tests.support.apicheck import app_failures

    class Lax(Access):
        def allows(self, authorization: str | None) -> bool:
            return True

    store = open_state(_replayed(tmp_path))
    try:
        found = app_failures(application(EmbeddedReadSurface(store), Lax(TOKEN)), token=TOKEN)
    finally:
        store.close()
    assert found and all("accepts requests without authentication" in failure for failure in found), found


def _first_lines(process: "subprocess.Popen[str]", count: int, seconds: float = 30) -> list[str]:
    """The first ``count`` lines the process prints on stdout (the process is killed after ``seconds``)."""
    assert process.stdout is not None
    timer = threading.Timer(seconds, process.kill)
    timer.start()
    try:
        return [process.stdout.readline() for _ in range(count)]
    finally:
        timer.cancel()


@pytest.mark.parametrize("source", ["environment", "file"])
def test_the_url_comes_once_the_port_listens_and_never_holds_the_token(source: str, tmp_path: Path) -> None:
    state = _replayed(tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    extra, env = (["--http-token-file", str(token_file)], {}) if source == "file" else ([], {TOKEN_ENV: TOKEN})
    process = subprocess.Popen(
        [*recurrence_command(), "serve", "--state", str(state), "--port", "0", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    try:
        url_line, token_line = _first_lines(process, 2)
        found = re.fullmatch(r"recurrence serve: (http://127\.0\.0\.1:(\d+)/ui) \(Ctrl-C to stop\)\n", url_line)
        assert found, url_line
        # Printed once listening: the port answers at once, no retry.
        assert request(found.group(1).removesuffix("/ui"), "/livez").status == 200
        # A URL that works as printed: no token in it, no placeholder the page would take for one.
        assert "#" not in url_line and "…" not in url_line + token_line and TOKEN not in url_line + token_line
        where = f"the content of {token_file}" if source == "file" else f"the value of {TOKEN_ENV}"
        assert f"asks once per tab for the access token ({where})" in token_line
        assert f"open {found.group(1)}#token=<token>" in token_line
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_taken_port_is_one_line_and_no_url(tmp_path: Path) -> None:
    state = _replayed(tmp_path)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = subprocess.run(
            [*recurrence_command(), "serve", "--state", str(state), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (
        f"recurrence serve: port 127.0.0.1:{port} is in use; choose another --port, or stop the process holding it\n"
    )


@pytest.mark.browser
def test_the_page_refuses_a_malformed_token_and_asks_for_it_again(served: Server) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions

    from tests.support.browser import SCREENSHOTS, chromium, wait

    def question(driver: Any) -> Any:
        return wait(driver, expected_conditions.alert_is_present())

    def loaded(driver: Any) -> None:
        wait(driver, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") == "true")

    with chromium() as driver:
        # The URL an earlier serve printed, "…" and all: not a token, so the page asks and says why.
        driver.get(f"{served.url}/ui#token=…")
        asked = question(driver)
        assert "The token in the address is not one" in asked.text
        asked.send_keys("too-short")
        asked.accept()
        asked = question(driver)  # a malformed answer is refused too, and asked again
        assert "That is not a token (it is 9 characters long" in asked.text
        asked.send_keys(TOKEN)
        asked.accept()
        loaded(driver)
        assert "token" not in driver.current_url
        # A malformed token the tab kept (what the earlier page stored) is dropped on load: a reload asks again.
        driver.execute_script("sessionStorage.setItem('recurrence-token', '…')")
        driver.refresh()
        asked = question(driver)
        assert "The token this tab kept is not one" in asked.text
        asked.dismiss()
        # Declined: no browser error, one line that offers to ask again.
        again = wait(driver, lambda d: d.find_elements(By.ID, "token-again"))[0]
        status = driver.find_element(By.ID, "status").text
        assert "asks for its access token" in status and "ISO-8859-1" not in status
        SCREENSHOTS.mkdir(exist_ok=True)
        assert driver.save_screenshot(str(SCREENSHOTS / "ui-token-asked.png"))
        again.click()
        asked = question(driver)
        asked.send_keys(TOKEN)
        asked.accept()
        loaded(driver)
        assert driver.find_element(By.ID, "status").text.startswith("the state as of journal line")
        errors = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert not [m for m in errors if "ISO-8859-1" in m or "TypeError" in m], errors


@pytest.mark.browser
def test_the_footer_links_carry_the_token_and_the_icon_is_public(served: Server) -> None:
    from selenium.webdriver.common.by import By

    from tests.support.browser import chromium, open_page, wait

    assert request(served.url, "/statistics").status == 401  # a plain link would be refused
    expected = request(served.url, "/statistics", TOKEN).json()
    icon = request(served.url, "/favicon.ico")  # no token: a tab's icon holds no data
    assert icon.status == 200 and icon.headers["content-type"] == "image/vnd.microsoft.icon"
    assert icon.body == (REPO / "processor" / "web" / "ui" / "favicon.ico").read_bytes()
    with chromium() as driver:
        open_page(driver, f"{served.url}/ui#token={TOKEN}")
        page = driver.current_window_handle
        driver.find_element(By.CSS_SELECTOR, 'footer a[href="/statistics"]').click()
        wait(driver, lambda d: len(d.window_handles) == 2)
        driver.switch_to.window(next(h for h in driver.window_handles if h != page))
        wait(driver, lambda d: d.current_url.startswith("blob:") and d.find_element(By.TAG_NAME, "body").text)
        assert json.loads(driver.find_element(By.TAG_NAME, "body").text) == expected
        errors = [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        assert not [m for m in errors if "favicon" in m or "401" in m], errors
