"""The serving side: reading gradlens records and answering the tab and the CLI.

TensorFlow-free.  ``gradlens_plugin`` is the TensorBoard plugin (its entry
point is ``loader``; its handlers call ``routes_impl`` and ``run_listing``);
``logdir`` opens a logdir for the command line.
"""
