"""A Hypothesis state machine: the store behaves like a dict of id → content.

Every run of the machine works on the test's store (one per backend) as two users of
its own, so runs never see each other's items.
"""

from __future__ import annotations

from itertools import count
from uuid import uuid4

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
    run_state_machine_as_test,
)

from ledgermem import Memory, NotFound

# Every word carries a number unique to its text, so two generated texts never share a
# word and dedup (>80% word overlap) can only merge a text with itself.
_serial = count()
words = st.lists(st.from_regex(r"[a-zà-ÿ]{1,8}", fullmatch=True), min_size=1, max_size=8)
separators = st.sampled_from([" ", ", ", "! ", "\n", " - "])


@st.composite
def unique_texts(draw: st.DrawFn) -> str:
    n = next(_serial)
    tokens = [f"{w}{n}" for w in draw(words)]
    joined = tokens[0]
    for token in tokens[1:]:
        joined += draw(separators) + token
    return draw(st.sampled_from(["", "  ", "\t"])) + joined + draw(st.sampled_from(["", " "]))


class StoreMatchesDict(RuleBasedStateMachine):
    """Rules remember, re-remember (dedup), update, forget and get; the model is a dict."""

    ids = Bundle("ids")

    def __init__(self, memory: Memory) -> None:
        super().__init__()
        run = uuid4().hex
        self.user = memory.for_user(f"alice-{run}")
        self.other = memory.for_user(f"bob-{run}")
        self.model: dict[str, str] = {}
        self.forgotten: set[str] = set()

    @rule(target=ids, text=unique_texts())
    def remember(self, text: str) -> str:
        item = self.user.remember(text)
        assert item.id not in self.model
        self.model[item.id] = text.strip()
        return item.id

    @rule(text=unique_texts())
    def someone_else_remembers(self, text: str) -> None:
        self.other.remember(text)  # must never show up in alice's view

    @rule(item_id=ids)
    def remember_again(self, item_id: str) -> None:
        assert self.user.remember(self.model[item_id]).id == item_id

    @rule(item_id=ids, text=unique_texts())
    def update_content(self, item_id: str, text: str) -> None:
        assert self.user.update(item_id, content=text).content == text.strip()
        self.model[item_id] = text.strip()

    @rule(item_id=consumes(ids))
    def forget(self, item_id: str) -> None:
        self.user.forget(item_id)
        del self.model[item_id]
        self.forgotten.add(item_id)

    @rule(item_id=ids)
    def get(self, item_id: str) -> None:
        assert self.user.get(item_id).content == self.model[item_id]

    @rule(data=st.data())
    def get_forgotten(self, data: st.DataObject) -> None:
        if self.forgotten:
            item_id = data.draw(st.sampled_from(sorted(self.forgotten)))
            try:
                self.user.get(item_id)
            except NotFound:
                return
            raise AssertionError(f"forgotten {item_id} came back")

    @invariant()
    def listing_matches_model(self) -> None:
        listed = self.user.all_knowledge(limit=None, include_superseded=True)
        assert {i.id for i in listed["items"]} == set(self.model)
        assert listed["total"] == len(self.model)

    @invariant()
    def every_get_matches_model(self) -> None:
        for item_id, content in self.model.items():
            assert self.user.get(item_id).content == content

    @invariant()
    def bob_sees_none_of_alices_items(self) -> None:
        assert not {i.id for i in self.other.all_knowledge(limit=None)["items"]} & set(
            self.model)


def test_store_matches_dict(mem: Memory) -> None:
    class OnTheTestsStore(StoreMatchesDict):
        def __init__(self) -> None:
            super().__init__(mem)

    run_state_machine_as_test(
        OnTheTestsStore,
        settings=settings(max_examples=30, stateful_step_count=20, deadline=None))
