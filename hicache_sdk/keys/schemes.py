"""Key schemes: SGLang 0.5.23's file and Mooncake naming, and our ``default`` scheme.

Use :func:`make_scheme`. ``storage_config`` is duck-typed (ours or SGLang's
``HiCacheStorageConfig``): fields are read with ``getattr`` and SGLang's defaults
(single rank, no PP/CP/DCP, not MLA).

* ``"sglang-file"``: exactly HiCacheFile's flat file names, one raw object per page
  (segments in ``pool.flat_order``, i.e. ``get_data_page(flat=True)`` bytes).
* ``"sglang-mooncake"``: exactly MooncakeStore's object keys (K/V objects for MHA, one
  ``__k`` object for MLA, the sidecar suffixes of ``_get_hybrid_page_component_keys``).
* ``"default"``: ours, one object per page with a header, under
  ``{namespace|_}/{model}/{pool}-{identity16}/{hash[:2]}/{hash}``.

A logical KV anchor pool (``has_buffer=False``) has no objects in any scheme (``[]``),
so its existence is vacuously true, as Mooncake's logical anchor treats it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from .default_scheme import DefaultKeyScheme
from .scheme_base import KeyScheme
from .sglang_schemes import SGLangFileKeyScheme, SGLangMooncakeKeyScheme
from .topology import Topology

__all__ = [
    "Topology",
    "DefaultKeyScheme",
    "SGLangFileKeyScheme",
    "SGLangMooncakeKeyScheme",
    "SCHEMES",
    "make_scheme",
]


SCHEMES: dict[str, Callable[..., KeyScheme]] = {
    DefaultKeyScheme.name: DefaultKeyScheme,
    SGLangFileKeyScheme.name: SGLangFileKeyScheme,
    SGLangMooncakeKeyScheme.name: SGLangMooncakeKeyScheme,
}


def make_scheme(
    name: str,
    storage_config: Any,
    *,
    model_name: Optional[str] = None,
    namespace: str = "",
    namespace_salt: Optional[str] = None,
) -> KeyScheme:
    """Build the key scheme called ``name`` for one rank.

    ``model_name`` overrides ``storage_config.model_name``. ``namespace`` and the secret
    ``namespace_salt`` are ``default``-scheme only (``ValueError`` elsewhere: SGLang
    names cannot carry them). Raises ``ValueError`` listing the valid names for an
    unknown scheme, and naming the field for an invalid config.
    """
    factory = SCHEMES.get(name) if isinstance(name, str) else None
    if factory is None:
        raise ValueError(f"unknown key scheme {name!r}; valid names: {', '.join(sorted(SCHEMES))}")
    return factory(storage_config, model_name=model_name, namespace=namespace, namespace_salt=namespace_salt)
