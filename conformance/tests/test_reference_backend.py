from hicache_conformance import BackendSuite
from hicache_conformance.broken.reference import ReferenceStorage


class TestReferenceStorage(BackendSuite):
    backend = ReferenceStorage
    matrix = "minimal"
