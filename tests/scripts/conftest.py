"""The walkthrough's fixture (`walked`, run once per test session) is in tests/conftest.py,
shared with the console's tests; its parts are named here too for the scripts' tests."""

from tests.conftest import Walked, newcomer_env

__all__ = ["Walked", "newcomer_env"]
