"""Soak, short form (benchmarks/soak.py has the full 60 s one): a training
process appends records for 20 s while four clients query the routes of a
real tensorboard (Rust data server) at once: the tab, plain series requests
without max_steps, alerts/overview/compare, and hostile patterns.  Asserted:
every response has the expected status (no timeout, no 500), the newest
step written is eventually served, and the tensorboard process's memory
stays bounded.  Timings are printed, never asserted."""

import pytest

from benchmarks import soak

pytestmark = [pytest.mark.slow, pytest.mark.tensorboard]  # a 20 s soak of a real TensorBoard

SECONDS = 20
CLIENTS = 4


def test_soak_short_form_with_concurrent_clients(tmp_path, record_property):
    result = soak.soak(SECONDS, load_fast=True, n_vars=10, max_requests=20000, logdir=str(tmp_path / "logs"),
                       clients=CLIENTS)
    rss = [mb for _, mb in result["rss_mb"]]
    print("\nsoak %d s, %d clients: %d steps, %d requests %s, lag median %s s max %s s, RSS MB first %.0f "
          "max %.0f last %.0f" % (SECONDS, CLIENTS, result["steps_written"], result["requests"], result["statuses"],
                                   result["lag_median_s"], result["lag_max_s"], rss[0], max(rss), rss[-1]))
    record_property("soak", {k: result[k] for k in ("requests", "statuses", "lag_median_s", "lag_max_s")})
    assert result["errors"] == []
    assert result["steps_written"] >= 10 and result["requests"] >= 50
    assert result["statuses"].get(400, 0) > 0  # the hostile client was answered
    assert result["newest_seen"] == result["newest_written"]  # the newest step was served
    # Memory stays bounded: the data grows by ~KBs per step; allow 300 MB over the first sample.
    assert max(rss) < rss[0] + 300, result["rss_mb"]
