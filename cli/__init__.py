"""The ``magicselector`` command line: the top layer, composing runtime, data, export, train and bench."""
from .main import DEMO_FILE, build_parser, main

__all__ = ["DEMO_FILE", "build_parser", "main"]
