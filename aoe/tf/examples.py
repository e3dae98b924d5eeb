"""Models built from code (random weights, nothing downloaded) for the tests and the bench.

``bert_like_encoder`` is a BERT-base-shaped Keras encoder: token + position embeddings, LayerNorm,
``layers`` blocks of multi-head self-attention (Dense Q/K/V, batched matmuls, softmax with the
attention mask added, Dense output, residual + LayerNorm) and a GELU feed-forward block, then
BERT's pooler (first token, Dense + tanh) and a classifier. BERT-base is ``layers=12, hidden=768,
heads=12, ffn=3072``.
"""
from __future__ import annotations

from typing import Any


def bert_like_encoder(seq: int = 128, layers: int = 2, hidden: int = 768, heads: int = 12, ffn: int = 3072,
                      vocab: int = 30522, labels: int = 2, seed: int = 0) -> Any:
    """A Keras Model ``(input_ids, attention_mask) -> logits`` with random weights."""
    import keras
    from keras import ops

    keras.utils.set_random_seed(seed)
    dh = hidden // heads

    class Attention(keras.layers.Layer):
        """Multi-head self-attention written with batched matmuls (no einsum)."""

        def __init__(self, **kw: Any) -> None:
            super().__init__(**kw)
            self.q = keras.layers.Dense(hidden, name="query")
            self.k = keras.layers.Dense(hidden, name="key")
            self.v = keras.layers.Dense(hidden, name="value")
            self.o = keras.layers.Dense(hidden, name="output")

        def build(self, x_shape: Any, mask_shape: Any = None) -> None:
            for d in (self.q, self.k, self.v, self.o):
                d.build(x_shape)

        def split(self, x: Any) -> Any:
            return ops.transpose(ops.reshape(x, (-1, seq, heads, dh)), (0, 2, 1, 3))

        def call(self, x: Any, mask: Any) -> Any:
            bias = ops.reshape((1.0 - mask) * -10000.0, (-1, 1, 1, seq))
            q, k, v = self.split(self.q(x)), self.split(self.k(x)), self.split(self.v(x))
            scores = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * (1.0 / dh ** 0.5) + bias
            ctx = ops.matmul(ops.softmax(scores, axis=-1), v)
            return self.o(ops.reshape(ops.transpose(ctx, (0, 2, 1, 3)), (-1, seq, hidden)))

    ids = keras.Input((seq,), dtype="int32", name="input_ids")
    mask = keras.Input((seq,), dtype="float32", name="attention_mask")
    tok = keras.layers.Embedding(vocab, hidden, name="word_embeddings")(ids)
    pos = keras.layers.Embedding(seq, hidden, name="position_embeddings")(ops.arange(seq)[None, :])
    x = keras.layers.LayerNormalization(epsilon=1e-12, name="embeddings_ln")(tok + pos)
    for i in range(layers):
        a = Attention(name=f"layer{i}_attention")(x, mask)
        x = keras.layers.LayerNormalization(epsilon=1e-12, name=f"layer{i}_attention_ln")(x + a)
        f = keras.layers.Dense(ffn, activation="gelu", name=f"layer{i}_intermediate")(x)
        f = keras.layers.Dense(hidden, name=f"layer{i}_output")(f)
        x = keras.layers.LayerNormalization(epsilon=1e-12, name=f"layer{i}_output_ln")(x + f)
    pooled = keras.layers.Dense(hidden, activation="tanh", name="pooler")(x[:, 0, :])
    logits = keras.layers.Dense(labels, name="classifier")(pooled)
    return keras.Model([ids, mask], logits, name="bert_like")


def resnet50(size: int = 224, classes: int = 1000, seed: int = 0) -> Any:
    """Keras ResNet50 with random weights (``weights=None``: nothing is downloaded)."""
    import keras

    keras.utils.set_random_seed(seed)
    return keras.applications.ResNet50(weights=None, input_shape=(size, size, 3), classes=classes)
