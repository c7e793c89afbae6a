import os

# Keep TF's C++ start-up chatter out of test output.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Worker scripts run under horovodrun (tests/distributed/launcher.py), never inside pytest; the
# GPU benchmark runs on GPU machines (tests/gpu/run_device_checks.sh) and needs CuPy to import.
collect_ignore_glob = ["distributed/workers/*", "gpu/bench_*.py"]
