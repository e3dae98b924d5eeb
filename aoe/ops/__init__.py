"""Operator catalogue: how each CANN operator of a graph is priced, keyed in the bank, and varied."""
from .catalogue import (BOTH, HIGH_PERFORMANCE, HIGH_PRECISION, IMPL_MODES, PERF_ONLY, OpCase, Unsupported,
                        Variant, describe)

__all__ = ["describe", "OpCase", "Variant", "Unsupported", "IMPL_MODES", "HIGH_PERFORMANCE", "HIGH_PRECISION",
           "BOTH", "PERF_ONLY"]
