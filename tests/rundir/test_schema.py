"""The run directory's schema: a typed row names exactly its table's documented columns."""

from typing import get_type_hints

from rundir import schema

PYTHON_TYPES = {"float64": float, "int64": int, "string": str}


def test_a_steps_row_is_the_steps_table_column_for_column_and_type_for_type():
    hints = get_type_hints(schema.StepRow)
    assert list(hints) == schema.column_names("steps")
    for name, (kind, required, _) in schema.STEP_COLUMNS.items():
        expected = PYTHON_TYPES[kind] if required else PYTHON_TYPES[kind] | None
        assert hints[name] == expected, f"StepRow.{name}: {hints[name]}, the table says {kind} (required: {required})"
