from collections.abc import Sequence

def stat_sizes(
    dir_fd: int, names: Sequence[str], openat2: bool = False, /
) -> tuple[list[int | None], list[tuple[int, int]]]: ...
