"""`Translation` and `TranslationVariableLanguages`: texts in several languages per row."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa

from jaxfeed.data.features.base import Feature, bad_value, unwrap_storage
from jaxfeed.data.features.sequence import List
from jaxfeed.data.features.value import Value


@dataclass(frozen=True)
class Translation(Feature):
    """One text per language per row, stored as a struct of strings (languages sorted).

    >>> from jaxfeed import Dataset, Features, Translation
    >>> feats = Features({"t": Translation(languages=["fr", "en"])})
    >>> Dataset.from_dict({"t": [{"en": "cat", "fr": "chat"}]}, features=feats)[0]
    {'t': {'en': 'cat', 'fr': 'chat'}}
    """

    languages: list[str]
    id: str | None = field(default=None, repr=False)
    _type: ClassVar[str] = "Translation"

    def __post_init__(self) -> None:
        object.__setattr__(self, "languages", list(self.languages))

    def __hash__(self) -> int:
        return hash(("Translation", tuple(self.languages)))

    @property
    def pa_type(self) -> pa.DataType:
        return pa.struct({lang: pa.string() for lang in sorted(self.languages)})

    def flatten(self) -> dict[str, Value]:
        return {lang: Value("string") for lang in sorted(self.languages)}

    def encode_example(self, value: Any) -> Any:
        return value

    def decode_example(self, value: Any) -> Any:
        return value

    def encode(self, values: Any, column: str) -> pa.Array:
        if isinstance(values, pa.Array | pa.ChunkedArray):
            values = values.to_pylist()
        values = list(values)
        langs = set(self.languages)
        for row, value in enumerate(values):
            if value is not None and (not isinstance(value, Mapping) or set(value) - langs):
                raise bad_value(column, row, f"a dict of texts in {sorted(langs)}", value)
        return pa.array(values, type=self.pa_type)

    def to_python(self, array: pa.Array) -> list:
        return unwrap_storage(array).to_pylist()

    def to_numpy(self, array: pa.Array) -> list:
        return self.to_python(array)

    def to_dict(self) -> dict:
        return {"_type": "Translation", "languages": list(self.languages)}


@dataclass(frozen=True)
class TranslationVariableLanguages(Feature):
    """Texts in a varying set of languages per row, stored as aligned ``language`` and
    ``translation`` lists (sorted by language, then text), as `datasets` stores them.

    >>> from jaxfeed import Dataset, Features, TranslationVariableLanguages
    >>> feats = Features({"t": TranslationVariableLanguages(languages=["en", "fr"])})
    >>> Dataset.from_dict({"t": [{"en": "cat", "fr": ["chatte", "chat"]}]}, features=feats)[0]["t"]
    {'language': ['en', 'fr', 'fr'], 'translation': ['cat', 'chat', 'chatte']}
    """

    languages: list | None = None
    num_languages: int | None = None
    id: str | None = field(default=None, repr=False)
    _type: ClassVar[str] = "TranslationVariableLanguages"

    def __post_init__(self) -> None:
        langs = sorted(set(self.languages)) if self.languages else None
        object.__setattr__(self, "languages", langs)
        object.__setattr__(self, "num_languages", len(langs) if langs else None)

    def __hash__(self) -> int:
        return hash(("TranslationVariableLanguages", tuple(self.languages or ())))

    @property
    def pa_type(self) -> pa.DataType:
        return pa.struct({"language": pa.list_(pa.string()), "translation": pa.list_(pa.string())})

    def flatten(self) -> dict[str, List]:
        return {"language": List(Value("string")), "translation": List(Value("string"))}

    def encode_example(self, value: Mapping[str, Any]) -> dict[str, Any]:
        if set(value) == {"language", "translation"}:
            return dict(value)
        if self.languages and set(value) - set(self.languages):
            unknown = ", ".join(sorted(set(value) - set(self.languages)))
            raise ValueError(
                f"some languages in the example ({unknown}) are not in {', '.join(self.languages)}"
            )
        pairs = []
        for lang, text in value.items():
            if isinstance(text, str):
                pairs.append((lang, text))
            else:
                pairs.extend((lang, t) for t in text)
        languages, translations = zip(*sorted(pairs), strict=True) if pairs else ((), ())
        return {"language": languages, "translation": translations}

    def decode_example(self, value: Any) -> Any:
        return value

    def encode(self, values: Any, column: str) -> pa.Array:
        if isinstance(values, pa.Array | pa.ChunkedArray):
            values = values.to_pylist()
        out = []
        for row, value in enumerate(values):
            if value is None:
                out.append(None)
                continue
            if not isinstance(value, Mapping):
                raise bad_value(column, row, "a dict of language -> text(s)", value)
            try:
                out.append(self.encode_example(value))
            except ValueError as err:
                raise bad_value(column, row, str(err), value) from None
        return pa.array(out, type=self.pa_type)

    def to_python(self, array: pa.Array) -> list:
        return unwrap_storage(array).to_pylist()

    def to_numpy(self, array: pa.Array) -> list:
        return self.to_python(array)

    def to_dict(self) -> dict:
        return {
            "_type": "TranslationVariableLanguages",
            "languages": self.languages,
            "num_languages": self.num_languages,
        }
