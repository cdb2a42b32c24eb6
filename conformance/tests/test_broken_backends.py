"""The suite proves it can fail: each broken backend fails the test named for its fault,
on exactly the SGLang I/O paths it is broken on, under the profiles whose rule it breaks;
the correct baselines pass the same tests (the runs: ``suite_runs.py``, part ``broken``).

* semantic faults (``broken.semantic``) and I/O faults (``broken.io``) against the
  full-contract reference backend;
* ``HiCacheFile``-like backends (``broken.filelike``: short reads, a truncated last page,
  writes that store nothing, short reads on the generic path only), with ``mla`` declared
  as the command line would (``extra_capabilities``), failing ``contract`` on the generic
  and the v1 path and on MHA and MLA pools;
* a v2 backend whose hits ignore its sidecar pools (SGLang #31108, Mooncake#2236).
"""

from __future__ import annotations

from typing import Any

import pytest
from suite_runs import ALSO_FAILS, BROKEN, FILELIKE, PROFILES, STATEFUL, Run, cls_of, fails, profiles_of


def _expect_broken(run: Run, target: str, profile: str) -> dict[str, dict[str, Any]]:
    cls = cls_of(target)
    got = run.tests(f"Test_{target.split(':')[1]}_{profile}", cls.FAILS)
    assert got, (target, profile, "the named test did not run")
    if profile not in profiles_of(target):
        assert {t["outcome"] for t in got.values()} == {"skipped"}, (target, profile, got)
        return got
    paths = tuple(getattr(cls, "PATHS", ()))
    for pid, t in got.items():
        want = "failed" if (not paths or t.get("io_path") in paths) else "passed"
        assert t["outcome"] == want, (target, profile, pid, t["outcome"], t["reason"][:500])
    return got


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("target", BROKEN, ids=[t.split(":")[1] for t in BROKEN])
def test_suite_fails_broken_backend_in_named_test(suite_run: Run, target: str, profile: str) -> None:
    got = _expect_broken(suite_run, target, profile)
    paths = getattr(cls_of(target), "PATHS", ())
    if profile in profiles_of(target) and paths:
        assert {t["io_path"] for t in got.values()} >= set(paths), got


@pytest.mark.parametrize("target", FILELIKE, ids=[t.split(":")[1] for t in FILELIKE])
def test_hicachefile_like_broken_variant_fails_contract_on_its_paths_and_both_kinds(
    suite_run: Run, target: str
) -> None:
    """Short reads, a truncated last page and writes that store nothing fail ``contract``
    on the generic and the v1 path, on MHA and on MLA pools; short reads on the generic
    path alone fail the generic path only (the v1 path is correct and passes)."""
    got = _expect_broken(suite_run, target, "contract")
    failed = {(t["io_path"], pid.split("-")[1]) for pid, t in got.items() if t["outcome"] == "failed"}
    want = {(p, kind) for p in cls_of(target).PATHS for kind in ("mha", "mla")}
    assert failed == want, (target, sorted(failed))


def test_failure_messages_name_what_happened(suite_run: Run) -> None:
    """A short read is called a short read; a backend that stores nothing is told so; a
    read that raised is named with its exception."""
    reasons = {
        cls: " ".join(
            t["reason"]
            for t in suite_run.tests(f"Test_{cls}_contract", "test_get_after_set_is_byte_exact").values()
        )
        for cls in ("ShortReadFilePages", "StoresNothingFilePages", "TruncatedLastPageFilePages")
    }
    short = reasons["ShortReadFilePages"]
    assert "a short read or a truncated page, only the first" in short, short[:800]
    assert "does not store the bytes it acknowledges: wrote 5 pages" in reasons["StoresNothingFilePages"]
    assert "read back 0" in reasons["StoresNothingFilePages"]
    truncated = reasons["TruncatedLastPageFilePages"]
    assert "raised OSError: Short read" in truncated, truncated[:800]


@pytest.mark.parametrize("cls", sorted(ALSO_FAILS))
def test_stateful_comparison_catches_semantic_fault(suite_run: Run, cls: str) -> None:
    """The state machine against the live memory reference finds these faults too (under
    the profiles whose rules they break), and reports the sequence of calls."""
    for profile in ALSO_FAILS[cls]:
        got = list(suite_run.tests(f"Test_{cls}_{profile}", STATEFUL).values())
        assert [t["outcome"] for t in got] == ["failed"], (cls, profile, got)
        assert "diverged from the memory reference after these calls:" in got[0]["reason"], got[0]["reason"][
            :600
        ]
        assert "1. a new backend and an empty reference" in got[0]["reason"]


@pytest.mark.parametrize("profile", PROFILES)
def test_reference_passes_every_named_test(suite_run: Run, profile: str) -> None:
    """The correct baselines pass the same tests, so each failure is the fault's."""
    for target in BROKEN:
        got = [
            t["outcome"] for t in suite_run.tests(f"Test_ReferenceStorage_{profile}", fails(target)).values()
        ]
        if fails(target).startswith("test_calls_bounded"):
            assert set(got) <= {"skipped"}  # the reference declares no fault injection
        elif fails(target) == "test_half_written_page_never_a_hit":
            # in-band half passed; the reference offers no raw access, so the out-of-band
            # half did not run and the test says so (skipped, never a silent pass)
            assert got == ["skipped"], (target, profile, got)
        elif profile not in profiles_of(target):
            assert set(got) == {"skipped"}, (target, profile, got)  # a strict-only rule
        else:
            assert got and set(got) == {"passed"}, (target, profile, got)
    stateful = suite_run.tests(f"Test_ReferenceStorage_{profile}", STATEFUL)
    assert [t["outcome"] for t in stateful.values()] == ["passed"]
    assert suite_run.report["ok"] is False and suite_run.rc == 1


def test_file_reference_passes_contract(suite_run: Run) -> None:
    got = suite_run.tests("Test_FilePages_contract", "test_get_after_set_is_byte_exact")
    assert len(got) == 4 and {t["outcome"] for t in got.values()} == {"passed"}, got
    assert {t["io_path"] for t in got.values()} == {"generic", "v1"}
    assert [t["outcome"] for t in suite_run.tests("Test_FilePages_contract", STATEFUL).values()] == ["passed"]
