"""The TensorFlow versions sok_lite supports: the one place that states them.

setup.py and the Makefile read these two lines as text; keep their form.
"""

TF_MIN = (2, 21)  # inclusive
TF_MAX = (2, 22)  # exclusive
