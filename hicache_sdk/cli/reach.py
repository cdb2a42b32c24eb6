"""Can a backend reach its service? One bounded existence check of its own transport.

``hicache check`` and ``hicache ping`` ask it before anything else, so that an unreachable
server is one line naming its error (with the address, as the transport words it) rather
than dozens of failed steps or tests."""

from __future__ import annotations

import threading
from typing import Any

from ..errors import TransportError

__all__ = ["unreachable"]


def unreachable(backend: Any, timeout_s: float = 15.0) -> str | None:
    """Why ``backend``'s service cannot be reached (one line), or ``None``.

    The check is one ``exists`` call on the backend's own transport (``raw_transport``:
    below the circuit breaker, which starts open for an unreachable service), bounded by
    ``timeout_s``. An I/O error it raises, or a failure it counts, means unreachable,
    unless it says the server answered and refused (a missing bucket, rejected
    credentials): then the line says that instead. A backend not built on
    ``PagedStorage`` cannot be asked: ``None``."""
    try:
        transport = getattr(backend, "raw_transport", None)
    except Exception:  # a wrapper that cannot answer yet (no host pool): nothing to ask
        return None
    if transport is None:
        return None
    failures = getattr(transport, "failures", None)
    before = dict(failures.snapshot()) if failures is not None else {}
    outcome: list[str] = []
    reasons: list[str] = []

    def probe() -> None:
        try:
            transport.exists(["hicache-reachability-probe"])
        except (TransportError, OSError, TimeoutError) as e:
            outcome.append(str(e) or type(e).__name__)
            reasons.append(str(getattr(e, "reason", "") or ""))
        except Exception:
            pass  # not an I/O failure: the caller's own steps will say what is wrong
        else:
            after = dict(failures.snapshot()) if failures is not None else {}
            new = sorted(r for r, n in after.items() if n > before.get(r, 0))
            if new:
                outcome.append("failure counted: " + ", ".join(new))
                reasons.extend(new)

    t = threading.Thread(target=probe, name="hicache-reachability-probe", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return f"the backend's server did not answer an existence check within {timeout_s:g} s"
    if not outcome:
        return None
    answered = _answered_but_refused(outcome[0], reasons)
    if answered:
        return f"the backend's server answered, but {answered} ({outcome[0]})"
    return f"the backend's server cannot be reached ({outcome[0]})"


_MISSING = ("nosuchbucket", "no such bucket", "bucket does not exist", "no_bucket", "not_found", "missing")
_REFUSED = ("accessdenied", "access denied", "forbidden", "auth", "permission", "credentials")


def _answered_but_refused(text: str, reasons: list[str]) -> str | None:
    """What the server said when it was reached and said no: the bucket (or container,
    database, root) the backend points at does not exist, or the credentials were
    refused; ``None`` when it was not reached (or nothing says otherwise)."""
    words = " ".join([text, *reasons]).lower()
    if any(w in words for w in _MISSING):
        return "what the backend points at does not exist (a missing bucket, container or root?)"
    if any(w in words for w in _REFUSED):
        return "it refused the credentials or the permissions"
    return None
