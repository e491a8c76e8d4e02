"""The writing side: TensorFlow ops that make gradlens records and write them.

Imports TensorFlow (lazily where a module is reachable from a TF-free import).
The public face is ``tb_gradlens.summary``; the Keras lens (``tb_gradlens.keras``),
the precision comparison (``tb_gradlens.compare``) and the advisor build on this.
"""
