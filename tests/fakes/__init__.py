"""Test doubles shared by the unit tests (never imported by planrunner itself)."""
