"""DQN's ONNX export: ``ember-np export RUN_OR_CHECKPOINT -o policy.onnx`` of a DQN run.

(:func:`ember_np.export.export_onnx` finds this module's :func:`export_onnx`
through the algorithm registry.)

The graph is built with the ``onnx`` package's helpers (no torch): one
``Gemm`` per layer (``Y = X @ W + b``, the checkpoint's ``(in, out)`` weights
as they are) with a ``Relu`` after each hidden one::

    obs (batch, obs_size) -> Gemm -> Relu -> ... -> Gemm -> q_values (batch, n_actions), float32

A distributional head (C51, QR-DQN) ends in its outputs per action (dueling:
per atom), reshaped to ``(batch, n_actions, n_atoms)``, then a second output
``distribution`` (C51: ``Softmax`` over the atoms; QR: the quantiles) and
``q_values`` its expected value (C51: ``MatMul`` with the support; QR:
``ReduceMean``, in float64); the head is in the ``distributional`` metadata.

The ``max_abs_obs`` metadata (``DqnPolicy.max_abs_obs``) bounds the
observations: rows with a larger max |value| (where float32 could overflow
inside the network) must not be fed; :func:`onnx_greedy_actions` checks them
and raises ``DqnPolicy``'s ValueError.

``batch`` is a dynamic dimension. The greedy action is
``action_offset + argmax(q_values)`` (the first maximum on ties, as
``DqnPolicy.act``). Everything a caller needs to feed the model and read its
output is stored in the model's ``metadata_props``: ``obs_size``,
``obs_shape`` (flattened row-major into ``obs``), ``n_actions``,
``action_offset``, ``layer_sizes``, the ``encoder`` and ``action_mapper``
descriptions (JSON) and the source checkpoint.

The file is written atomically (``_files.write_output``): on any error,
including a corrupted or foreign checkpoint (:class:`CheckpointError`), no
partial ``.onnx`` is left and an existing file is untouched. The output is a
new or replaced regular file only: a symbolic link, FIFO, device node,
directory or the checkpoint being exported is refused. Needs the ``onnx``
extra: ``pip install "ember-np[onnx]"``.
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from ember_np._files import check_output, write_output
from ember_np.checkpoint import CheckpointError
from ember_np.dqn.heads.forward import LN_EPS, refused_row
from ember_np.dqn.policy import DqnPolicy
from ember_np.encoding import IndexActionMapper, describe

__all__ = [
    "INSTALL_HINT",
    "export_onnx",
    "onnx_greedy_actions",
    "policy_to_onnx",
]

#: The one line printed when the onnx package is missing.
INSTALL_HINT = 'ember-np export needs the onnx package: pip install "ember-np[onnx]"'
_INPUT = "the checkpoint being exported"
#: ai.onnx opset 17 and IR version 8 (onnx 1.12, 2022): read by every current onnxruntime.
OPSET = 17
IR_VERSION = 8


def _onnx() -> Any:
    try:
        import onnx
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    return onnx


def policy_to_onnx(policy: DqnPolicy, source: str = "", action_masks: bool | None = None) -> Any:
    """The ONNX model (``onnx.ModelProto``) computing ``policy``'s Q-values.

    Parameters
    ----------
    policy : DqnPolicy
    source : str
        Where the weights came from, recorded in the metadata.
    action_masks : bool, optional
        Whether the policy was trained with action masks (then a caller must pass
        each state's mask and take the argmax over legal actions only), recorded
        as the ``action_masks`` metadata. None: read from the checkpoint at
        ``source`` (its config's ``action_masks``), False without one.

    Raises
    ------
    ImportError
        If the onnx package is missing (the message says how to install it).
    ValueError
        If the policy's action mapper is not an ``IndexActionMapper`` (the
        model could not record how indices map to actions).
    """
    onnx = _onnx()
    from onnx import TensorProto, helper, numpy_helper

    mapper = policy.action_mapper
    if not isinstance(mapper, IndexActionMapper):
        raise ValueError(
            f"ONNX export records actions as offset + index and needs an IndexActionMapper, "
            f"got {type(mapper).__name__}"
        )
    sizes = policy.layer_sizes
    initializers, nodes = [], []
    h = "obs"
    layers = policy.layers()
    norms = policy.norms()  # LayerNorm (gain, bias) per hidden layer, or none
    n_dense = len(sizes) - 1  # a dueling policy's value head comes after these
    for l, (w, b) in enumerate(layers):
        initializers += [numpy_helper.from_array(w, f"w{l}"), numpy_helper.from_array(b, f"b{l}")]
        last = l == n_dense - 1
        if l == n_dense:  # the value head, fed by the same last hidden layer
            nodes.append(helper.make_node("Gemm", [h, f"w{l}", f"b{l}"], ["value"], name="value"))
            break
        out = "outputs" if policy.head is not None else "q_values"
        z = ("advantage" if policy.dueling else out) if last else f"z{l}"
        # Gemm: Y = alpha * A @ B + beta * C with alpha = beta = 1, no transposes.
        nodes.append(helper.make_node("Gemm", [h, f"w{l}", f"b{l}"], [z], name=f"dense{l}"))
        if not last:
            if norms:  # Linear -> LayerNorm (over the last axis) -> ReLU
                g, beta = norms[l]
                initializers += [numpy_helper.from_array(g, f"ln_g{l}"),
                                 numpy_helper.from_array(beta, f"ln_b{l}")]  # fmt: skip
                nodes += _layer_norm_nodes(helper, z, f"ln_g{l}", f"ln_b{l}", f"n{l}", l)
                z = f"n{l}"
            h = f"h{l}"
            nodes.append(helper.make_node("Relu", [z], [h], name=f"relu{l}"))
    if norms:  # the scalars of _layer_norm_nodes
        f32 = np.float32
        initializers += [
            numpy_helper.from_array(np.array(v, f32), name) for name, v in (
                ("ln_one", 1.0), ("ln_two", 2.0), ("ln_zero", 0.0), ("ln_max_exp", 127.0),
                ("ln_inv_log2", 1.0 / np.log(2.0)), ("ln_eps", LN_EPS),
                ("ln_tiny", np.finfo(f32).tiny),
            )
        ]  # fmt: skip
    outputs = [helper.make_tensor_value_info("q_values", TensorProto.FLOAT, ["batch", sizes[-1]])]
    if policy.head is not None:  # (batch, n_actions, n_atoms), then the expected values
        head_nodes, head_inits = _head_nodes(helper, numpy_helper, policy)
        nodes += head_nodes
        initializers += head_inits
        outputs.append(
            helper.make_tensor_value_info(
                "distribution", TensorProto.FLOAT, ["batch", sizes[-1], policy.head.n_atoms]
            )
        )
    elif policy.dueling:  # Q = V + (A - mean_a A); V (batch, 1) broadcasts over actions
        nodes += [
            helper.make_node("ReduceMean", ["advantage"], ["advantage_mean"], axes=[1],
                             keepdims=1, name="advantage_mean"),
            helper.make_node("Sub", ["advantage", "advantage_mean"], ["advantage_centered"],
                             name="center"),
            helper.make_node("Add", ["value", "advantage_centered"], ["q_values"], name="dueling"),
        ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "ember_np_dqn_policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", sizes[0]])],
        outputs,
        initializers,
    )
    from ember_np import __version__

    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
        producer_name="ember_np",
        producer_version=__version__,
        doc_string="DQN Q-network; greedy action = action_offset + argmax(q_values, axis=1)",
    )
    encoder = describe(policy.encoder)
    helper.set_model_props(
        model,
        {
            "obs_size": str(sizes[0]),
            "obs_shape": json.dumps(encoder.get("shape", [sizes[0]])),
            "n_actions": str(sizes[-1]),
            "action_offset": str(mapper.start),
            "layer_sizes": json.dumps(list(sizes)),
            "dueling": json.dumps(policy.dueling),
            "layer_norm": json.dumps(policy.layer_norm),
            "distributional": json.dumps(None if policy.head is None else policy.head.to_dict()),
            "action_masks": json.dumps(
                _trained_with_masks(source) if action_masks is None else bool(action_masks)
            ),
            "encoder": json.dumps(encoder, sort_keys=True),
            "action_mapper": json.dumps(describe(mapper), sort_keys=True),
            "greedy_action": "action_offset + argmax(q_values, axis=1), first maximum on ties",
            # obs rows with max |value| beyond it are refused (see onnx_greedy_actions)
            "max_abs_obs": repr(policy.max_abs_obs),
            "source": source,
        },
    )
    onnx.checker.check_model(model, full_check=True)
    return model


def _head_nodes(helper: Any, numpy_helper: Any, policy: DqnPolicy) -> tuple[list, list]:
    """Nodes and initializers from a distributional head's last layer ("outputs", or
    "advantage" and "value" when dueling) to "distribution" and "q_values"."""
    head = policy.head
    assert head is not None
    n_act, n = policy.layer_sizes[-1], head.n_atoms
    inits = [numpy_helper.from_array(np.array([-1, n_act, n], np.int64), "head_shape")]
    if policy.dueling:  # per atom: x[a, k] = V[k] + A[a, k] - mean_a A[a, k]
        inits.append(numpy_helper.from_array(np.array([-1, 1, n], np.int64), "value_shape"))
        nodes = [
            helper.make_node("Reshape", ["advantage", "head_shape"], ["advantage_3d"],
                             name="advantage_3d"),
            helper.make_node("ReduceMean", ["advantage_3d"], ["advantage_mean"], axes=[1],
                             keepdims=1, name="advantage_mean"),
            helper.make_node("Sub", ["advantage_3d", "advantage_mean"], ["advantage_centered"],
                             name="center"),
            helper.make_node("Reshape", ["value", "value_shape"], ["value_3d"], name="value_3d"),
            helper.make_node("Add", ["value_3d", "advantage_centered"], ["head_outputs"],
                             name="dueling"),
        ]  # fmt: skip
    else:
        nodes = [helper.make_node("Reshape", ["outputs", "head_shape"], ["head_outputs"],
                                  name="head_outputs")]  # fmt: skip
    if head.kind == "qr":  # the mean in float64, as the kernels: quantiles near float32's
        # max (each finite) have a finite mean that a float32 sum would overflow
        from onnx import TensorProto  # (onnx is imported by the caller, policy_to_onnx)

        nodes += [
            helper.make_node("Identity", ["head_outputs"], ["distribution"], name="quantiles"),
            helper.make_node("Cast", ["head_outputs"], ["head_outputs_f64"],
                             to=TensorProto.DOUBLE, name="quantiles_f64"),
            helper.make_node("ReduceMean", ["head_outputs_f64"], ["q_values_f64"], axes=[2],
                             keepdims=0, name="expected_value"),
            helper.make_node("Cast", ["q_values_f64"], ["q_values"], to=TensorProto.FLOAT,
                             name="q_values_f32"),
        ]  # fmt: skip
        return nodes, inits
    inits.append(numpy_helper.from_array(head.support(), "support"))
    nodes += [
        helper.make_node("Softmax", ["head_outputs"], ["distribution"], axis=2, name="softmax"),
        helper.make_node("MatMul", ["distribution", "support"], ["q_values"],
                         name="expected_value"),
    ]  # fmt: skip
    return nodes, inits


def onnx_greedy_actions(session: Any, obs: Any) -> np.ndarray:
    """Greedy actions of an exported policy for a batch, checked as ``DqnPolicy`` checks.

    ``session``: an ``onnxruntime.InferenceSession`` of a model written by
    :func:`policy_to_onnx`; ``obs``: float32 (batch, obs_size), encoded as the
    model's ``obs`` input. ONNX cannot raise, so the check runs here first:
    a row holding NaN or inf or with max |value| beyond the ``max_abs_obs``
    metadata raises the ValueError ``DqnPolicy`` raises (nothing is run).

    Returns
    -------
    ndarray of int64, shape (batch,)
        ``action_offset + argmax(q_values)`` (the first maximum on ties).
    """
    meta = session.get_modelmeta().custom_metadata_map
    x = np.ascontiguousarray(obs, dtype=np.float32)
    err = refused_row(x, float(meta.get("max_abs_obs", "inf")), "obs")
    if err is not None:
        raise err
    (q,) = session.run(["q_values"], {"obs": x})
    return np.argmax(q, axis=1) + int(meta["action_offset"])


def _trained_with_masks(source: str) -> bool:
    """The ``action_masks`` setting of the config saved in the checkpoint ``source``
    (False when ``source`` is not a checkpoint file or its config does not say)."""
    from ember_np.checkpoint import Reader
    from ember_np.dqn.checkpoint_format import AgentKeys
    from ember_np.dqn.policy import NOT_READ

    if not source or not os.path.isfile(source):
        return False
    # Only the config is read: the target network, optimiser state and replay
    # buffer (most of the file) are checked by the reader, never loaded.
    try:
        config = Reader(source, skip=NOT_READ).json(AgentKeys.CONFIG)
    except (CheckpointError, OSError):
        return False
    return isinstance(config, dict) and config.get("action_masks") is True


def _layer_norm_nodes(helper: Any, z: str, gain: str, bias: str, out: str, l: int) -> list:
    """LayerNorm of ``z`` (batch, n) over its last axis, as forward.py's NumPy pass computes it.

    ONNX's LayerNormalization would square ``z`` in float32, which overflows from
    |z| ~ 1.8e19 (then every Q-value is NaN). As the compiled and NumPy passes, the
    row is first divided by s = 2^clip(floor(log2 max|z|) + 1, 0, 127) (exact: a
    power of two; forward.ln_scales), then

        xhat = (y - mean(y)) / sqrt(max(var(y) + eps / s^2, tiny)),  y = z / s
        out = gain * xhat + bias
    """
    p = f"ln{l}_"

    def node(op: str, inputs: list[str], name: str, **attrs: Any) -> Any:
        return helper.make_node(op, inputs, [p + name], name=p + name, **attrs)

    return [
        node("Abs", [z], "abs"),
        node("ReduceMax", [p + "abs"], "max", axes=[1], keepdims=1),
        node("Log", [p + "max"], "log"),  # -inf for a row of zeros: clipped to s = 1
        node("Mul", [p + "log", "ln_inv_log2"], "log2"),
        node("Floor", [p + "log2"], "floor"),
        node("Add", [p + "floor", "ln_one"], "exp"),
        node("Clip", [p + "exp", "ln_zero", "ln_max_exp"], "exp_clipped"),
        node("Pow", ["ln_two", p + "exp_clipped"], "scale"),
        node("Div", [z, p + "scale"], "y"),
        node("ReduceMean", [p + "y"], "mean", axes=[1], keepdims=1),
        node("Sub", [p + "y", p + "mean"], "centered"),
        node("Mul", [p + "centered", p + "centered"], "squares"),
        node("ReduceMean", [p + "squares"], "var", axes=[1], keepdims=1),
        node("Div", ["ln_eps", p + "scale"], "eps_1"),
        node("Div", [p + "eps_1", p + "scale"], "eps_scaled"),
        node("Add", [p + "var", p + "eps_scaled"], "var_eps"),
        node("Max", [p + "var_eps", "ln_tiny"], "var_floor"),
        node("Sqrt", [p + "var_floor"], "std"),
        node("Reciprocal", [p + "std"], "rstd"),
        node("Mul", [p + "centered", p + "rstd"], "xhat"),
        node("Mul", [p + "xhat", gain], "scaled"),
        helper.make_node("Add", [p + "scaled", bias], [out], name=f"layer_norm{l}"),
    ]


def export_onnx(
    checkpoint: str | os.PathLike[str], output: str | os.PathLike[str]
) -> dict[str, str]:
    """Write the ONNX model of an agent checkpoint's online network to ``output``.

    ``output`` gets a new regular file or replaces an existing regular file
    (``ember_np._files.write_output``): a symbolic link, a FIFO, a device, a
    directory or the checkpoint itself (by any spelling or hard link) is
    refused with ValueError, before any work, and left as it is.

    Returns the model's metadata. Raises ImportError without onnx,
    :class:`CheckpointError` for a corrupted or foreign checkpoint, ValueError
    for an output path refused as above, OSError if ``output`` cannot be
    written; in every case no partial file is left.
    """
    _onnx()  # the install hint before any work
    check_output(output, [checkpoint], _INPUT)  # before the work, and again before the rename
    policy = DqnPolicy.load(checkpoint, backend="numpy")
    try:
        model = policy_to_onnx(policy, source=str(checkpoint))
    except ValueError as exc:  # a mapper the model cannot describe
        raise CheckpointError(checkpoint, str(exc)) from None
    write_output(output, model.SerializeToString(), [checkpoint], _INPUT)
    return {p.key: p.value for p in model.metadata_props}
