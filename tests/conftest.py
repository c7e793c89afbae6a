import os

# Keep TF's C++ start-up chatter out of test output.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Worker scripts run under horovodrun (tests/distributed/launcher.py), never inside pytest.
collect_ignore_glob = ["distributed/workers/*"]
