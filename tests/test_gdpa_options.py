"""Provider options contract (kernels/registry.py) and the GDPA op's options, dispatch and sync-freedom."""
import pytest

from kernels.registry import Provider, get_provider


def test_a_provider_without_options_rejects_any():
    with pytest.raises(ValueError, match=r"^reference: takes no options, got 'fwd_tiles'$"):
        get_provider("reference", {"fwd_tiles": [64, 64, 4, 2]})
    p = get_provider("reference", {})
    assert p.options is None and p.options_record() is None
    assert get_provider("reference").options is None


def test_parse_options_runs_once_at_construction():
    calls = []

    class Counted(Provider):
        name = "counted"

        def parse_options(self, options):
            calls.append(dict(options))
            if set(options) - {"x"}:
                raise ValueError(f"counted: unknown option {sorted(set(options) - {'x'})[0]!r}; allowed: x")
            return options.get("x", 0)

        def options_record(self):
            return {"x": self.options}

    p = Counted({"x": 3})
    assert p.options == 3 and p.options_record() == {"x": 3} and calls == [{"x": 3}]
    with pytest.raises(ValueError, match="unknown option 'y'"):
        Counted({"y": 1})
