"""The demo's two networks, trained in plain numpy on scikit-learn's
handwritten digits (8x8 images, 1797 of them, shipped inside scikit-learn).

* ``mlp``: 64 -> 32 (ReLU) -> 10.
* ``cnn``: conv 3x3 1->8 (pad 1, ReLU), max-pool 2, conv 3x3 8->16 (pad 1,
  ReLU), max-pool 2, flatten, dense 64 -> 10.

Both train with Adam on softmax cross-entropy from fixed seeds, so a run
gives the same accuracy every time (a few seconds on two cores), and are
exported as float ONNX models with `tpu.compiler.zoo`. `demo_models` keeps
the exported models under ``build/demo`` keyed by `VERSION`: bump it when
the training changes.
"""

from pathlib import Path

import numpy as np
import onnx

from . import zoo


__all__ = ["VERSION", "digits_split", "train_mlp", "train_cnn", "mlp_model", "cnn_model",
           "demo_models", "CLASSES"]

VERSION = 1
CLASSES = 10
TEST_SIZE = 360
SPLIT_SEED = 0


def digits_split(test_size=TEST_SIZE, seed=SPLIT_SEED):
    """``(x_train, x_test, y_train, y_test)``: the digits as float32 (N, 64)
    rows in [0, 1] (pixel / 16), labels int64, a stratified split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    return train_test_split(x, digits.target.astype(np.int64), test_size=test_size,
                            random_state=seed, stratify=digits.target)


# Layers with hand-written gradients ---------------------------------------

def _softmax_xent(logits, labels):
    """Mean cross-entropy and its gradient with respect to the logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    n = len(labels)
    loss = -np.log(p[np.arange(n), labels] + 1e-12).mean()
    p[np.arange(n), labels] -= 1
    return loss, p / n


def _conv3x3(x, w, b):
    """Stride 1, padding 1. Returns the output and the patches for backward."""
    h, wd = x.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, :, i:i + h, j:j + wd] for i in range(3) for j in range(3)], axis=2)
    y = np.einsum("bckhw,ock->bohw", cols, w.reshape(w.shape[0], w.shape[1], 9), optimize=True)
    return y + b[None, :, None, None], cols


def _conv3x3_backward(dy, cols, w):
    h, wd = dy.shape[2:]
    wr = w.reshape(w.shape[0], w.shape[1], 9)
    dw = np.einsum("bohw,bckhw->ock", dy, cols, optimize=True).reshape(w.shape)
    dcols = np.einsum("bohw,ock->bckhw", dy, wr, optimize=True)
    dxp = np.zeros((dy.shape[0], w.shape[1], h + 2, wd + 2), dy.dtype)
    for k, (i, j) in enumerate((i, j) for i in range(3) for j in range(3)):
        dxp[:, :, i:i + h, j:j + wd] += dcols[:, :, k]
    return dxp[:, :, 1:-1, 1:-1], dw, dy.sum(axis=(0, 2, 3))


def _maxpool2(x):
    """2x2 max-pool, stride 2. Returns the output and the winners' one-hot
    mask (one winner per window, so ties do not double the gradient)."""
    b, c, h, w = x.shape
    windows = x.reshape(b, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(b, c, h // 2, w // 2, 4)
    mask = np.eye(4, dtype=x.dtype)[windows.argmax(axis=-1)]
    return windows.max(axis=-1), mask


def _maxpool2_backward(dy, mask):
    b, c, h2, w2 = dy.shape
    d = (mask * dy[..., None]).reshape(b, c, h2, w2, 2, 2).transpose(0, 1, 2, 4, 3, 5)
    return d.reshape(b, c, 2 * h2, 2 * w2)


class _Adam:
    def __init__(self, params, lr):
        self.params, self.lr, self.t = params, lr, 0
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}

    def step(self, grads, b1=0.9, b2=0.999, eps=1e-8):
        self.t += 1
        for k, g in grads.items():
            self.m[k] = b1 * self.m[k] + (1 - b1) * g
            self.v[k] = b2 * self.v[k] + (1 - b2) * g * g
            m = self.m[k] / (1 - b1 ** self.t)
            v = self.v[k] / (1 - b2 ** self.t)
            self.params[k] -= self.lr * m / (np.sqrt(v) + eps)


def _he(rng, shape, fan_in):
    return rng.normal(0.0, np.sqrt(2.0 / fan_in), size=shape).astype(np.float32)


def _train(params, grad_fn, x, y, epochs, lr, batch, seed):
    rng = np.random.default_rng(seed + 1)
    adam = _Adam(params, lr)
    for epoch in range(epochs):
        adam.lr = lr * 0.5 * (1 + np.cos(np.pi * epoch / epochs))   # cosine decay
        order = rng.permutation(len(x))
        for i in range(0, len(x), batch):
            idx = order[i:i + batch]
            adam.step(grad_fn(params, x[idx], y[idx]))
    return params


# The two networks ---------------------------------------------------------------

def mlp_forward(p, x, cache=None):
    h = np.maximum(x @ p["w1"] + p["b1"], 0)
    if cache is not None:
        cache.update(x=x, h=h)
    return h @ p["w2"] + p["b2"]


def _mlp_grads(p, x, y):
    cache = {}
    _, d = _softmax_xent(mlp_forward(p, x, cache), y)
    dh = (d @ p["w2"].T) * (cache["h"] > 0)
    return {"w2": cache["h"].T @ d, "b2": d.sum(0), "w1": x.T @ dh, "b1": dh.sum(0)}


def train_mlp(x, y, hidden=32, epochs=40, lr=0.01, batch=32, seed=0):
    """Float MLP parameters ``{"w1" (64, hidden), "b1", "w2" (hidden, 10), "b2"}``."""
    rng = np.random.default_rng(seed)
    p = {"w1": _he(rng, (x.shape[1], hidden), x.shape[1]), "b1": np.zeros(hidden, np.float32),
         "w2": _he(rng, (hidden, CLASSES), hidden), "b2": np.zeros(CLASSES, np.float32)}
    return _train(p, _mlp_grads, x, y, epochs, lr, batch, seed)


def cnn_forward(p, x, cache=None):
    """``x`` (B, 1, 8, 8) -> logits (B, 10)."""
    y1, cols1 = _conv3x3(x, p["c1"], p["d1"])
    r1 = np.maximum(y1, 0)
    p1, m1 = _maxpool2(r1)
    y2, cols2 = _conv3x3(p1, p["c2"], p["d2"])
    r2 = np.maximum(y2, 0)
    p2, m2 = _maxpool2(r2)
    flat = p2.reshape(len(x), -1)       # NCHW flatten, as ONNX's Flatten does
    if cache is not None:
        cache.update(cols1=cols1, r1=r1, m1=m1, cols2=cols2, r2=r2, m2=m2, shape2=p2.shape, flat=flat)
    return flat @ p["w"] + p["b"]


def _cnn_grads(p, x, y):
    c = {}
    _, d = _softmax_xent(cnn_forward(p, x, c), y)
    g = {"w": c["flat"].T @ d, "b": d.sum(0)}
    d = _maxpool2_backward((d @ p["w"].T).reshape(c["shape2"]), c["m2"]) * (c["r2"] > 0)
    d, g["c2"], g["d2"] = _conv3x3_backward(d, c["cols2"], p["c2"])
    d = _maxpool2_backward(d, c["m1"]) * (c["r1"] > 0)
    _, g["c1"], g["d1"] = _conv3x3_backward(d, c["cols1"], p["c1"])
    return g


def train_cnn(x, y, channels=(8, 16), epochs=20, lr=0.005, batch=32, seed=0):
    """Float CNN parameters: conv weights ``c1`` (8, 1, 3, 3), ``c2`` (16, 8, 3, 3)
    with biases ``d1``, ``d2``; dense ``w`` (64, 10), ``b``. ``x`` is (N, 64)."""
    rng = np.random.default_rng(seed)
    c1, c2 = channels
    p = {"c1": _he(rng, (c1, 1, 3, 3), 9), "d1": np.zeros(c1, np.float32),
         "c2": _he(rng, (c2, c1, 3, 3), 9 * c1), "d2": np.zeros(c2, np.float32),
         "w": _he(rng, (4 * c2, CLASSES), 4 * c2), "b": np.zeros(CLASSES, np.float32)}
    return _train(p, _cnn_grads, x.reshape(-1, 1, 8, 8), y, epochs, lr, batch, seed)


def mlp_model(p):
    """The float ONNX model of trained MLP parameters: input "x" (N, 64)."""
    return zoo.mlp([p["w1"].shape[0], p["w1"].shape[1], CLASSES],
                   weights=[(p["w1"], p["b1"]), (p["w2"], p["b2"])], name="digits_mlp")


def cnn_model(p):
    """The float ONNX model of trained CNN parameters: input "x" (N, 1, 8, 8)."""
    c1, c2 = p["c1"].shape[0], p["c2"].shape[0]
    return zoo.conv_net((None, 1, 8, 8), [
        zoo.conv(c1, k=3, pad=1, weight=p["c1"], bias=p["d1"]), zoo.maxpool(2),
        zoo.conv(c2, k=3, pad=1, weight=p["c2"], bias=p["d2"]), zoo.maxpool(2),
        zoo.flatten(), zoo.dense(CLASSES, act=None, weight=p["w"], bias=p["b"]),
    ], name="digits_cnn")


def model_input(name, x):
    """The demo data ``x`` (N, 64) shaped for model ``name``."""
    return x.reshape(-1, 1, 8, 8) if name == "cnn" else x


TRAINERS = {"mlp": (train_mlp, mlp_model), "cnn": (train_cnn, cnn_model)}


def demo_models(cache_dir="build/demo", names=("mlp", "cnn"), log=None):
    """The trained float ONNX models by name, trained now or loaded from
    ``cache_dir/digits_<name>_v<VERSION>.onnx``. ``log(message)`` hears what
    happens."""
    cache = Path(cache_dir)
    models = {}
    split = None
    for name in names:
        path = cache / f"digits_{name}_v{VERSION}.onnx"
        if path.exists():
            models[name] = onnx.load(str(path))
            continue
        if split is None:
            split = digits_split()
        x_train, _, y_train, _ = split
        train, export = TRAINERS[name]
        if log:
            log(f"training the {name} on {len(x_train)} digits")
        models[name] = export(train(x_train, y_train))
        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        onnx.save(models[name], str(tmp))
        tmp.replace(path)     # a run stopped half-way leaves no broken cache
    return models
