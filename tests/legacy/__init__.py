"""Tests of legacy_adapters: the 2.x callback parser, time units, reader, auth and test double."""
