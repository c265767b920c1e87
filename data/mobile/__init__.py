"""Mobile multi-turn dialogue benchmark generator (MTDTool-style state machine)."""
from .generator import (
    CATEGORIES,
    FIRST_TURN_CATEGORIES,
    MULTI_TURN_CATEGORIES,
    P_INIT,
    P_TASK,
    P_TODO,
    STATES,
    GeneratorConfig,
    build_dialogues,
    format_summary,
    generate_benchmark,
    load_bank,
    p_switch,
    partition,
)

__all__ = [
    "CATEGORIES", "FIRST_TURN_CATEGORIES", "MULTI_TURN_CATEGORIES", "P_INIT", "P_TASK", "P_TODO",
    "STATES", "GeneratorConfig", "build_dialogues", "format_summary", "generate_benchmark",
    "load_bank", "p_switch", "partition",
]
