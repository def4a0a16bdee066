"""``parametrize:`` on an agent case: each row an item whose values fill ``${name}`` in the
``user`` text, the factory's ``init`` and the expectations, as in the plugin's own loop.

The agent is the support agent on the openai SDK (``support.agents.openai_chat``), against
the loopback chat server; the replays run with the server stopped.
"""

from __future__ import annotations

import pytest
from support.chat_server import (
    JsonReply,
    RecordedRequest,
    completion,
    json_reply,
    start_chat_server,
)

WEATHER_CASE = """name: weather
agent:
  python: support.agents.openai_chat:make_agent
  init: {system: "You are the weather desk of ${city}."}
endpoint: {base_url: "BASE_URL"}
parametrize:
  - {city: Paris, degrees: 21}
  - {city: Rome, degrees: 27}
stages:
  - name: ask
    user: How warm is it in ${city}?
    expect:
      text: {$contains: "${city}: ${degrees}"}
      requests: 1
"""


def forecast(request: RecordedRequest) -> JsonReply:
    """The desk's city (from the system prompt) and its temperature."""
    system = request.json()["messages"][0]["content"]
    city = system.rsplit(" ", 1)[-1].rstrip(".")
    degrees = {"Paris": 21, "Rome": 27}.get(city, 0)
    return json_reply(completion(f"{city}: {degrees} degrees"))


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "-v", *args)


def test_each_row_of_an_agent_cases_table_fills_its_user_text_init_and_expectations(
        pytester: pytest.Pytester) -> None:
    with start_chat_server() as server:
        server.set_handler(forecast)
        pytester.makefile(".case.yaml", weather=WEATHER_CASE.replace("BASE_URL",
                                                                     server.base_url))
        recorded = run(pytester, "--toolbench-record")
        sent = [request.json()["messages"] for request in server.requests]
    recorded.assert_outcomes(passed=2)
    assert [[message["content"] for message in messages] for messages in sent] == [
        ["You are the weather desk of Paris.", "How warm is it in Paris?"],
        ["You are the weather desk of Rome.", "How warm is it in Rome?"]]
    folder = pytester.path / "__cassettes__" / "weather"
    assert sorted(path.name for path in folder.iterdir()) == [
        "weather[Paris-21].yaml", "weather[Rome-27].yaml"]
    replayed = run(pytester)  # the server is gone
    replayed.assert_outcomes(passed=2)
    replayed.stdout.fnmatch_lines(["*weather.case.yaml::weather[[]Paris-21[]] PASSED*",
                                   "*weather.case.yaml::weather[[]Rome-27[]] PASSED*"])


def test_a_row_value_the_agent_does_not_answer_with_fails_that_row_only(
        pytester: pytest.Pytester) -> None:
    case = WEATHER_CASE.replace("{city: Rome, degrees: 27}", "{city: Rome, degrees: 30}")
    with start_chat_server() as server:
        server.set_handler(forecast)
        pytester.makefile(".case.yaml", weather=case.replace("BASE_URL", server.base_url))
        result = run(pytester, "--toolbench-live")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*weather.case.yaml:13: weather[[]Rome-30[]]: stages[[]0].expect.text:*Rome: 30*"])


def test_an_undefined_name_in_an_agents_init_is_a_collection_error_at_its_line(
        pytester: pytest.Pytester) -> None:
    pytester.makefile(".case.yaml", weather=WEATHER_CASE.replace(
        "weather desk of ${city}", "weather desk of ${town}").replace(
        "BASE_URL", "http://127.0.0.1:9/v1"))
    result = run(pytester)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([("*weather.case.yaml:4: agent.init.system: ${town} is not"
                                  " defined*")])
