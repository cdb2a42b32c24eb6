"""``PagedStorage.batch_delete``: the SDK's page removal (used by ``hicache ping``)."""

from __future__ import annotations

import pytest
from paged_helpers import hkey, mha, randomize, scattered_slots

from hicache_sdk.errors import NotRegisteredError


def test_batch_delete_removes_only_named_pages(make_storage) -> None:  # type: ignore[no-untyped-def]
    pool = randomize(mha())
    s = make_storage(pool)
    keys = [hkey(i) for i in range(4)]
    assert s.batch_set_v1(keys, scattered_slots(pool, 4)) == [True] * 4
    s.batch_delete([keys[1], keys[1], hkey(99)])  # duplicates and missing keys are fine
    assert [s.exists(k) for k in keys] == [True, False, True, True]
    assert s.batch_exists(keys) == 1
    # a deleted page can be written again
    assert s.batch_set_v1([keys[1]], scattered_slots(pool, 1, seed=3)) == [True]
    assert s.batch_exists(keys) == 4


def test_batch_delete_checks_arguments(make_storage) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(NotRegisteredError):
        make_storage().batch_delete([hkey(0)])
    s = make_storage(mha())
    with pytest.raises(ValueError, match="keys"):
        s.batch_delete("not-a-list")  # type: ignore[arg-type]
