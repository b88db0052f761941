"""Pytest plugins of the test suite (registered from ``tests/conftest.py``)."""
