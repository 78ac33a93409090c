"""The compile choice's report lines: each kernel's verdict against the traced forward, and
the trace's own effect (model/apply_choice.py)."""

from forge_tui.model.apply_choice import choice_lines


def _row(d: str, sp: float, lo: float, hi: float, kept: bool) -> dict:
    return {"dir": d, "label": d, "speedup": sp, "spread": [lo, hi], "kept": kept, "error": None}


def test_verdicts_tell_a_loss_from_a_tie_and_name_the_trace():
    choice = {
        "rows": [
            _row("k/R1", 1.015, 1.010, 1.022, True),
            _row("k/R6", 1.0007, 0.986, 1.014, False),
            _row("k/R4", 0.768, 0.53, 1.22, False),
        ],
        "kept": 1,
        "error": None,
        "trace": {"speedup": 1.0586, "spread": [1.035, 1.087]},
    }
    text = "\n".join(choice_lines(choice))
    assert "the traced forward alone, compiled: 1.059x over torch.compile of the model (p10-p90 1.03-1.09" in text
    assert "k/R1: 1.015x over the traced forward (p10-p90 1.01-1.02): kept" in text
    assert "k/R6: 1.001x over the traced forward (p10-p90 0.99-1.01): left out (not distinguishably faster" in text
    assert (
        "k/R4: 0.768x over the traced forward (p10-p90 0.53-1.22): left out (Inductor's fusion is faster there)" in text
    )


def test_no_choice_no_lines():
    assert choice_lines(None) == [] and choice_lines({"rows": [], "error": None}) == []
