"""Checkpoints reload on a different number of ranks with identical tables, slots and step."""

import numpy as np
import pytest

from tests.distributed.launcher import run_ranks


def global_state(out_dir, np_):
    """table -> {global id or key: value and slots} over all ranks, plus the optimizer step."""
    tables, steps = {}, set()
    for r in range(np_):
        data = np.load(out_dir / f"state{r}.npz")
        steps.add(int(data["iterations"]))
        for t in range(3):
            rows = tables.setdefault(t, {})
            for i, row in zip(data[f"ids{t}"].tolist(), data[f"rows{t}"]):
                assert i not in rows, f"table {t}: row {i} held by two ranks"
                rows[i] = row
    assert len(steps) == 1
    return tables, steps.pop()


def run(tmp_path, name, np_, action, ckpt):
    out = tmp_path / name
    out.mkdir()
    run_ranks("checkpoint_worker.py", np_, out, action, str(ckpt), checks=3)  # one a table
    return global_state(out, np_)


@pytest.mark.parametrize("save_np,load_np", [(2, 1), (2, 3), (1, 2)])
def test_reload_on_another_world_size(tmp_path, save_np, load_np):
    ckpt = tmp_path / "ckpt"
    saved, saved_step = run(tmp_path, "saved", save_np, "save", ckpt)
    loaded, loaded_step = run(tmp_path, "loaded", load_np, "load", ckpt)
    assert saved_step == loaded_step == 5
    for t in saved:
        assert sorted(saved[t]) == sorted(loaded[t]), f"table {t}"
        assert len(saved[t]) > 0
        for i in saved[t]:
            np.testing.assert_array_equal(loaded[t][i], saved[t][i], err_msg=f"table {t} row {i}")
    assert saved[0][0].shape == (4 * 3,)  # value + Adam's m and v
