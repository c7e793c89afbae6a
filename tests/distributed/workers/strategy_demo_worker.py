"""Runs examples/sok_classic_demo.py in this process (arguments after the output directory),
with 2 logical CPU devices for --distributed_tool mirrored, and writes the per-step global losses
to OUT_DIR/losses<process>.json for tests/distributed/test_strategy_demo.py."""

import json
import os
import pathlib
import sys

import tensorflow as tf

out_dir, args = pathlib.Path(sys.argv[1]), sys.argv[2:]
if "mirrored" in args:  # before TensorFlow starts: one replica per logical CPU device
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

from examples.sok_classic_demo import main  # noqa: E402

process = json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]
losses = main(args)
(out_dir / f"losses{process}.json").write_text(json.dumps(losses))
