"""The serving side: reading gradlens records and answering the tab and the CLI.

TensorFlow-free.  ``gradlens_plugin`` is the TensorBoard plugin (its entry
point is ``loader``); ``logdir`` opens a logdir for the command line.
"""
