"""jaxstop's internal layer: what several public modules share.

Nothing here is public API; the public modules re-export what users need. Files:

* ``checks``: eager validation of arguments (raises naming the argument).
* ``linalg``: Cholesky, triangular and symmetric inverses with cheap gradients.
* ``batching``: ``vmap`` that maps per-study kernels in small groups on CPU.
* ``compile``: XLA compile options recommended around jaxstop (``jaxstop.compiler_options``).
* ``io``: exact save / load of pytrees (``jaxstop.save`` / ``jaxstop.load``).
"""
