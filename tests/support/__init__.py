"""Helpers shared by several test rooms (not tests themselves)."""
