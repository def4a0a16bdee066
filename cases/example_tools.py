"""Tools the example cases run with ``python: example_tools:FUNCTION``."""

from __future__ import annotations

FORECASTS = {"paris": (21, "sunny"), "berlin": (14, "cloudy"), "tokyo": (26, "humid")}


def get_weather(city: str, unit: str = "celsius") -> dict[str, object]:
    """A canned forecast, so recordings replay the same tool results."""
    temp_c, sky = FORECASTS.get(city.strip().lower(), (18, "clear"))
    temp = temp_c if unit == "celsius" else round(temp_c * 9 / 5 + 32, 1)
    return {"city": city, "temp": temp, "unit": unit, "sky": sky}
