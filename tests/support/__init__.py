"""Helpers the tests share (tests/conftest.py holds only fixtures): import them as
``from tests.support.http import free_port``."""
