"""Broken linkers: ``TransportLinker`` with one rule of SGLang's linker contract broken
each. The linker contract (:mod:`hicache_conformance.linker_contract`) must fail each on
the check named in :data:`BROKEN_LINKERS`, for its reason. Importing this module needs
SGLang (the linker's base class lives there)."""

from __future__ import annotations

import queue
from typing import Any

from hicache_sdk.sglang.linker import TransportLinker

__all__ = ["BROKEN_LINKERS"]


class CompletesLayersEarly(TransportLinker):
    """Marks every layer complete, then reads the pages."""

    def _load_batch(self, index: int, loads: list[Any], ready: Any) -> None:
        for layer in range(self.num_layers):
            self.layer_done_counter.complete(index, layer)
        self.store.batch_get_v2([self._transfer([load["kv"] for load in loads])])


class RaisesFromFinish(TransportLinker):
    """Raises from ``finish_layer_wise_loading`` when a layer failed."""

    def finish_layer_wise_loading(self, counter_index: int) -> bool:
        if not self.layer_done_counter.finish(counter_index):
            raise RuntimeError("a layer failed")
        return True


class WritesBeforeStart(TransportLinker):
    """Reads the pages into the device pool as soon as ``load`` is called."""

    def load(self, rid: str, transfers: list[Any]) -> bool:
        batch = self._batches(transfers, "load")
        if batch is not None:
            self.store.batch_get_v2([self._transfer([batch["kv"]])])
        return super().load(rid, transfers)


class PopsNewestOffload(TransportLinker):
    """Pops the newest completed offload first (last-in, first-out)."""

    def pop_completed_offload(self) -> bool:
        items: list[bool] = []
        while True:
            try:
                items.append(self._results.get_nowait())
            except queue.Empty:
                break
        if not items:
            return False
        newest = items.pop()
        for item in items:
            self._results.put(item)
        return newest


class EveryMlaRankWrites(TransportLinker):
    """Writes MLA pages from every rank."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.offload_owner = True
        self.store._may_write = lambda state: True


class LongestPrefixOnly(TransportLinker):
    """Returns only the longest restorable prefix from ``lookup``."""

    def lookup(self, rid: str, transfers: list[Any]) -> list[int]:
        found = super().lookup(rid, transfers)
        return found[-1:]


class IgnoresSwaWindow(TransportLinker):
    """Answers ``lookup`` from the KV pages alone, ignoring the SWA window."""

    def lookup(self, rid: str, transfers: list[Any]) -> list[int]:
        return super().lookup(rid, [t for t in transfers if str(getattr(t.name, "value", t.name)) == "kv"])


class IgnoresMambaWindow(TransportLinker):
    """Answers ``lookup`` without the Mamba transfer, as if every KV page had its state."""

    def lookup(self, rid: str, transfers: list[Any]) -> list[int]:
        return super().lookup(rid, [t for t in transfers if str(getattr(t.name, "value", t.name)) != "mamba"])


#: class name -> (class, the check it must fail, a fragment of the failure's reason)
BROKEN_LINKERS: dict[str, tuple[type[TransportLinker], str, str]] = {
    "CompletesLayersEarly": (
        CompletesLayersEarly,
        "layers_land_before_wait_returns",
        "marked complete before their bytes",
    ),
    "RaisesFromFinish": (RaisesFromFinish, "failed_load_finishes_false", "raised RuntimeError"),
    "WritesBeforeStart": (
        WritesBeforeStart,
        "layers_land_before_wait_returns",
        "before start_layer_wise_loading",
    ),
    "PopsNewestOffload": (PopsNewestOffload, "offloads_are_fifo_and_wait_for_events", "first-in, first-out"),
    "EveryMlaRankWrites": (EveryMlaRankWrites, "mla_owner_rank_writes", "non-owner rank wrote"),
    "LongestPrefixOnly": (LongestPrefixOnly, "lookup_lists_every_prefix", "every restorable prefix"),
    "IgnoresSwaWindow": (IgnoresSwaWindow, "swa_windows", "SWA window"),
    "IgnoresMambaWindow": (IgnoresMambaWindow, "mamba_windows", "Mamba window"),
}
