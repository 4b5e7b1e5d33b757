"""``nn.functional`` and parameter-free ``nn`` modules written once for torch and for
tensorplay_jax: torch is the oracle (``tests/_torch_golden.py``). ``golden/
make_functional_golden.py`` stores torch's answers in ``golden/torch_functional.npz``;
``test_torch_functional_parity.py`` runs the cases here and compares."""

from __future__ import annotations

import zlib

import numpy as np

from tests._torch_golden import Case

_R = np.random.default_rng(7)


def _n(*shape: int) -> np.ndarray:
    return (_R.standard_normal(shape) * 2).astype(np.float32)


def _prob(*shape: int) -> np.ndarray:
    return _R.uniform(0.05, 0.95, shape).astype(np.float32)


def _log_prob(*shape: int) -> np.ndarray:
    p = _R.uniform(0.1, 1.0, shape)
    return np.log(p / p.sum(-1, keepdims=True)).astype(np.float32)


# values at and around each activation's kinks: torch decides the gradient there
_KINKS = np.array([-7.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0, 7.0, 25.0], np.float32)
_W, _POS_W = _prob(3, 4), _prob(4) * 3  # weights: torch differentiates no loss by them

CASES: dict[str, Case] = {
    "leaky_relu": Case(lambda m, x: m.nn.functional.leaky_relu(x, 0.1), (_KINKS,)),
    "elu": Case(lambda m, x: m.nn.functional.elu(x, alpha=1.5), (_KINKS,)),
    "selu": Case(lambda m, x: m.nn.functional.selu(x), (_KINKS,)),
    "celu": Case(lambda m, x: m.nn.functional.celu(x, alpha=2.0), (_KINKS,)),
    "gelu": Case(lambda m, x: m.nn.functional.gelu(x), (_KINKS,)),
    "gelu_tanh": Case(lambda m, x: m.nn.functional.gelu(x, approximate="tanh"), (_KINKS,)),
    "silu": Case(lambda m, x: m.nn.functional.silu(x), (_KINKS,)),
    "mish": Case(lambda m, x: m.nn.functional.mish(x), (_KINKS,)),
    "softplus": Case(lambda m, x: m.nn.functional.softplus(x, beta=2.0, threshold=5.0), (_KINKS,)),
    "softsign": Case(lambda m, x: m.nn.functional.softsign(x), (_KINKS,)),
    "hardtanh": Case(lambda m, x: m.nn.functional.hardtanh(x, -1.0, 3.0), (_KINKS,)),
    "relu6": Case(lambda m, x: m.nn.functional.relu6(x), (_KINKS,)),
    "hardswish": Case(lambda m, x: m.nn.functional.hardswish(x), (_KINKS,)),
    "hardsigmoid": Case(lambda m, x: m.nn.functional.hardsigmoid(x), (_KINKS,)),
    "logsigmoid": Case(lambda m, x: m.nn.functional.logsigmoid(x), (_KINKS,)),
    "softmin": Case(lambda m, x: m.nn.functional.softmin(x, dim=1), (_n(3, 4),)),
    "glu": Case(lambda m, x: m.nn.functional.glu(x, dim=-1), (_n(3, 4),)),
    "threshold": Case(lambda m, x: m.nn.functional.threshold(x, 0.5, -2.0), (_KINKS,)),
    "modules": Case(
        lambda m, x: (
            m.nn.LeakyReLU(0.2)(x),
            m.nn.GELU(approximate="tanh")(x),
            m.nn.SiLU()(x),
            m.nn.Softplus(beta=0.5)(x),
            m.nn.Hardtanh(-2.0, 2.0)(x),
            m.nn.ELU()(x),
            m.nn.Unflatten(0, (1, 11))(x),
        ),
        (_KINKS,),
    ),
    # losses
    "binary_cross_entropy": Case(
        lambda m, x, t: (
            m.nn.functional.binary_cross_entropy(x, t),
            m.nn.functional.binary_cross_entropy(x, t, reduction="none"),
        ),
        (_prob(3, 4), _prob(3, 4)),
    ),
    "binary_cross_entropy_weighted_edges": Case(
        lambda m, x, t, w: m.nn.BCELoss(weight=w, reduction="sum")(x, t),
        (
            np.array([0.0, 1.0, 0.5, 0.25], np.float32),
            np.array([1.0, 0.0, 1.0, 0.0], np.float32),
            _prob(4),
        ),
        differentiable=False,
    ),
    "bce_with_logits": Case(
        lambda m, x, t: (
            m.nn.functional.binary_cross_entropy_with_logits(x, t),
            m.nn.BCEWithLogitsLoss(reduction="none")(x, t),
        ),
        (_n(3, 4), _prob(3, 4)),
    ),
    "bce_with_logits_pos_weight": Case(
        lambda m, x, t: m.nn.functional.binary_cross_entropy_with_logits(
            x, t, weight=m.tensor(_W), pos_weight=m.tensor(_POS_W), reduction="sum"
        ),
        (_n(3, 4) * 10, _prob(3, 4)),
    ),
    "smooth_l1": Case(
        lambda m, x, t: (
            m.nn.functional.smooth_l1_loss(x, t),
            m.nn.SmoothL1Loss(beta=0.5, reduction="none")(x, t),
            m.nn.functional.smooth_l1_loss(x, t, beta=0.0),
        ),
        (_n(3, 4), _n(3, 4)),
    ),
    "huber": Case(
        lambda m, x, t: (
            m.nn.functional.huber_loss(x, t, delta=0.7),
            m.nn.HuberLoss(reduction="sum")(x, t),
        ),
        (_n(3, 4), _n(3, 4)),
    ),
    "kl_div": Case(
        lambda m, x, t: (
            m.nn.functional.kl_div(x, t, reduction="batchmean"),
            m.nn.KLDivLoss(reduction="none")(x, t),
            m.nn.functional.kl_div(x, t.log(), reduction="sum", log_target=True),
        ),
        (_log_prob(3, 4), np.exp(_log_prob(3, 4))),
    ),
    "kl_div_zero_target": Case(
        lambda m, x, t: m.nn.functional.kl_div(x, t, reduction="sum"),
        (_log_prob(2, 3), np.array([[0.0, 0.5, 0.5], [1.0, 0.0, 0.0]], np.float32)),
    ),
    "margin_ranking": Case(
        lambda m, a, b: m.nn.MarginRankingLoss(margin=0.3)(a, b, m.tensor([1.0, -1.0, 1.0, -1.0])),
        (_n(4), _n(4)),
    ),
    # distances
    "cosine_similarity": Case(
        lambda m, a, b: (
            m.nn.functional.cosine_similarity(a, b),
            m.nn.CosineSimilarity(dim=0)(a, b),
        ),
        (_n(3, 4), _n(3, 4)),
    ),
    "cosine_similarity_broadcast": Case(
        lambda m, a, b: m.nn.functional.cosine_similarity(a, b, dim=-1), (_n(3, 4), _n(1, 4))
    ),
    "pairwise_distance": Case(
        lambda m, a, b: (
            m.nn.functional.pairwise_distance(a, b),
            m.nn.PairwiseDistance(p=1.0, keepdim=True)(a, b),
        ),
        (_n(3, 4), _n(3, 4)),
    ),
    "normalize": Case(
        lambda m, x: (m.nn.functional.normalize(x), m.nn.functional.normalize(x, p=1.0, dim=0)),
        (_n(3, 4),),
    ),
    "normalize_zero_row": Case(
        lambda m, x: m.nn.functional.normalize(x, dim=1),
        (np.array([[0.0, 0.0], [3.0, 4.0]], np.float32),),
    ),
    # encodings and padding
    "one_hot": Case(
        lambda m, i: (m.nn.functional.one_hot(i), m.nn.functional.one_hot(i, 6)),
        (np.array([[0, 3], [2, 1]]),),
    ),
    "pad_constant": Case(
        lambda m, x: (
            m.nn.functional.pad(x, (1, 2)),
            m.nn.functional.pad(x, (0, 1, 2, 0), value=5.0),
        ),
        (_n(2, 3),),
    ),
    "pad_reflect_replicate_circular": Case(
        lambda m, x: (
            m.nn.functional.pad(x, (2, 1), mode="reflect"),
            m.nn.functional.pad(x, (1, 1, 1, 0), mode="replicate"),
            m.nn.functional.pad(x, (1, 2), mode="circular"),
        ),
        (_n(1, 2, 4),),
    ),
    # layers, their weights as inputs
    "conv1d": Case(
        lambda m, x, w, b: (
            m.nn.functional.conv1d(x, w, b),
            m.nn.functional.conv1d(x, w, None, stride=2, padding=1),
            m.nn.functional.conv1d(x, w, b, padding="same", dilation=2),
        ),
        (_n(2, 3, 9), _n(4, 3, 3), _n(4)),
    ),
    "conv1d_groups": Case(
        lambda m, x, w: m.nn.functional.conv1d(x, w, groups=2), (_n(1, 4, 6), _n(6, 2, 2))
    ),
    "avg_pool2d": Case(
        lambda m, x: (
            m.nn.functional.avg_pool2d(x, 2),
            m.nn.functional.avg_pool2d(x, 3, stride=2, padding=1),
            m.nn.functional.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
            m.nn.AvgPool2d((2, 3), divisor_override=2)(x),
        ),
        (_n(2, 3, 5, 6),),
    ),
    "group_norm": Case(
        lambda m, x, w, b: (
            m.nn.functional.group_norm(x, 2, w, b),
            m.nn.functional.group_norm(x, 4, eps=1e-3),
        ),
        (_n(3, 4, 5), _n(4), _n(4)),
    ),
    "batch_norm_1d": Case(
        lambda m, x, x3: (m.nn.BatchNorm1d(4)(x), m.nn.BatchNorm1d(4, affine=False)(x3)),
        (_n(6, 4), _n(2, 4, 5)),
    ),
    "conv1d_module_values": Case(
        lambda m, x: _loaded(m, m.nn.Conv1d(3, 2, 2, stride=2, bias=True), _CONV_W, _CONV_B)(x),
        (_n(2, 3, 7),),
    ),
    # recurrent layers, their weights fixed by name (the same on both libraries)
    "gru": Case(
        lambda m, x, h0: _fixed(
            m, m.nn.GRU(3, 4, num_layers=2, bidirectional=True, batch_first=True)
        )(x, h0),
        (_n(2, 5, 3) * 0.5, _n(4, 2, 4) * 0.5),
    ),
    "gru_unbatched_no_bias": Case(
        lambda m, x: _fixed(m, m.nn.GRU(3, 2, bias=False))(x), (_n(4, 3) * 0.5,)
    ),
    "rnn_tanh": Case(
        lambda m, x, h0: _fixed(m, m.nn.RNN(3, 4, num_layers=2))(x, h0),
        (_n(5, 2, 3) * 0.5, _n(2, 2, 4) * 0.5),
    ),
    "rnn_relu_bidirectional": Case(
        lambda m, x: _fixed(m, m.nn.RNN(3, 4, nonlinearity="relu", bidirectional=True))(x),
        (_n(5, 2, 3) * 0.5,),
    ),
    "lstm_through_the_shared_base": Case(
        lambda m, x: _lstm_outputs(_fixed(m, m.nn.LSTM(3, 4, num_layers=2))(x)),
        (_n(5, 2, 3) * 0.5,),
    ),
    # attention and the transformer encoder (eval mode: no dropout)
    "multihead_attention": Case(
        lambda m, q, k: _fixed(m, m.nn.MultiheadAttention(8, 2, batch_first=True)).eval()(
            q, k, k, key_padding_mask=m.tensor([[False, False, True], [False, False, False]])
        ),
        (_n(2, 4, 8) * 0.5, _n(2, 3, 8) * 0.5),
    ),
    "multihead_attention_masks_per_head": Case(
        lambda m, x: _fixed(m, m.nn.MultiheadAttention(4, 2)).eval()(
            x, x, x, attn_mask=m.tensor(_CAUSAL), average_attn_weights=False
        ),
        (_n(3, 2, 4) * 0.5,),
    ),
    "multihead_attention_float_mask_unbatched_no_bias": Case(
        lambda m, x: _fixed(m, m.nn.MultiheadAttention(4, 1, bias=False)).eval()(
            x, x, x, attn_mask=m.tensor(_BIAS_MASK), need_weights=False
        )[0],
        (_n(3, 4) * 0.5,),
    ),
    "transformer_encoder_post_norm": Case(
        lambda m, x: _fixed(
            m,
            m.nn.TransformerEncoder(
                m.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True), 2
            ),
        ).eval()(x),
        (_n(2, 5, 8) * 0.5,),
    ),
    "transformer_encoder_layer_pre_norm_gelu_mask": Case(
        lambda m, x: _fixed(
            m,
            m.nn.TransformerEncoderLayer(
                4, 2, dim_feedforward=8, activation="gelu", norm_first=True
            ),
        ).eval()(x, src_mask=m.tensor(_CAUSAL)),
        (_n(3, 2, 4) * 0.5,),
    ),
}

_CAUSAL = np.triu(np.ones((3, 3), bool), k=1)
_BIAS_MASK = np.array([[0.0, -1.0, 0.5], [0.2, 0.0, -0.3], [0.0, 0.0, 0.0]], np.float32)


def _fixed(m, module):
    """``module`` with every parameter drawn from a generator seeded by its name."""
    state = {
        k: m.tensor(
            np.random.default_rng(zlib.crc32(k.encode()))
            .uniform(-0.5, 0.5, tuple(v.shape))
            .astype(np.float32)
        )
        for k, v in module.state_dict().items()
    }
    module.load_state_dict(state)
    return module


def _lstm_outputs(result):
    out, (h, c) = result
    return out, h, c


_CONV_W, _CONV_B = _n(2, 3, 2), _n(2)


def _loaded(m, module, weight, bias):
    """``module`` with the given weight and bias (the same on both libraries)."""
    module.load_state_dict({"weight": m.tensor(weight), "bias": m.tensor(bias)})
    return module
