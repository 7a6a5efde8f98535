"""The measurements behind quotas, with the arithmetic of Kafka's metrics library.

`Rate` is Kafka's Rate over a WindowedSum (SampledStat): ``samples`` windows of ``window_ms``,
a window starting at the first record after the previous one completed; samples whose last event
is ``samples * window_ms`` old are reset; the rate divides the sum by the time since the oldest
sample started, counted as at least ``samples - 1`` full windows (so a first burst is measured
against the whole span, as Kafka does). `TokenBucket` is KIP-599's bucket for controller mutations.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class _Sample:
    start_ms: int
    last_event_ms: int
    value: float = 0.0
    events: int = 0

    def reset(self, now_ms: int) -> None:
        self.start_ms = self.last_event_ms = now_ms
        self.value = 0.0
        self.events = 0


@dataclass(slots=True)
class Rate:
    samples: int
    window_ms: int
    _samples: list[_Sample] = field(default_factory=list)
    _current: int = 0

    def record(self, value: float, now_ms: int) -> None:
        sample = self._current_sample(now_ms)
        if now_ms - sample.start_ms >= self.window_ms:
            self._current = (self._current + 1) % (self.samples + 1)  # one extra, as Kafka keeps
            if self._current >= len(self._samples):
                sample = _Sample(now_ms, now_ms)
                self._samples.append(sample)
            else:
                sample = self._samples[self._current]
                sample.reset(now_ms)
        sample.value += value
        sample.events += 1
        sample.last_event_ms = now_ms

    def measure(self, now_ms: int) -> float:
        """The rate per second."""
        size = self.window_size(now_ms)
        return sum(s.value for s in self._samples) / (size / 1000) if size > 0 else 0.0

    def window_size(self, now_ms: int) -> int:
        """Kafka's Rate.windowSize: the span the sum is divided by, in ms."""
        self._purge(now_ms)
        oldest = min(self._samples, key=lambda s: s.start_ms) if self._samples else None
        elapsed = now_ms - oldest.start_ms if oldest is not None else 0
        full_windows = elapsed // self.window_ms
        if full_windows < self.samples - 1:
            elapsed += (self.samples - 1 - full_windows) * self.window_ms
        return elapsed

    def idle_since(self) -> int:
        return max((s.last_event_ms for s in self._samples), default=0)

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        return self._samples[self._current]

    def _purge(self, now_ms: int) -> None:
        expire = self.samples * self.window_ms
        for sample in self._samples:
            if now_ms - sample.last_event_ms >= expire:
                sample.reset(now_ms)


@dataclass(slots=True)
class TokenBucket:
    """Credits refilled at ``rate`` per second up to ``rate * samples * window``; a mutation takes
    its count; below zero the quota is exhausted."""

    samples: int
    window_ms: int
    tokens: float = 0.0
    last_ms: int = 0

    def measure(self, rate: float, now_ms: int) -> float:
        self._refill(rate, now_ms)
        return self.tokens

    def record(self, rate: float, value: float, now_ms: int) -> None:
        self._refill(rate, now_ms)
        self.tokens = min(self._burst(rate), self.tokens - value)

    def _refill(self, rate: float, now_ms: int) -> None:
        self.tokens = min(self._burst(rate), self.tokens + rate * (now_ms - self.last_ms) / 1000)
        self.last_ms = now_ms

    def _burst(self, rate: float) -> float:
        return self.samples * self.window_ms / 1000 * rate


def throttle_time_ms(observed: float, bound: float, window_ms: int) -> int:
    """QuotaUtils.throttleTime: the delay X that brings O down to T over W, O*W/(W+X) = T."""
    return round((observed - bound) / bound * window_ms)


def bounded_throttle_time_ms(observed: float, bound: float, window_ms: int, max_ms: int) -> int:
    """QuotaUtils.boundedThrottleTime: as `throttle_time_ms`, at most ``max_ms``."""
    return min(throttle_time_ms(observed, bound, window_ms), max_ms)


@dataclass(slots=True)
class Average:
    """Kafka's Avg with the default MetricConfig (2 samples of 30 s), for the throttle-time metric."""

    window_ms: int = 30000
    _samples: list[list[float]] = field(default_factory=list)  # [start_ms, sum, count]

    def record(self, value: float, now_ms: int) -> None:
        if not self._samples or now_ms - self._samples[-1][0] >= self.window_ms:
            self._samples.append([now_ms, 0.0, 0])
            del self._samples[:-2]
        self._samples[-1][1] += value
        self._samples[-1][2] += 1

    def measure(self, now_ms: int) -> float:
        live = [s for s in self._samples if now_ms - s[0] < 2 * self.window_ms]
        count = sum(s[2] for s in live)
        return sum(s[1] for s in live) / count if count else 0.0
