"""Records of the memory feature (format 1) load forever with their evidence."""

import json
import os

from qex.store import records

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data")


def load(name):
    with open(os.path.join(DATA, name)) as fh:
        return records.load(records.Status, json.load(fh))


def test_an_oom_record_keeps_its_evidence_and_its_message():
    rec = load("status-v1-oom.json")
    assert rec.state == "oom" and rec.oom_evidence == "cgroup"
    (attempt,) = rec.attempts
    assert attempt.oom_evidence == "cgroup" and attempt.signal == "SIGKILL"
    assert attempt.usage.oom_kills == 1 and attempt.usage.max_rss > attempt.claims.mem
    assert "the claim of 100MB was too small" in rec.error


def test_a_job_completed_after_an_oom_retry_keeps_both_attempts():
    rec = load("status-v1-completed-after-oom.json")
    first, second = rec.attempts
    assert (first.state, second.state, rec.state) == ("oom", "completed", "completed")
    assert second.claims.mem == 2 * first.claims.mem == rec.claims.mem
    assert "too small" in first.error and rec.error is None
    assert rec.claim_source["mem"].startswith("doubled after attempt 1")
