"""The benchmark harness: interleaving, medians, ratios, schema, result files."""

from __future__ import annotations

import io
import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hicache_sdk.bench import SCHEMA, BenchResult, Harness, write_result
from hicache_sdk.bench.harness import percentile, round_orders


class StepTimer:
    """A fake clock advanced by the benchmarked functions themselves."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def make(durations: dict[str, list[float]], log: list[str], **kw: object) -> Harness:
    timer = StepTimer()
    h = Harness(name="demo", params={"pages": 4}, timer=timer)
    for label, seq in durations.items():
        it = iter(seq)

        def fn(label: str = label, it=it) -> None:  # type: ignore[no-untyped-def]
            log.append(label)
            timer.t += next(it)

        h.add(label, fn, nbytes=kw.get("nbytes", 1000))  # type: ignore[arg-type]
    return h


def test_interleaved_rotated_order_and_warmup() -> None:
    log: list[str] = []
    h = make({"ours": [9, 1, 2, 3], "raw": [9, 2, 2, 2], "limit": [9, 1, 1, 1]}, log)
    setups: list[int] = []
    res = h.run(repeats=3, warmup=1, setup=lambda: setups.append(len(log)), order="rotate")
    assert log == [
        "ours", "raw", "limit",  # warm-up (not recorded)
        "raw", "limit", "ours",
        "limit", "ours", "raw",
        "ours", "raw", "limit",
    ]  # fmt: skip
    assert setups == list(range(12))  # before every call
    assert res.order == (("raw", "limit", "ours"), ("limit", "ours", "raw"), ("ours", "raw", "limit"))
    assert res.samples == {"ours": (1, 2, 3), "raw": (2, 2, 2), "limit": (1, 1, 1)}


def test_medians_throughput_ratios() -> None:
    log: list[str] = []
    h = make(
        {"ours": [0.5, 0.1, 0.3], "raw": [0.4, 0.2, 0.2], "limit": [0.1, 0.1, 0.1]}, log, nbytes=2_000_000_000
    )
    res = h.run(repeats=3, warmup=0)
    med = res.medians()
    assert med == pytest.approx({"ours": 0.3, "raw": 0.2, "limit": 0.1})
    assert res.throughput() == pytest.approx({"ours": 2 / 0.3, "raw": 10.0, "limit": 20.0})
    assert res.ratio("ours", "raw") == pytest.approx(1.5)
    assert res.ratio("ours", "limit") == pytest.approx(3.0)
    assert res.ratios() == pytest.approx({"ours/raw": 1.5, "ours/limit": 3.0})
    with pytest.raises(KeyError):
        res.ratio("ours", "nope")


def test_zero_division_edges() -> None:
    res = BenchResult("x", {}, 1, {"a": (0.0,), "b": (0.0,), "c": (1.0,)}, {"a": 0, "b": 5, "c": 0})
    assert res.ratio("a", "b") == 1.0
    assert res.ratio("c", "a") == float("inf")
    assert res.throughput() == {"a": 0.0, "b": 0.0, "c": 0.0}


def test_json_schema_is_fixed() -> None:
    log: list[str] = []
    res = make({"ours": [1, 2, 3], "raw": [2, 2, 2]}, log).run(repeats=3, warmup=0)
    doc = res.to_json()
    assert set(doc) == {"schema", "name", "params", "machine", "repeats", "results", "ratios"}
    assert doc["schema"] == SCHEMA == "hicache-bench/1"
    assert doc["name"] == "demo" and doc["params"] == {"pages": 4} and doc["repeats"] == 3
    assert set(doc["machine"]) == {"cpus", "python", "platform"} and doc["machine"]["cpus"] >= 1
    assert set(doc["results"]) == {"ours", "raw"}
    r = doc["results"]["ours"]
    assert set(r) == {"median_s", "min_s", "max_s", "samples_s", "nbytes", "gbps", "p50_s", "p90_s", "p99_s"}
    assert (r["median_s"], r["min_s"], r["max_s"], r["samples_s"], r["nbytes"]) == (2, 1, 3, [1, 2, 3], 1000)
    assert doc["ratios"] == {"ours/raw": 1.0}
    assert (r["p50_s"], r["p90_s"], r["p99_s"]) == (2, 2.8, pytest.approx(2.98))
    json.dumps(doc)  # serialisable


def test_percentile_interpolates_between_ranks() -> None:
    samples = [float(x) for x in range(1, 101)]  # 1..100, shuffled order does not matter
    assert percentile(samples[::-1], 50) == pytest.approx(50.5)
    assert percentile(samples, 90) == pytest.approx(90.1)
    assert percentile(samples, 99) == pytest.approx(99.01)
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError, match="no samples"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"within 0\.\.100"):
        percentile([1.0], 101)


def test_write_result_json_list_and_jsonl(tmp_path: Path) -> None:
    log: list[str] = []
    res = make({"ours": [1, 2], "raw": [1, 1]}, log).run(repeats=1, warmup=0)
    p = tmp_path / "out.json"
    write_result(res, p)
    write_result(res, p)
    docs = json.loads(p.read_text())
    assert isinstance(docs, list) and len(docs) == 2 and docs[0]["schema"] == SCHEMA
    q = tmp_path / "out.jsonl"
    write_result(res, q)
    write_result(res, q)
    lines = q.read_text().splitlines()
    assert len(lines) == 2 and json.loads(lines[1])["name"] == "demo"
    single = tmp_path / "single.json"
    single.write_text(json.dumps(res.to_json()))
    write_result(res, single)
    assert len(json.loads(single.read_text())) == 2


def test_print_table_mentions_every_label_and_ratio() -> None:
    log: list[str] = []
    res = make({"ours": [1, 1], "raw": [2, 2]}, log).run(repeats=2, warmup=0)
    buf = io.StringIO()
    res.print_table(buf)
    text = buf.getvalue()
    assert "ours" in text and "raw" in text and "ours/raw: 0.500" in text


def test_bad_arguments() -> None:
    h = Harness("x")
    with pytest.raises(ValueError, match="no variants"):
        h.run()
    h.add("a", lambda: None)
    with pytest.raises(ValueError, match="already"):
        h.add("a", lambda: None)
    with pytest.raises(ValueError, match="nbytes"):
        h.add("b", lambda: None, nbytes=-1)
    with pytest.raises(ValueError, match="repeats"):
        h.run(repeats=0)
    with pytest.raises(ValueError, match="warmup"):
        h.run(warmup=-1)
    with pytest.raises(ValueError, match="name"):
        Harness("")


@given(n=st.integers(1, 5), repeats=st.integers(1, 6), warmup=st.integers(0, 3))
def test_each_label_runs_once_per_round_in_rotation(n: int, repeats: int, warmup: int) -> None:
    labels = [f"v{i}" for i in range(n)]
    log: list[str] = []
    h = Harness("p")
    for lab in labels:
        h.add(lab, lambda lab=lab: log.append(lab))  # type: ignore[misc]
    res = h.run(repeats=repeats, warmup=warmup, order="rotate")
    assert len(log) == n * (repeats + warmup)
    for r in range(repeats + warmup):
        rnd = log[r * n : (r + 1) * n]
        assert rnd == labels[r % n :] + labels[: r % n]
    assert all(len(v) == repeats for v in res.samples.values())


@given(n=st.integers(1, 9))
def test_balanced_order_puts_every_variant_after_every_other_equally(n: int) -> None:
    rows = round_orders(n)
    assert len(rows) == (2 * n if n % 2 else n)
    for row in rows:
        assert sorted(row) == list(range(n))  # once per round
    for pos in range(n):  # every position equally often
        assert sorted(row[pos] for row in rows) == sorted(list(range(n)) * (len(rows) // n))
    pairs: dict[tuple[int, int], int] = {}
    for row in rows:
        for a, b in itertools.pairwise(row):
            pairs[(a, b)] = pairs.get((a, b), 0) + 1
    if n > 1:  # every ordered pair adjacent, equally often
        assert set(pairs) == {(a, b) for a in range(n) for b in range(n) if a != b}
        assert set(pairs.values()) == {len(rows) // n}


def test_run_uses_the_balanced_order_by_default() -> None:
    log: list[str] = []
    h = Harness("p")
    for lab in "abcd":
        h.add(lab, lambda lab=lab: log.append(lab))  # type: ignore[misc]
    res = h.run(repeats=4, warmup=0)
    assert res.order == tuple(tuple("abcd"[i] for i in row) for row in round_orders(4))
    assert res.order[0] == ("a", "b", "d", "c")
    with pytest.raises(ValueError, match="order"):
        h.run(order="random")
