"""PPO's ONNX export: ``ember-np export RUN_OR_CHECKPOINT -o policy.onnx`` of a PPO run.

(:func:`ember_np.export.export_onnx` finds this module's :func:`export_onnx`
through the algorithm registry.)

The graph is the actor alone, built with the ``onnx`` package's helpers (no torch),
from :class:`~ember_np.ppo.policy.PPOPolicy`'s layers: one ``Gemm`` per layer on the
path to the logits (``Y = X @ W + b``, the checkpoint's ``(in, out)`` weights), a
``Tanh`` or ``Relu`` after each hidden one::

    obs (batch, obs_size) [-> normalise] -> Gemm -> Tanh -> ... -> Gemm -> logits (batch, n_actions)

When the agent normalised observations, the checkpoint's frozen statistics come
first, in float64 as :func:`~ember_np.ppo.normalize_stats.normalize_obs_numpy`:
``clip((obs - mean) / sqrt(var + eps), -clip_obs, clip_obs)``, then float32.

The deterministic action is ``action_offset + argmax(logits)`` (the first maximum on
ties, as ``PPOPolicy.act``). The model's ``metadata_props`` hold ``obs_size``,
``obs_shape``, ``n_actions``, ``action_offset``, ``normalize_obs``, the ``encoder``
and ``action_mapper`` descriptions (JSON) and the source checkpoint. The file is
written atomically, as DQN's export (:mod:`ember_np.dqn.onnx`): nothing partial is
left on any error. Needs the ``onnx`` extra: ``pip install "ember-np[onnx]"``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from ember_np._files import check_output, write_output
from ember_np.checkpoint import CheckpointError
from ember_np.dqn.onnx import INSTALL_HINT, IR_VERSION, OPSET
from ember_np.encoding import IndexActionMapper, describe
from ember_np.ppo.normalize_stats import NORM_EPSILON
from ember_np.ppo.policy import PPOPolicy

__all__ = ["export_onnx", "policy_to_onnx"]

_INPUT = "the checkpoint being exported"
_ACTIVATION_OPS = {1: "Tanh", 2: "Relu"}  # the layer table's activation codes


def policy_to_onnx(policy: PPOPolicy, source: str = "") -> Any:
    """The ONNX model (``onnx.ModelProto``) computing ``policy``'s logits.

    Raises
    ------
    ImportError
        Without the onnx package (the message says how to install it).
    ValueError
        An action mapper that is not an ``IndexActionMapper``.
    """
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    mapper = policy.action_mapper
    if not isinstance(mapper, IndexActionMapper):
        raise ValueError(
            "ONNX export records actions as offset + index and needs an IndexActionMapper, "
            f"got {type(mapper).__name__}"
        )
    obs_size = int(policy.layers[0, 0])
    inits: list[Any] = []
    nodes: list[Any] = []
    names: dict[int, str] = {}
    x = "obs"
    if policy.obs_stats is not None:
        mean, var = policy.obs_stats
        clip = policy.clip_obs
        inits += [
            numpy_helper.from_array(np.asarray(mean, np.float64), "obs_mean"),
            numpy_helper.from_array(np.sqrt(np.asarray(var, np.float64) + NORM_EPSILON),
                                    "obs_std"),
            numpy_helper.from_array(np.array(-clip, np.float64), "clip_low"),
            numpy_helper.from_array(np.array(clip, np.float64), "clip_high"),
        ]  # fmt: skip
        nodes += [
            helper.make_node("Cast", ["obs"], ["obs_f64"], to=TensorProto.DOUBLE, name="obs_f64"),
            helper.make_node("Sub", ["obs_f64", "obs_mean"], ["obs_centered"], name="center"),
            helper.make_node("Div", ["obs_centered", "obs_std"], ["obs_scaled"], name="scale"),
            helper.make_node("Clip", ["obs_scaled", "clip_low", "clip_high"], ["obs_clipped"],
                             name="clip"),
            helper.make_node("Cast", ["obs_clipped"], ["obs_norm"], to=TensorProto.FLOAT,
                             name="obs_f32"),
        ]  # fmt: skip
        x = "obs_norm"
    for l, (w, b, src, act) in policy.actor_layers():
        inits += [numpy_helper.from_array(w, f"w{l}"), numpy_helper.from_array(b, f"b{l}")]
        out = "logits" if l == policy.logits_layer else f"z{l}"
        h_in = x if src < 0 else names[src]
        nodes.append(helper.make_node("Gemm", [h_in, f"w{l}", f"b{l}"], [out], name=f"dense{l}"))
        if act in _ACTIVATION_OPS:
            nodes.append(helper.make_node(_ACTIVATION_OPS[act], [out], [f"h{l}"], name=f"act{l}"))
            out = f"h{l}"
        names[l] = out
    n_actions = int(policy.layers[policy.logits_layer, 1])
    graph = helper.make_graph(
        nodes,
        "ember_np_ppo_policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", obs_size])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", n_actions])],
        inits,
    )
    from ember_np import __version__

    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
        producer_name="ember_np", producer_version=__version__,
        doc_string="PPO actor; deterministic action = action_offset + argmax(logits, axis=1)",
    )  # fmt: skip
    encoder = describe(policy.encoder)
    helper.set_model_props(model, {
        "algorithm": "ppo",
        "obs_size": str(obs_size),
        "obs_shape": json.dumps(encoder.get("shape", [obs_size])),
        "n_actions": str(n_actions),
        "outputs": "logits",
        "action_offset": str(mapper.start),
        "normalize_obs": json.dumps(policy.obs_stats is not None),
        # trained with action masks: a caller takes the argmax over the legal actions
        "action_masks": json.dumps(policy.action_masks),
        "encoder": json.dumps(encoder, sort_keys=True),
        "action_mapper": json.dumps(describe(mapper), sort_keys=True),
        "greedy_action": "action_offset + argmax(logits, axis=1), first maximum on ties",
        "source": source,
    })  # fmt: skip
    onnx.checker.check_model(model, full_check=True)
    return model


def export_onnx(
    checkpoint: str | os.PathLike[str], output: str | os.PathLike[str]
) -> dict[str, str]:
    """Write the ONNX model of a PPO checkpoint's actor to ``output`` (atomically).

    Returns the model's metadata. Raises ImportError without onnx,
    :class:`CheckpointError` for a damaged or foreign checkpoint, ValueError for an
    output path refused (as DQN's export), OSError if it cannot be written; no
    partial file is left in any case.
    """
    try:
        import onnx  # noqa: F401  (the install hint before any work)
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    check_output(output, [checkpoint], _INPUT)
    policy = PPOPolicy.load(checkpoint)
    try:
        model = policy_to_onnx(policy, source=str(checkpoint))
    except ValueError as exc:
        raise CheckpointError(checkpoint, str(exc)) from None
    write_output(output, model.SerializeToString(), [checkpoint], _INPUT)
    return {p.key: p.value for p in model.metadata_props}
