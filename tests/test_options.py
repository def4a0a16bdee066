"""The plugin's options: each declared once (``settings.OPTIONS``), seen by pytest as a flag
and an ini key whose help says the default that a session without either really gets."""

from __future__ import annotations

import pytest

from pytest_toolbench.settings import OPTIONS, SETTINGS_KEY, Mode

SETTING_OF = {"mode": "mode", "timeout": None, "max_reply_bytes": "max_reply_bytes",
              "max_stream_events": "max_stream_events", "concurrency": "concurrency",
              "replay_speed": "replay_speed", "match_timeout": "match_timeout_s",
              "breaker_threshold": "breaker_threshold", "breaker_cooldown": "breaker_cooldown_s",
              "files": "files"}
"""Option -> the Settings field a session without the flag or ini key gets its default in
(timeout: applied per endpoint, see test_the_timeout_default_is_what_an_endpoint_gets)."""


def squeezed(text: str) -> str:
    """``text`` without whitespace: pytest's help wraps lines wherever it likes."""
    return "".join(text.split())


def test_pytest_help_shows_every_option_as_flag_and_ini_key_with_its_help(
        pytester: pytest.Pytester) -> None:
    text = pytester.runpytest("--help").stdout.str()
    start = text.index(f"  {OPTIONS[0].ini} ")  # ini keys follow the flags
    flags, inis = text[:start], text[start:]
    for option in OPTIONS:
        assert squeezed(f"{option.flag}={option.metavar} {option.help_text}") in \
            squeezed(flags), option.name
        assert squeezed(f"{option.ini} ") in squeezed(inis), option.name
        assert squeezed(option.help_text) in squeezed(inis), option.name


@pytest.mark.parametrize("option", [o for o in OPTIONS if o.default is not None],
                         ids=lambda option: option.name)
def test_the_help_says_the_default_a_session_gets(pytester: pytest.Pytester,
                                                  option: object) -> None:
    """With neither the flag nor the ini key, the setting is the option's default, and its
    help ends by saying that value."""
    from pytest_toolbench.settings import Option, _shown

    assert isinstance(option, Option)
    shown = option.shown or _shown(option.default)
    assert option.help_text.endswith(f"(default {shown})")
    assert str(_shown(option.default)) in shown
    name = SETTING_OF[option.name]
    if name is not None:
        settings = pytester.parseconfigure().stash[SETTINGS_KEY]
        assert getattr(settings, name) == option.default


def test_the_timeout_default_is_what_an_endpoint_gets(pytester: pytest.Pytester) -> None:
    from pytest_toolbench.casefile.schema import Endpoint

    (timeout,) = [option for option in OPTIONS if option.name == "timeout"]
    settings = pytester.parseconfigure().stash[SETTINGS_KEY]
    assert settings.endpoint_for(Endpoint()).timeout_s == timeout.default
    assert "(default 60)" in timeout.help_text


def test_every_option_is_declared_once() -> None:
    names = [option.name for option in OPTIONS]
    assert len(names) == len(set(names))
    assert set(SETTING_OF) <= set(names)
    assert Mode.REPLAY in [option.default for option in OPTIONS]
