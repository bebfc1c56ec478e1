"""The wheel's one import root: the layer folders at the top of the repository install as
`durable_react_agent.<layer>` (the rest of the metadata is in pyproject.toml)."""

from setuptools import find_packages, setup

LAYERS = ("api", "client", "worker", "rules", "contract", "workflows", "activities")
ROOT = "durable_react_agent"

setup(
    package_dir={ROOT: ROOT, **{f"{ROOT}.{layer}": layer for layer in LAYERS}},
    packages=[ROOT, *find_packages(include=[f"{ROOT}.*"]),
              *(f"{ROOT}.{package}" for layer in LAYERS
                for package in find_packages(include=[layer, f"{layer}.*"]))],
)
