"""Test-only providers, registered on import (tests import this module by name; conftest puts tests/ on
sys.path). `test_tunable` takes an option and counts its instances."""

from kernels.naive import NaiveEager
from kernels.registry import register


@register
class Tunable(NaiveEager):
    name = "test_tunable"
    description = "naive_eager with a `scale` option that changes nothing (tests only)"
    instances = 0

    def __init__(self, options=None):
        type(self).instances += 1
        super().__init__(options)

    def parse_options(self, options: dict):
        unknown = sorted(set(options) - {"scale"})
        if unknown:
            raise ValueError(f"test_tunable: unknown option {unknown[0]!r}; allowed: scale")
        return dict(options)

    def options_record(self):
        return dict(self.options) or None
