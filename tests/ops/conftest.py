"""Op tests run on every device TensorFlow lists: the CPU always, and the GPU where one is visible
(with the GPU op library built). A test that takes the `device` fixture runs its body, table
creation included, under that device, and checks the result against the same oracle (TF's own
ops or NumPy) on each device, so the GPU results are held to what the CPU results are held to.
"""

import pytest
import tensorflow as tf


def _devices() -> list[str]:
    devices = ["/CPU:0"]
    if tf.config.list_physical_devices("GPU"):
        devices.append("/GPU:0")
    return devices


@pytest.fixture(params=_devices())
def device(request):
    with tf.device(request.param):
        yield request.param
