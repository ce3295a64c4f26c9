"""The test suite, by room: ``unit`` (pure rules), ``contract`` (one suite over SQLite, PostgreSQL and the
in-memory store), ``legacy`` (2.x's facts and doubles), ``integration`` (the bridge beside a double of 2.x),
``projection``, ``importer``, ``reports``, ``web``, ``cli``, ``deploy``, ``hostile`` (`pytest -m hostile`),
and ``bench`` (benchmarks that print figures; run as modules, never timed assertions). ``support`` holds
helpers tests share, such as the Run commands composed over RunService's one write API.

Tests may import anything; doubles of 2.x are named as doubles and follow docs/legacy-2x.md.
"""
