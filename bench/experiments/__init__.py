"""Experiments behind the decisions in docs/bench/: scripts that take their data as arguments and are run by hand.

Each module runs as ``python3 -m magicselector.bench.experiments.NAME --help`` and is smoke-tested on a
tiny set in tests/test_experiments.py. They are not part of ``magicselector bench``: their results
informed a shipped default, and they stay so that the next change to it can be measured the same way.
"""
