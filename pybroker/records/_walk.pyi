from collections.abc import Callable

def scan(data: bytes | memoryview, count: int, pause: Callable[[], None] | None,
         every: int) -> tuple[int, int, bool] | None: ...
