"""Tools the example cases run with ``python: example_tools:FUNCTION``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

Euros = Annotated[int, Field(ge=1, le=1000)]
"""An amount of money: the schema the model is sent says 1 to 1000."""

FORECASTS = {"paris": (21, "sunny"), "berlin": (14, "cloudy"), "tokyo": (26, "humid")}


def get_weather(city: str, unit: str = "celsius") -> dict[str, object]:
    """A canned forecast, so recordings replay the same tool results."""
    temp_c, sky = FORECASTS.get(city.strip().lower(), (18, "clear"))
    temp = temp_c if unit == "celsius" else round(temp_c * 9 / 5 + 32, 1)
    return {"city": city, "temp": temp, "unit": unit, "sky": sky}


class Account:
    """A bank account, the toolbox of ``bank.case.yaml``: the model's calls change its
    balance and history, which the case checks afterwards."""

    def __init__(self, balance: int = 0, owner: str = "") -> None:
        self.owner = owner
        self.balance = balance
        self.history: list[str] = []
        self.closed = False

    def deposit(self, amount: Euros) -> dict[str, object]:
        """Put money into the account.

        Args:
            amount: How much to deposit, in euros.
        """
        self._check_open()
        self.balance += amount
        self.history.append(f"deposit {amount}")
        return {"balance": self.balance}

    def withdraw(self, amount: Euros) -> dict[str, object]:
        """Take money out of the account.

        Args:
            amount: How much to withdraw, in euros.
        """
        self._check_open()
        if amount > self.balance:
            raise ValueError(f"insufficient funds: the balance is {self.balance}")
        self.balance -= amount
        self.history.append(f"withdraw {amount}")
        return {"balance": self.balance}

    def get_balance(self) -> int:
        """The balance now, in euros."""
        return self.balance

    def close_account(self) -> str:
        """Close the account for good."""
        self.closed = True
        return "closed"

    def _check_open(self) -> None:
        if self.closed:
            raise ValueError("the account is closed")
