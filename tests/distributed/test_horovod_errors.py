"""A rank with bad input fails the whole job quickly, with a message that names the table."""

import time

from tests.distributed.launcher import launch, run_failing_job

BAD_ID_MESSAGE = "table 0 ('users'): id 17 of sample 0 is out of range [0, 17)"


def test_bad_id_on_one_rank_fails_the_job_fast(tmp_path):
    start = time.monotonic()
    code, output = launch("bad_id_worker.py", 2, tmp_path, timeout=180)
    elapsed = time.monotonic() - start
    assert code != 0, output[-3000:]
    assert BAD_ID_MESSAGE in output, output[-3000:]
    assert "should have failed" not in output
    assert elapsed < 120, f"the failing job took {elapsed:.0f} s to exit"


def test_bad_id_mid_training_fails_the_job_fast(tmp_path):
    """Rank 1 feeds an out-of-range id at step 5, after both ranks trained 5 steps together."""
    output = run_failing_job(tmp_path, "bad_id", 5, deadline=120)
    assert BAD_ID_MESSAGE in output, output[-3000:]
