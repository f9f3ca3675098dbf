"""Reading an engine's own Prometheus metrics around and during each measured level.

Speculative decoding's acceptance is the engine's to report (the client sees tokens per chunk,
not which were drafted): vLLM exports drafts, draft tokens and accepted draft tokens as counters.
A level's figures are the difference of two snapshots, summed over label sets (engine ranks)
and over servers (a configuration's replicas behind a router, each read at its own address).

The scheduler's state (KV-cache use, running and waiting requests) only exists while the load
runs, so it is sampled in the background during the level (`sample_gauges`, on the load
generator's own event loop) and kept as maxima; preemptions are a counter's increase.
"""

from __future__ import annotations

import asyncio
import urllib.request
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tuner.measure.records import EngineGauges

# Counter names per engine (vLLM 0.32, labelled engine="N"); engines not listed expose none that
# tuner reads.
SPEC_DECODE_COUNTERS = {
    "vllm": {
        "drafts": "vllm:spec_decode_num_drafts_total",
        "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
        "accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
    },
}


@dataclass(frozen=True)
class SpecDecodeCounts:
    drafts: int
    draft_tokens: int
    accepted_tokens: int

    def __sub__(self, earlier: SpecDecodeCounts) -> SpecDecodeCounts:
        return SpecDecodeCounts(self.drafts - earlier.drafts,
                                self.draft_tokens - earlier.draft_tokens,
                                self.accepted_tokens - earlier.accepted_tokens)


def summed_counters(text: str, names: dict[str, str]) -> dict[str, float] | None:
    """Each named counter (ours -> the engine's metric name) summed over its label sets; None
    when the engine exports none of them."""
    wanted = {v: k for k, v in names.items()}
    totals = dict.fromkeys(names, 0.0)
    seen = False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                totals[wanted[sample.name]] += sample.value
                seen = True
    return totals if seen else None


def parse_counters(text: str, names: dict[str, str]) -> SpecDecodeCounts | None:
    """The speculative-decoding counters; None when the engine exports none of them."""
    totals = summed_counters(text, names)
    if totals is None:
        return None
    return SpecDecodeCounts(int(totals["drafts"]), int(totals["draft_tokens"]),
                            int(totals["accepted_tokens"]))


def read_spec_decode(engine: str, base_urls: str | list[str]) -> SpecDecodeCounts | None:
    """The counters summed over the servers at `base_urls`; None when one does not answer or
    exports none of them."""
    names = SPEC_DECODE_COUNTERS.get(engine)
    if names is None:
        return None
    total = None
    for url in [base_urls] if isinstance(base_urls, str) else base_urls:
        text = _metrics_text(url, timeout_s=5.0)
        counts = None if text is None else parse_counters(text, names)
        if counts is None:
            return None
        total = counts if total is None else SpecDecodeCounts(
            total.drafts + counts.drafts, total.draft_tokens + counts.draft_tokens,
            total.accepted_tokens + counts.accepted_tokens)
    return total


# Prefix-cache counters per engine, in prompt tokens (vLLM 0.32's, labelled engine="N").
PREFIX_CACHE_COUNTERS = {
    "vllm": {"queries": "vllm:prefix_cache_queries_total", "hits": "vllm:prefix_cache_hits_total",
             "requests": "vllm:request_success_total"},
}


@dataclass(frozen=True)
class PrefixCacheCounts:
    """One server's prompt tokens looked up in its prefix cache, those found there, and the
    requests it finished."""

    queries: int
    hits: int
    requests: int

    def __sub__(self, earlier: PrefixCacheCounts) -> PrefixCacheCounts:
        return PrefixCacheCounts(self.queries - earlier.queries, self.hits - earlier.hits,
                                 self.requests - earlier.requests)

    @property
    def hit_rate(self) -> float | None:
        return self.hits / self.queries if self.queries else None


def read_prefix_cache(engine: str, base_url: str) -> PrefixCacheCounts | None:
    """One server's prefix-cache counters now; None where it does not answer or exports none."""
    names = PREFIX_CACHE_COUNTERS.get(engine)
    text = None if names is None else _metrics_text(base_url, timeout_s=5.0)
    totals = None if text is None else summed_counters(text, names)
    if totals is None:
        return None
    return PrefixCacheCounts(int(totals["queries"]), int(totals["hits"]),
                             int(totals["requests"]))


def _metrics_text(base_url: str, timeout_s: float) -> str | None:
    """The engine's /metrics page, or None when it does not answer 200 (between levels, from the
    study's thread; during a level the gauges are scraped on the load generator's loop)."""
    try:
        with urllib.request.urlopen(base_url + "/metrics", timeout=timeout_s) as r:  # noqa: S310
            return r.read().decode(errors="replace") if r.status == 200 else None
    except (OSError, ValueError):  # refused, reset, HTTP errors (URLError is an OSError)
        return None


# Scheduler metrics per engine (names as vLLM 0.32 registers them in vllm/v1/metrics/loggers.py;
# the counter's samples carry the `_total` suffix).
GAUGES = {
    "vllm": {
        "kv_cache_usage": "vllm:kv_cache_usage_perc",
        "running": "vllm:num_requests_running",
        "waiting": "vllm:num_requests_waiting",
        "preemptions": "vllm:num_preemptions_total",
    },
}
SAMPLE_INTERVAL_S = 0.5
_SCRAPE_TIMEOUT = aiohttp.ClientTimeout(total=2.0)


def parse_gauges(text: str, names: dict[str, str]) -> dict[str, float]:
    """One scrape's values by key: KV-cache use is the fullest engine rank's (a fraction each),
    request counts and the counter are summed over ranks. Keys the engine did not export are
    absent. Only the wanted lines are parsed: the full text is mostly histograms."""
    prefixes = tuple(names.values())
    wanted = {v: k for k, v in names.items()}
    lines = "\n".join(line for line in text.splitlines() if line.startswith(prefixes))
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(lines + "\n"):
        for sample in family.samples:
            key = wanted.get(sample.name)
            if key is None:
                continue
            if key == "kv_cache_usage":
                values[key] = max(values.get(key, 0.0), sample.value)
            else:
                values[key] = values.get(key, 0.0) + sample.value
    return values


async def _scrape(session: aiohttp.ClientSession, urls: list[str],
                  names: dict[str, str]) -> dict[str, float] | None:
    """One sample over every server: KV-cache use the fullest's, the rest summed; None when
    one of them did not answer."""
    got = await asyncio.gather(*(_scrape_one(session, u, names) for u in urls))
    if any(g is None for g in got):
        return None
    values: dict[str, float] = {}
    for one in got:
        for key, value in one.items():
            values[key] = (max(values.get(key, 0.0), value) if key == "kv_cache_usage"
                           else values.get(key, 0.0) + value)
    return values


async def _scrape_one(session: aiohttp.ClientSession, url: str,
                      names: dict[str, str]) -> dict[str, float] | None:
    try:
        async with session.get(url, timeout=_SCRAPE_TIMEOUT) as resp:
            if resp.status != 200:
                return None
            return parse_gauges(await resp.text(errors="replace"), names)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
        return None  # a missed sample, not a failed level


async def sample_gauges(session: aiohttp.ClientSession, base_url: str | list[str],
                        names: dict[str, str], done: asyncio.Event,
                        interval_s: float = SAMPLE_INTERVAL_S) -> EngineGauges:
    """Scrape `/metrics` (of every server at `base_url`) now, every `interval_s` until `done`
    is set, and once more then; return the gauges' maxima and the preemption counter's
    increase over that span."""
    bases = [base_url] if isinstance(base_url, str) else base_url
    urls = [b.rstrip("/") + "/metrics" for b in bases]
    scrapes = []
    while True:
        got = await _scrape(session, urls, names)
        if got is not None:
            scrapes.append(got)
        if done.is_set():
            break
        try:
            await asyncio.wait_for(done.wait(), interval_s)
        except asyncio.TimeoutError:
            pass

    def peak(key: str) -> float | None:
        seen = [s[key] for s in scrapes if key in s]
        return max(seen) if seen else None

    counts = [s["preemptions"] for s in scrapes if "preemptions" in s]
    return EngineGauges(
        kv_cache_usage_max=peak("kv_cache_usage"), requests_running_max=peak("running"),
        requests_waiting_max=peak("waiting"),
        preemptions=int(counts[-1] - counts[0]) if counts else None, samples=len(scrapes))


def gauge_monitor(engine: str, base_url: str | list[str],
                  interval_s: float = SAMPLE_INTERVAL_S):
    """A load-generator monitor (tuner.measure.loadgen.Monitor) that samples this engine's scheduler
    metrics during each level; None for engines whose metrics tuner does not know."""
    names = GAUGES.get(engine)
    if names is None:
        return None

    async def monitor(session: aiohttp.ClientSession, done: asyncio.Event) -> EngineGauges:
        return await sample_gauges(session, base_url, names, done, interval_s)

    return monitor
