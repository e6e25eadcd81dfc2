"""What the session adapters keep of a framework's item (``item_metadata``): the item
whole when the turn's metadata fits ``MAX_JSON_CHARS``, else a copy with its longest
strings cut and the turn flagged; short strings, ``keep_whole`` fields and the
framework's own check are respected. Pure functions: no store, no framework."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ledgermem.adapters.session_items import MIN_CUT_CHARS, cut_strings, item_metadata
from ledgermem.errors import InvalidInput
from ledgermem.validation import MAX_JSON_CHARS

AROUND = {"channel": "chat"}


def size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False))


def test_an_item_that_fits_is_kept_whole_and_unflagged() -> None:
    item = {"role": "user", "content": "z" * 90_000, "extra": {"n": [1, 2, 3]}}
    assert item_metadata("item", item, AROUND) == {"channel": "chat", "item": item}


def test_a_longer_item_loses_only_its_longest_strings_and_is_flagged() -> None:
    item: dict[str, Any] = {"id": "i" * MIN_CUT_CHARS, "long": "a" * 300_000,
                            "longer": "é" * 500_000, "medium": "m" * 5_000, "n": 7,
                            "list": ["b" * 200_000, "short"]}
    meta = item_metadata("item", item, AROUND)
    cut = meta["item"]
    assert meta["truncated"] is True and meta["original_length"] == size(item)
    assert MAX_JSON_CHARS - 100 < size(meta) <= MAX_JSON_CHARS  # no more than needed
    assert (cut["id"], cut["medium"], cut["n"], cut["list"][1]) == \
        (item["id"], item["medium"], 7, "short")  # short strings and numbers stay
    for name, text in (("long", cut["long"]), ("longer", cut["longer"]),
                       ("list", cut["list"][0])):
        kept, _, marker = text.partition("… [cut: ")
        original = item[name] if name != "list" else item["list"][0]
        assert original.startswith(kept) and len(kept) > 5_000, name
        assert marker == f"{len(original) - len(kept):,} characters]"


def test_keep_whole_fields_are_never_cut_and_a_refusal_names_them() -> None:
    item = {"state": {"notes": "s" * 50_000}, "text": "t" * 200_000}
    meta = item_metadata("item", item, AROUND, keep_whole=frozenset({"state"}))
    assert meta["item"]["state"] == item["state"] and meta["truncated"] is True
    with pytest.raises(InvalidInput, match="state, kept whole"):
        item_metadata("item", {"state": {"notes": "s" * 120_000}, "text": "t"}, AROUND,
                      keep_whole=frozenset({"state"}))


def test_an_item_the_check_refuses_with_markers_is_cut_bare_at_base64_boundaries() -> None:
    encoded = "QUJD" * 60_000  # base64 of b"ABC" * 60,000

    def decodes(data: dict[str, Any]) -> bool:
        return "…" not in data["data"] and len(data["data"]) % 4 == 0

    meta = item_metadata("item", {"data": encoded, "mime": "image/png"}, AROUND,
                         valid=decodes)
    assert encoded.startswith(meta["item"]["data"]) and decodes(meta["item"])
    with pytest.raises(InvalidInput, match="no cut copy"):
        item_metadata("item", {"data": encoded}, AROUND, valid=lambda _: False)


def test_an_item_of_many_short_strings_is_refused_not_mangled() -> None:
    item = {"rows": ["r" * MIN_CUT_CHARS] * 2_000}
    with pytest.raises(InvalidInput, match=f"cut to {MIN_CUT_CHARS} characters"):
        item_metadata("item", item, AROUND)


def test_cut_strings_leaves_what_a_marker_would_lengthen() -> None:
    assert cut_strings({"a": "x" * 120, "b": ["y" * 5_000]}, 100) == \
        {"a": "x" * 120, "b": ["y" * 100 + "… [cut: 4,900 characters]"]}
