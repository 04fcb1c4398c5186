"""The network kernels no algorithm owns: an MLP's parameter layout, forward and
backward passes, LayerNorm, softmax, gradient clipping, Adam, initialisation and
the BLAS the kernels call.

Nothing here knows what a network's outputs mean (Q-values, atoms of a return
distribution, a policy's logits): that belongs to the algorithm that reads them
(``ember_np/dqn/``). Nothing here imports an algorithm. This ``__init__`` imports
nothing, so that ``ember_np.nn.sizes`` (NumPy only) stays light for the
deployment path.
"""
