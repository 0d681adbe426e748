"""Open-loop arrivals of a load point: seeded gamma inter-arrival gaps (``load.request_rate``,
``load.burstiness``; 1 = Poisson). The OpenAI client paces requests with them; ``pipeline.load`` names them."""
from __future__ import annotations

import math
import random


def interarrival(rng: random.Random, rate: float, burstiness: float = 1.0) -> float:
    """One gap (s) between arrivals: gamma(shape=burstiness, scale=1 / (rate * burstiness)); 0 at rate inf."""
    if not math.isfinite(rate) or rate <= 0:
        return 0.0
    if burstiness == 1.0:  # the same distribution; expovariate keeps the seeded sequences of earlier runs
        return rng.expovariate(rate)
    return rng.gammavariate(burstiness, 1.0 / (rate * burstiness))


def arrival_times(n: int, rate: float, burstiness: float = 1.0, seed: int = 0) -> list[float]:
    """Offsets (s) of ``n`` arrivals from the start of a pass; the first arrives at 0."""
    rng = random.Random(seed)
    out, t = [], 0.0
    for i in range(n):
        if i:
            t += interarrival(rng, rate, burstiness)
        out.append(t)
    return out
