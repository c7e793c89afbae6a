"""sok.plan_memory's predicted hit rate of a tiered hash table (TableSpec zipf / key_counts),
against independent references: a NumPy simulation of the tier's LRU and LFU caches over a
sampled Zipf stream, a real tiered DynamicVariable's hit and miss counters, and exact sums over
every key in place of the Zipf tail's quadrature."""

import tempfile
import warnings

import numpy as np
import pytest
import tensorflow as tf

import sok_lite as sok
from sok_lite import memory
from sok_lite.memory import hit_rate

# Absolute tolerance of a predicted hit rate against a simulated or measured one: the model
# (Che's approximation for LRU, the most frequent keys for LFU) is within ~0.015 on these sizes;
# a run of ~1,000 steps adds sampling noise of ~0.005.
TOLERANCE = 0.03


def zipf_probs(exponent, keys):
    probs = np.arange(1, keys + 1, dtype=np.float64) ** -exponent
    return probs / probs.sum()


def simulate_tier(policy, probs, ram_rows, batch, steps, warm, seed):
    """Hit rate of the tier's cache, replayed in NumPy: whole steps of `batch` ids; an id is a
    hit if its key was in RAM when the step began; the step's keys all enter RAM; past ram_rows,
    the rows not seen this step with the oldest last step (lru) or fewest steps seen (lfu) leave,
    at least a sixteenth of RAM at once."""
    rng = np.random.default_rng(seed)
    keys = len(probs)
    cdf = np.cumsum(probs)
    in_ram = np.zeros(keys, bool)
    last_step = np.full(keys, -1)
    steps_seen = np.zeros(keys, np.int64)
    hits = looked_up = 0
    for step in range(steps):
        ids = np.minimum(np.searchsorted(cdf, rng.random(batch) * cdf[-1]), keys - 1)
        seen, occurrences = np.unique(ids, return_counts=True)
        if step >= warm:
            hits += occurrences[in_ram[seen]].sum()
            looked_up += batch
        entering = seen[~in_ram[seen]]
        last_step[seen] = step
        steps_seen[seen] += 1
        excess = in_ram.sum() + len(entering) - ram_rows
        if excess > 0:
            candidates = np.flatnonzero(in_ram & (last_step != step))
            count = min(len(candidates), max(excess, ram_rows // 16))
            score = last_step[candidates] if policy == "lru" else steps_seen[candidates]
            in_ram[candidates[np.argpartition(score, count - 1)[:count]]] = False
        in_ram[entering] = True
    return hits / looked_up


@pytest.mark.parametrize("policy", ["lru", "lfu"])
@pytest.mark.parametrize(
    "exponent, ram_rows, batch",
    [(0.8, 2000, 200), (1.05, 500, 200), (1.05, 2000, 2000), (1.2, 6000, 1000)],
)
def test_prediction_matches_a_simulated_cache(policy, exponent, ram_rows, batch):
    keys = 10_000
    probs = zipf_probs(exponent, keys)
    simulated = simulate_tier(policy, probs, ram_rows, batch, steps=1200, warm=400, seed=7)
    dist = hit_rate.zipf_distribution(exponent, keys)
    distinct = round(dist.distinct(batch))
    predicted = hit_rate.predict_hit_rate(dist, ram_rows, policy, distinct)
    assert abs(predicted - simulated) < TOLERANCE, (predicted, simulated)


def test_zipf_tail_quadrature_equals_the_sum_over_every_key():
    keys = 1_000_000
    for exponent in (0.6, 1.1):
        exact = hit_rate.KeyDistribution(zipf_probs(exponent, keys), np.ones(keys))
        approx = hit_rate.zipf_distribution(exponent, keys)
        assert len(approx.p) < 10_000
        for ram_rows in (3_000, 200_000):
            for policy in ("lru", "lfu"):
                a = hit_rate.predict_hit_rate(exact, ram_rows, policy, 20_000)
                b = hit_rate.predict_hit_rate(approx, ram_rows, policy, 20_000)
                assert abs(a - b) < 1e-4, (exponent, ram_rows, policy, a, b)


def test_a_histogram_predicts_as_its_distribution():
    keys = 5_000
    counts = np.round(zipf_probs(1.1, keys) * 1e9)
    by_key = {int(k) * 13: float(c) for k, c in enumerate(counts)}
    rates = []
    for shape in ({"zipf": 1.1}, {"key_counts": counts}, {"key_counts": by_key}):
        spec = {"rows": keys, "dim": 16, "kind": "hash", "ram_budget": "400KiB", **shape}
        rates.append(sok.plan_memory([spec], "adam")[0]["hit_rate"])
    assert 0 < rates[0] < 1
    np.testing.assert_allclose(rates, rates[0], atol=1e-4)


def test_hit_rate_none_without_distribution_or_tier_and_one_when_all_fits():
    hashed = {"rows": 50_000, "dim": 16, "kind": "hash", "name": "h"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the small budget's warning
        plan = sok.plan_memory(
            [
                {**hashed, "ram_budget": "1MiB"},
                {**hashed, "zipf": 1.1},
                {**hashed, "zipf": 1.1, "ram_budget": "1GiB"},
                {**hashed, "zipf": 1.1, "ram_budget": "1MiB", "batch_keys": 40_000},
                {"rows": 100, "dim": 4, "zipf": 1.1},
                {**hashed, "zipf": 1.1, "ram_budget": "4MiB", "mode": "localized:1"},
            ],
            "adam",
            num_ranks=2,
        )
    rates = [entry["hit_rate"] for entry in plan]
    # Rank 0's entries, then rank 1's: no distribution, no tier, all in RAM, a batch larger
    # than RAM, a static table, and a table on rank 1 only.
    assert rates[:5] == [None, None, 1.0, None, None]
    assert rates[5] is None and 0 < rates[11] < 1
    assert "hit rate" in str(plan)


def test_one_hundred_million_keys_use_no_array_of_that_size():
    spec = {"rows": 10**8, "dim": 16, "kind": "hash", "ram_budget": "8GiB", "name": "big"}
    for policy in ("lru", "lfu"):
        plan = sok.plan_memory([{**spec, "zipf": 1.1, "evict_policy": policy}], "adam")
        assert 0.9 < plan[0]["hit_rate"] < 1.0


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"zipf": -0.5}, "'bad'.*zipf must be a finite exponent >= 0"),
        ({"zipf": "1.1"}, "'bad'.*zipf must be a number"),
        ({"key_counts": []}, "'bad'.*non-empty"),
        ({"key_counts": {}}, "'bad'.*non-empty"),
        ({"key_counts": [3, -1, 2]}, "'bad'.*counts >= 0"),
        ({"key_counts": [0, 0]}, "'bad'.*all 0"),
        ({"key_counts": np.ones(2001)}, "'bad'.*more than the 2,000 rows"),
        ({"zipf": 1.1, "key_counts": [1, 2]}, "'bad'.*not both"),
    ],
)
def test_bad_distributions_name_the_table(fields, match):
    spec = {"rows": 2000, "dim": 8, "kind": "hash", "ram_budget": "64KiB", "name": "bad"}
    with pytest.raises(ValueError, match=match):
        sok.plan_memory([{**spec, **fields}], "adam")


def measure_tier(policy, exponent, ram_rows, keys=20_000, dim=8, batch=1000):
    """(measured, predicted) hit rate of a tiered DynamicVariable looked up on Zipf batches,
    its budget the one the plan says holds `ram_rows` rows."""
    budget = memory.tier_budget_for(keys, ram_rows, memory.hash_stride(dim, 0, "float32"))
    rng = np.random.default_rng(3)
    cdf = np.cumsum(zipf_probs(exponent, keys))
    draws = [np.minimum(np.searchsorted(cdf, rng.random(batch)), keys - 1) for _ in range(400)]
    spec = {"rows": keys, "dim": dim, "kind": "hash", "ram_budget": budget, "name": "zipf"}
    spec.update(zipf=exponent, evict_policy=policy)
    spec["batch_keys"] = int(np.mean([len(np.unique(d)) for d in draws]))
    predicted = sok.plan_memory([spec], None)[0]["hit_rate"]
    with tempfile.TemporaryDirectory() as tier:
        storage = sok.storage.Disk(tier, ram_budget=budget)
        table = sok.DynamicVariable(dim, storage=storage, evict_policy=policy, name="zipf")
        lookup = tf.function(lambda ids: sok.lookup_sparse(table, ids))
        # Keys scattered over int64; stored coldest first, so that RAM starts on the hot ones.
        key_of_rank = np.arange(keys, dtype=np.int64) * 7919 + 11
        for start in range(keys, 0, -500):
            ids = key_of_rank[max(start - 500, 0) : start][::-1]
            lookup(tf.RaggedTensor.from_tensor(ids.reshape(-1, 1)))
        for i, ids in enumerate(draws):
            if i == 100:  # settled
                before = dict(table.memory_stats())
            lookup(tf.RaggedTensor.from_tensor(key_of_rank[ids].reshape(-1, 1)))
        after = table.memory_stats()
    hits, misses = (after[k] - before[k] for k in ("hits", "misses"))
    return hits / (hits + misses), predicted


@pytest.mark.parametrize("policy", ["lru", "lfu"])
@pytest.mark.parametrize("exponent, ram_rows", [(0.9, 2000), (1.1, 6000)])
def test_prediction_matches_a_real_tiered_table(policy, exponent, ram_rows):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the disk index passes half the budget: meant here
        measured, predicted = measure_tier(policy, exponent, ram_rows)
    assert abs(measured - predicted) < TOLERANCE, (measured, predicted)
