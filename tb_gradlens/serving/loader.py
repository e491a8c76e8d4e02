"""The TensorBoard entry point of gradlens: a TBLoader.

Kept light and TensorFlow-free: an import error here stops TensorBoard.
"""

from tensorboard.plugins import base_plugin

from tb_gradlens import metadata

# TensorBoard keeps 10 (Python loader) or 100 (Rust data server) samples
# per tag of an unknown plugin.  gradlens records are small and every logged
# step matters, so keep them all (0 = keep every sample) unless the user
# passed --samples_per_plugin=gradlens=N.
DEFAULT_SAMPLES = 0


class GradLensLoader(base_plugin.TBLoader):
    """Loads GradLensPlugin and raises TensorBoard's sample retention."""

    def fix_flags(self, flags):
        samples = getattr(flags, "samples_per_plugin", None)
        if isinstance(samples, dict):
            samples.setdefault(metadata.PLUGIN_NAME, DEFAULT_SAMPLES)

    def load(self, context):
        from tb_gradlens.serving import gradlens_plugin

        return gradlens_plugin.GradLensPlugin(context)
