"""tb_gradlens: a TensorBoard plugin that shows where bfloat16 training numbers go wrong.

frontend_static/ (the tab's ES modules, no build step) is shipped inside the
wheel as the package data of ``tb_gradlens.frontend_static``.
"""

import os

import setuptools

HERE = os.path.dirname(os.path.abspath(__file__))
TENSORFLOW = "tensorflow-cpu==2.21.0"  # the version tb_gradlens is tested with


def _version():
    with open(os.path.join(HERE, "tb_gradlens", "__init__.py")) as f:
        for line in f:
            if line.startswith("__version__"):
                return line.split("=")[1].strip().strip('"')
    raise RuntimeError("no __version__")


def _readme():
    with open(os.path.join(HERE, "README.md"), encoding="utf-8") as f:
        return f.read()


setuptools.setup(
    name="tb_gradlens",
    version=_version(),
    description="TensorBoard plugin: gradient statistics and bfloat16-vs-float32 "
    "divergence per step, per variable, per layer",
    long_description=_readme(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.9",
    # Every sub-package of tb_gradlens, plus the tab's static files.
    packages=setuptools.find_packages(include=["tb_gradlens", "tb_gradlens.*"])
    + ["tb_gradlens.frontend_static"],
    package_dir={"tb_gradlens.frontend_static": "frontend_static"},
    package_data={
        "tb_gradlens.frontend_static": ["*.js", "*.css", "*.html", "*/*.js"],
        # The optional compiled kernel ships as source: it is built on first
        # use where a compiler exists (tb_gradlens/numerics/kernel.py), so
        # installing needs none.
        "tb_gradlens.numerics": ["_kernel.c", "_op.cc"],
    },
    include_package_data=False,
    install_requires=[
        "tensorboard>=2.16",
        "protobuf>=3.20",
        "werkzeug>=1.0.1",
        "numpy>=1.22",
        "google-crc32c>=1.5",  # event files' checksums (tb_gradlens/crc32c.py)
    ],
    extras_require={
        # The logging side.  GPU users install `tensorflow` themselves instead.
        "tf": [TENSORFLOW],
        # The README demo: real handwritten digits ship inside scikit-learn.
        "demo": [TENSORFLOW, "scikit-learn>=1.3"],
        "test": [
            TENSORFLOW,
            "scikit-learn>=1.3",
            "pytest>=7",
            "hypothesis>=6",
            "pandas>=1.5",  # the README's export one-liners are tested
            "playwright>=1.40",
            "mypy==2.4.1",  # the type check of the public API (mypy.ini; .ci/run, tests/project/test_types.py)
            "boto3>=1.28",  # s3:// logdirs (tests/serving/test_object_storage.py); AWS_ENDPOINT_URL from 1.28
            "fsspec>=2023.1",  # other URLs (memory:// in the tests; gs:// with gcsfs)
            "moto[server]>=5",  # the S3 endpoint the object-storage tests read
        ],
    },
    entry_points={
        "tensorboard_plugins": [
            "gradlens = tb_gradlens.serving.loader:GradLensLoader",
        ],
        "console_scripts": [
            "tb-gradlens = tb_gradlens.cli:main",
        ],
    },
    classifiers=[
        "Framework :: TensorFlow",
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
