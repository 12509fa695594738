"""Nature-CNN gradient time at the top level vs inside ``lax.scan``: ``lax.conv`` vs PatchConv.

Backs the claim in :class:`hyperx.heads.PatchConv` and docs/atari.md that XLA:CPU runs a
convolution's gradient much slower inside a loop body, and that the patch-matmul form does not.
Writes benchmarks/results/conv_in_scan.json. Run: ``python benchmarks/conv_in_scan.py`` (~1 min).
"""

from __future__ import annotations

import json
import os
import time

import flax.linen as nn
import jax
import jax.numpy as jnp

from hyperx.heads import NatureCNN

OUT = os.path.join(os.path.dirname(__file__), "results", "conv_in_scan.json")


class LaxCNN(nn.Module):
    """The same torso with ``flax.linen.Conv`` (``lax.conv_general_dilated``)."""

    @nn.compact
    def __call__(self, x):
        h = x.astype(jnp.float32) / 255.0
        for f, k, s in ((32, 8, 4), (64, 4, 2), (64, 3, 1)):
            h = nn.relu(nn.Conv(f, (k, k), (s, s), "VALID")(h))
        return nn.relu(nn.Dense(256)(h.reshape(h.shape[0], -1)))


def seconds(f, *args, repeats: int = 3) -> float:
    jax.block_until_ready(f(*args))
    start = time.perf_counter()
    for _ in range(repeats):
        out = f(*args)
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / repeats


def main() -> None:
    x = jnp.zeros((32, 84, 84, 4), jnp.uint8)
    rows = {}
    for name, module in (("lax_conv", LaxCNN()), ("patch_conv", NatureCNN())):
        params = module.init(jax.random.PRNGKey(0), x)
        grad = jax.grad(lambda p, x, m=module: m.apply(p, x).sum())
        top = jax.jit(grad)
        in_scan = jax.jit(lambda p, x, g=grad: jax.lax.scan(
            lambda c, _: (c, g(p, x)), 0, None, length=1)[1])
        rows[name] = {"top_level_s": seconds(top, params, x),
                      "in_scan_s": seconds(in_scan, params, x)}
        rows[name]["ratio"] = rows[name]["in_scan_s"] / rows[name]["top_level_s"]
    result = {"batch": 32, "device": str(jax.devices()[0]), "rows": rows,
              "command": "python benchmarks/conv_in_scan.py"}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
