"""NumPy "lazy" optimizers: Keras 3's update formulas applied to the touched rows only.

The same formulas over all rows are Keras' own; test_optimizers.py (beside this file) checks that on
steps where every row is touched, so the reference cannot drift from Keras unnoticed.
"""

import numpy as np


class LazyOptimizer:
    def __init__(self, name: str, config: dict, shape, dtype=np.float32):
        self.name, self.c, self.dtype = name, config, dtype
        self.iterations = 0
        z = lambda fill=0.0: np.full(shape, fill, dtype)  # noqa: E731
        init_acc = config.get("initial_accumulator_value", 0.0)
        self.s = {
            "m": z(),
            "v": z(),
            "v_hat": z(),
            "acc": z(init_acc),
            "vel": z(),
            "mom": z(),
            "avg": z(),
            "linear": z(),
            "u": z(),
            "acc_delta": z(),
        }

    def step(self, w: np.ndarray, rows: np.ndarray, g: np.ndarray, lr: float) -> None:
        """Updates w[rows] (rows distinct) in place with gradient rows g."""
        c, t = self.c, self.dtype
        lr = t(lr)
        rows = np.asarray(rows)
        wr = w[rows]
        if c.get("weight_decay"):
            wr = wr - wr * t(c["weight_decay"]) * lr
        s = {k: v[rows] for k, v in self.s.items()}
        if self.name == "sgd":
            mu = t(c["momentum"])
            if mu:
                s["m"] = s["m"] * mu - g * lr
                wr = wr + (s["m"] * mu - g * lr if c["nesterov"] else s["m"])
            else:
                wr = wr - g * lr
        elif self.name in ("adam", "adamw"):
            step = t(self.iterations + 1)
            b1, b2 = t(c["beta_1"]), t(c["beta_2"])
            alpha = lr * np.sqrt(t(1) - b2**step) / (t(1) - b1**step)
            s["m"] = s["m"] + (g - s["m"]) * (t(1) - b1)
            s["v"] = s["v"] + (g * g - s["v"]) * (t(1) - b2)
            v = s["v"]
            if c["amsgrad"]:
                s["v_hat"] = np.maximum(s["v_hat"], s["v"])
                v = s["v_hat"]
            wr = wr - (s["m"] * alpha) / (np.sqrt(v) + t(c["epsilon"]))
        elif self.name == "adagrad":
            s["acc"] = s["acc"] + g * g
            wr = wr - (lr * g) / np.sqrt(s["acc"] + t(c["epsilon"]))
        elif self.name == "rmsprop":
            rho, mu, eps = t(c["rho"]), t(c["momentum"]), t(c["epsilon"])
            s["vel"] = rho * s["vel"] + (t(1) - rho) * (g * g)
            denom = s["vel"] + eps
            if c["centered"]:
                s["avg"] = rho * s["avg"] + (t(1) - rho) * g
                denom = s["vel"] - s["avg"] ** 2 + eps
            inc = (lr * g) / np.sqrt(denom)
            if mu > 0:
                s["mom"] = mu * s["mom"] + inc
                wr = wr - s["mom"]
            else:
                wr = wr - inc
        elif self.name == "ftrl":
            p = t(c["learning_rate_power"])
            l1 = t(c["l1_regularization_strength"])
            l2 = t(c["l2_regularization_strength"]) + t(c["beta"]) / (t(2) * lr)
            grad = g + t(2) * t(c["l2_shrinkage_regularization_strength"]) * wr
            new_acc = s["acc"] + g * g
            s["linear"] = s["linear"] + grad - (new_acc ** (-p) - s["acc"] ** (-p)) / lr * wr
            quadratic = new_acc ** (-p) / lr + t(2) * l2
            wr = (np.clip(s["linear"], -l1, l1) - s["linear"]) / quadratic
            s["acc"] = new_acc
        elif self.name == "adamax":
            b1, b2, eps = t(c["beta_1"]), t(c["beta_2"]), t(c["epsilon"])
            bias = t(1) - b1 ** t(self.iterations + 1)
            s["m"] = s["m"] + (g - s["m"]) * (t(1) - b1)
            s["u"] = np.maximum(b2 * s["u"], np.abs(g))
            wr = wr - (lr * s["m"]) / (bias * (s["u"] + eps))
        elif self.name == "adadelta":
            rho, eps = t(c["rho"]), t(c["epsilon"])
            s["acc"] = rho * s["acc"] + (t(1) - rho) * (g * g)
            delta = -(np.sqrt(s["acc_delta"] + eps) * g) / np.sqrt(s["acc"] + eps)
            s["acc_delta"] = rho * s["acc_delta"] + (t(1) - rho) * (delta * delta)
            wr = wr + lr * delta
        else:
            raise ValueError(self.name)
        w[rows] = wr
        for k, v in s.items():
            self.s[k][rows] = v
        self.iterations += 1
