"""Adapters to a running QingLong 2.x install: its callbacks, database, auth cache and time units."""
