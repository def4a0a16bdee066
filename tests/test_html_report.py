"""--toolbench-html and ``toolbench html``: one self-contained page, from the report's data."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import (
    ChatServer,
    SSEPause,
    chunks_for,
    completion,
    json_reply,
    sse_reply,
)
from support.png import read_png

from pytest_toolbench.commands.cli import main

HOSTILE = '<script>alert("owned")</script><img src="https://evil.example/x.png">'

CASES = """name: weather
model: m1
endpoint: {{base_url: '{url}'}}
marks: [slow_weather]
tools:
  - name: get_weather
    result: {{temp_c: 21}}
stages:
  - name: ask
    user: Weather in Paris?
    expect:
      tool_calls: [{{name: get_weather, arguments: {{city: Paris}}}}]
---
name: chat
model: m1
endpoint: {{base_url: '{url}'}}
stages:
  - name: hello
    user: hi
"""
INI = "[pytest]\nmarkers =\n    slow_weather: cases that ask for the weather\n"


def serve(server: ChatServer) -> None:
    """The weather case fails (Lyon, not Paris); the chat case passes with hostile text."""
    def answer(request: Any) -> Any:
        if "tools" in request.json():
            return json_reply(completion(tool_calls=[("get_weather", {"city": "Lyon"})]))
        return json_reply(completion(text=HOSTILE))
    server.set_handler(answer)


def project(pytester: pytest.Pytester, server: ChatServer) -> None:
    serve(server)
    pytester.makeini(INI)
    pytester.makefile(".case.yaml", suite=CASES.format(url=server.base_url))


def external_loads(page: str) -> list[str]:
    """src/href attributes that point outside the file: the page must have none."""
    return re.findall(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.IGNORECASE)


def test_html_report_shows_failures_first_and_escapes_model_text(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    project(pytester, chat_server)
    page_path = pytester.path / "out" / "report.html"
    result = pytester.runpytest("--toolbench-live", f"--toolbench-html={page_path}")
    result.assert_outcomes(passed=1, failed=1)
    page = page_path.read_text(encoding="utf-8")
    failed, passed = page.index("suite.case.yaml::weather[m1]"), page.index(
        "suite.case.yaml::chat[m1]")
    assert failed < passed  # failures first
    assert "suite.case.yaml:12" in page  # the failing expectation's file:line
    diff = page[page.index('<pre class="diff">'):]
    assert '<span class="del">-    &quot;city&quot;: &quot;Paris&quot;</span>' in diff
    assert '<span class="ins">+' in diff and "Lyon" in diff[:diff.index("</pre>")]
    assert "&lt;script&gt;alert(&quot;owned&quot;)&lt;/script&gt;" in page
    assert page.count("<script") == 1  # the page's own filter script, nothing else
    assert external_loads(page) == []
    assert "evil.example" in page  # present, but only as escaped text
    assert 'data-marks="slow_weather"' in page
    assert "<option value=\"slow_weather\">" in page


def test_html_report_is_written_once_under_xdist(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    project(pytester, chat_server)
    result = pytester.runpytest_subprocess("--toolbench-live", "-n", "2",
                                           "--toolbench-html=report.html")
    result.assert_outcomes(passed=1, failed=1)
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert page.count('<details class="case"') == 2
    assert 'data-marks="slow_weather"' in page  # marks cross from the workers too
    assert [p.name for p in pytester.path.glob("*.html")] == ["report.html"]


def test_toolbench_html_renders_a_saved_report(
    pytester: pytest.Pytester, chat_server: ChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    project(pytester, chat_server)
    pytester.runpytest("--toolbench-live", "--toolbench-report=r.json")
    capsys.readouterr()
    report = pytester.path / "r.json"
    assert main(["html", str(report)]) == 0
    out = capsys.readouterr().out
    assert out == f"wrote {report.with_suffix('.html')} (2 cases)\n"
    page = report.with_suffix(".html").read_text(encoding="utf-8")
    assert page.index("weather[m1]") < page.index("chat[m1]")
    assert "&lt;script&gt;" in page and page.count("<script") == 1
    assert external_loads(page) == []


API_CASE = """name: greet
model: m1
endpoint: {{base_url: '{url}'}}
stages:
  - name: hello
    user: Say hi
    expect: {{text: {{$contains: hi}}}}
"""


def messages_body(text: str, thinking: str) -> dict[str, Any]:
    """A Messages API reply: a thinking block, then the text; ``end_turn`` is ``stop``."""
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m1",
            "content": [{"type": "thinking", "thinking": thinking, "signature": "s"},
                        {"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 7, "output_tokens": 3}}


def test_html_report_gives_pass_rates_per_api_filters_by_api_and_shows_reasoning(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """One case over two APIs: chat passes; messages thinks aloud, then answers wrong."""
    def answer(request: Any) -> Any:
        if request.path.endswith("/messages"):
            return json_reply(messages_body("bye", "they asked <b>politely</b>"))
        return json_reply(completion(text="hi there"))
    chat_server.set_handler(answer)
    pytester.makefile(".case.yaml", suite=API_CASE.format(url=chat_server.base_url))
    result = pytester.runpytest("--toolbench-live", "--toolbench-api=chat,messages",
                                "--toolbench-html=report.html")
    result.assert_outcomes(passed=1, failed=1)
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    apis = page[page.index("<h2>APIs</h2>"):page.index("<h2>Cases</h2>")]
    rows = re.findall(r'<tr><td>(\w+)</td><td class="num">(\d+)</td><td class="num">'
                      r'([\d/]+)</td><td class="num">([\d%]+)</td>', apis)
    assert rows == [("chat", "1", "1/1", "100%"), ("messages", "1", "0/1", "0%")]
    assert '<select data-filter="api"><option value="">all</option><option value="chat">' \
        'chat</option><option value="messages">messages</option></select>' in page
    assert 'data-nodeid="suite.case.yaml::greet[m1-messages]"' in page
    assert 'data-api="messages"' in page and 'data-api="chat"' in page
    assert ('<div class="reasoning"><div class="who">reasoning</div>'
            "<pre>they asked &lt;b&gt;politely&lt;/b&gt;</pre></div>") in page
    assert "finish stop (API: end_turn)" in page  # messages: both words
    assert "finish stop ·" in page  # chat: one word, the same in both


def test_a_page_of_one_api_has_no_api_table(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    chat_server.set_handler(lambda request: json_reply(completion(text="hi there")))
    pytester.makefile(".case.yaml", suite=API_CASE.format(url=chat_server.base_url))
    pytester.runpytest("--toolbench-live", "--toolbench-html=report.html")
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert "<h2>Models</h2>" in page and "<h2>APIs</h2>" not in page
    assert "reasoning" not in page.split("<div id=\"cases\">")[1]


def test_saved_report_keeps_marks_and_what_each_turn_sent(
    pytester: pytest.Pytester, chat_server: ChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The JSON report carries marks and request bodies, so the page drawn from it shows
    the marker filter and each turn's sent messages, collapsed."""
    project(pytester, chat_server)
    pytester.runpytest("--toolbench-live", "--toolbench-report=r.json")
    document = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))
    by_id = {case["nodeid"]: case for case in document["cases"]}
    weather = by_id["suite.case.yaml::weather[m1]"]
    assert weather["marks"] == ["slow_weather"] and by_id["suite.case.yaml::chat[m1]"][
        "marks"] == []
    request = weather["runs"][0]["stages"][0]["attempts"][0]["turns"][0]["request"]
    assert request["messages"] == [{"role": "user", "content": "Weather in Paris?"}]
    assert request["model"] == "m1" and request["tools"][0]["function"]["name"] == "get_weather"

    assert main(["html", str(pytester.path / "r.json"), "-o", "page.html"]) == 0
    page = (pytester.path / "page.html").read_text(encoding="utf-8")
    assert 'data-marks="slow_weather"' in page and '<option value="slow_weather">' in page
    sent = page[page.index('<details class="request">'):]
    sent = sent[:sent.index("</details>")]
    assert sent.startswith('<details class="request"><summary>sent 1 message</summary>')
    assert '<div class="who">user</div><pre>Weather in Paris?</pre>' in sent
    assert "tools: get_weather" in sent and "model: &quot;m1&quot;" in sent


NEWER_KEYS = {"marks", "request", "api", "completed_ms", "reasoning", "api_finish_reason"}


def without(data: Any, keys: set[str]) -> Any:
    """``data`` with ``keys`` left out of every object, at any depth."""
    if isinstance(data, dict):
        return {k: without(v, keys) for k, v in data.items() if k not in keys}
    if isinstance(data, list):
        return [without(item, keys) for item in data]
    return data


def test_a_report_written_before_marks_requests_and_apis_still_loads(
    pytester: pytest.Pytester, chat_server: ChatServer, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_toolbench.report.json_report import CaseRecord

    project(pytester, chat_server)
    pytester.runpytest("--toolbench-live", "--toolbench-report=r.json")
    path = pytester.path / "r.json"
    document = without(json.loads(path.read_text(encoding="utf-8")), NEWER_KEYS)
    case = document["cases"][0]
    turn = case["runs"][0]["stages"][0]["attempts"][0]["turns"][0]
    assert "marks" not in case and "api" not in case and "request" not in turn
    record = CaseRecord.from_json(case)
    assert record.marks == [] and record.api == "chat"
    assert record.runs[0].stages[0].attempts[0].turns[0].request is None
    path.write_text(json.dumps(document), encoding="utf-8")
    assert main(["html", str(path)]) == 0
    page = path.with_suffix(".html").read_text(encoding="utf-8")
    assert page.count('<details class="case"') == 2 and '<details class="request">' not in page


STREAMED_CALLS = """name: two_calls
model: m1
endpoint: {{base_url: '{url}'}}
tools: [{{name: get_weather}}, {{name: get_time}}]
stages:
  - name: ask
    user: Weather and time in Paris?
    stream: true
"""


def test_stream_timeline_marks_when_each_calls_arguments_completed(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """The second call's arguments come after a pause: the report says when each call's
    arguments completed, and the page's timeline marks both."""
    chunks = chunks_for(tool_calls=[("get_weather", {"city": "Paris"}),
                                    ("get_time", {"city": "Paris"})])
    second = next(i for i, c in enumerate(chunks)
                  if c["choices"] and c["choices"][0]["delta"].get("tool_calls", [{}])[0]
                  .get("index") == 1)
    chat_server.enqueue(sse_reply([*chunks[:second], SSEPause(0.3), *chunks[second:-2],
                                   SSEPause(0.2), *chunks[-2:]]))
    pytester.makefile(".case.yaml", suite=STREAMED_CALLS.format(url=chat_server.base_url))
    result = pytester.runpytest("--toolbench-live", "--toolbench-report=r.json",
                                "--toolbench-html=report.html")
    result.assert_outcomes(passed=1)
    reply = json.loads((pytester.path / "r.json").read_text(encoding="utf-8"))["cases"][0][
        "runs"][0]["stages"][0]["attempts"][0]["turns"][0]["reply"]
    first, then = (call["completed_ms"] for call in reply["tool_calls"])
    assert first < 300 <= then  # the pause came between them
    # and another before the stream's end: 200 ms on the server's clock; the client stamps
    # each chunk when it reads it, which a busy machine (an xdist neighbour) can delay
    assert then + 150 <= reply["latency_ms"]
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    timeline = page[page.index('<div class="timeline">'):]
    timeline = timeline[:timeline.index("</div>")]
    assert timeline.count('stroke="#7a5af8"') == 2  # a tick per call
    assert f"get_weather arguments complete {first:.1f} ms" in timeline
    assert f"get_time arguments complete {then:.1f} ms" in timeline


def test_toolbench_html_refuses_what_is_not_a_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"tests": []}', encoding="utf-8")
    assert main(["html", str(other)]) == 2
    assert capsys.readouterr().err == (
        f"toolbench html: error: {other} is not a toolbench JSON report (write one with "
        "pytest --toolbench-report PATH)\n")
    assert not other.with_suffix(".html").exists()


def test_toolbench_html_names_the_case_and_key_that_no_session_could_have_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "report.json"
    case = {"nodeid": "a.case.yaml::a", "case": "a", "model": None, "file": "a.case.yaml",
            "line": 1, "outcome": "passed", "passes": 1, "runs_total": 1,
            "min_pass_rate": 1.0, "error": None, "stages": 1, "turns": 1, "tool_calls": 0,
            "total_tokens": None, "latency_ms": None, "ttft_ms": None,
            "runs": [{"number": 1, "passed": True, "error": None, "stages": "all of them"}]}
    report.write_text(json.dumps({"version": 1, "summary": {}, "cases": [case]}),
                      encoding="utf-8")

    assert main(["html", str(report)]) == 2
    assert capsys.readouterr().err == (
        f"toolbench html: error: {report}: case a.case.yaml::a: runs.0.stages: Input should"
        " be a valid list (not a case record of a toolbench JSON report)\n")
    assert not report.with_suffix(".html").exists()


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium on PATH "
                    "(apt-get install -y chromium); .ci/run installs it")
def test_a_browser_runs_the_filters_of_the_page(
    pytester: pytest.Pytester, chat_server: ChatServer
) -> None:
    """The page's script runs under its own Content-Security-Policy and applies the filter
    in the link: only the failed case is left shown."""
    project(pytester, chat_server)
    pytester.runpytest("--toolbench-live", "--toolbench-html=report.html")
    url = (pytester.path / "report.html").as_uri() + "#outcome=failed"
    assert CHROMIUM is not None
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url],
        capture_output=True, text=True, timeout=60, check=True)
    cases = dict(re.findall(r'<details class="case" data-nodeid="([^"]+)"([^>]*)>',
                            done.stdout))
    assert set(cases) == {"suite.case.yaml::weather[m1]", "suite.case.yaml::chat[m1]"}
    assert "hidden" not in cases["suite.case.yaml::weather[m1]"]
    assert "hidden" in cases["suite.case.yaml::chat[m1]"]
    assert '<span id="shown">1</span>' in done.stdout


SCREENSHOT_SUITE = """name: weather
model: m1
endpoint: {{base_url: '{url}'}}
marks: [slow_weather]
tools:
  - name: get_weather
    result: {{temp_c: 21}}
stages:
  - name: ask
    user: Weather in Paris?
    stream: true
    expect:
      tool_calls: [{{name: get_weather, arguments: {{city: Paris}}}}]
---
name: chat
model: m1
endpoint: {{base_url: '{url}'}}
stages:
  - name: hello
    user: hi
"""
WINDOW = (1000, 900)
FAILED_RED = (0xB4, 0x23, 0x18)
"""The failed badge's colour (report.css ``--fail``): drawn only if the CSS applied."""


@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium on PATH "
                    "(apt-get install -y chromium); .ci/run installs it")
def test_a_browser_draws_the_page(pytester: pytest.Pytester, chat_server: ChatServer,
                                  tmp_path: Path) -> None:
    """A screenshot of a small report (a streamed call that fails, a chat that passes) is
    the window's size, and not blank: many colours, the failed badge's red among them.

    ``TOOLBENCH_SCREENSHOT=docs/report-screenshot.png`` keeps the screenshot there: the
    README's picture is this page."""
    role, header, *arguments, finish, usage = chunks_for(
        tool_calls=[("get_weather", {"city": "Lyon"})])
    pause = SSEPause(0.1)  # so that the timeline's marks stand apart
    streamed = sse_reply([role, pause, header, pause, *arguments, pause, finish, usage])

    def answer(request: Any) -> Any:
        if request.json().get("stream"):
            return streamed
        return json_reply(completion(text="Hello! How can I help you today?"))
    chat_server.set_handler(answer)
    pytester.makeini(INI)
    pytester.makefile(".case.yaml", suite=SCREENSHOT_SUITE.format(url=chat_server.base_url))
    pytester.runpytest("--toolbench-live", "--toolbench-html=report.html")
    png = tmp_path / "page.png"
    assert CHROMIUM is not None
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", f"--window-size={WINDOW[0]},{WINDOW[1]}",
                    f"--screenshot={png}", (pytester.path / "report.html").as_uri()],
                   capture_output=True, timeout=60, check=True)
    image = read_png(png)
    assert (image.width, image.height) == WINDOW
    colours = {colour[:3] for colour in image.colours()}
    assert len(colours) > 50 and FAILED_RED in colours
    if keep := os.environ.get("TOOLBENCH_SCREENSHOT"):
        shutil.copyfile(png, keep)
