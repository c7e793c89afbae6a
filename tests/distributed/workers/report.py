"""What a worker rank reports back to the launching test."""

import json
import pathlib


class Report:
    def __init__(self, out_dir: str, rank: int):
        self.path = pathlib.Path(out_dir) / f"rank{rank}.json"
        self.data = {"checks": 0}

    def check(self, n: int = 1) -> None:
        self.data["checks"] += n

    def write(self, **extra) -> None:
        self.data.update(extra)
        self.path.write_text(json.dumps(self.data))
