"""The one thing pyproject.toml cannot say: the record layer's optional C accelerator.

``optional=True``: where it cannot be compiled (no C compiler, no Python headers) setuptools warns
and the package installs without it; the pure-Python record layer then runs (docs/records.md,
"The C accelerator").
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "minibroker.records._accelerator",
            ["minibroker/records/_accelerator.c"],
            optional=True,
        )
    ]
)
