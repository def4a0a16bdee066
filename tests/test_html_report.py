"""--toolbench-html and ``toolbench html``: one self-contained page, from the report's data."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.chat_server import ChatServer, completion, json_reply

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
