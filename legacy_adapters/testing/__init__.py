"""Test-only stand-ins for a QingLong 2.x install (a data directory and an HTTP double)."""
