"""Where predict reads a row of a table: each of the model's family's fields (its FamilyInference's
`fields`) from a column of the field's name, except `text`, read from predict.text_column, and
`text_pair`, read from predict.text_pair_column and only where that is set; the output's `id` from
predict.id_column and the gold label from predict.label_column. A field every row must have (the
family's `required`, and a text pair asked for by predict.text_pair_column) must be a column of
every csv, tsv or parquet file, and a row where it is null is rejected as `missing_<field>`; another
field is read where a file has its column. A field named `id` is the row's id, not a column: a
family's own files give it (read_file), a table predict.id_column."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import PredictSection
from ..finetuning.inference import FamilyInference

SETTINGS = {"text": "text_column", "text_pair": "text_pair_column"}
"""The fields whose column a predict setting names (the others' is their own name)."""
ASKED = ("text_pair",)
"""Fields that every row must have once a setting names their column (they are read only then)."""


@dataclass(frozen=True)
class Columns:
    fields: dict[str, str]
    """Field -> column, in the family's order: the fields read from a table."""
    demanded: tuple[str, ...]
    """The fields whose column every file must have and whose value every row."""
    id: str | None = None
    label: str | None = None

    def keys(self) -> dict[str, str]:
        """Every column read, by its key in a row: the fields', and `id` and `label` where set."""
        extra = {k: c for k, c in (("id", self.id), ("label", self.label)) if c}
        return {**self.fields, **extra}

    def needed(self) -> dict[str, str]:
        """The columns every file must have, by key (keys())."""
        return {k: c for k, c in self.keys().items() if k in ("id", "label") or k in self.demanded}

    def source(self, key: str) -> str:
        """What named a key's column, for messages."""
        if key in ("id", "label"):
            return f"predict.{key}_column"
        if key in SETTINGS:
            return f"predict.{SETTINGS[key]}"
        return f"the model's field {key}"


def table_columns(section: PredictSection, inference: FamilyInference) -> Columns:
    """The columns predict reads for a family's rows (the module's docstring)."""
    fields, demanded = {}, list(inference.required)
    for field in inference.fields:
        if field == "id":
            continue
        column = getattr(section, SETTINGS[field]) if field in SETTINGS else field
        if column is None:
            continue
        fields[field] = column
        if field in ASKED and field not in demanded:
            demanded.append(field)
    return Columns(fields, tuple(f for f in fields if f in demanded), section.id_column, section.label_column)


__all__ = ["ASKED", "Columns", "SETTINGS", "table_columns"]
