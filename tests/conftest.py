"""Test-suite settings: hypothesis runs derandomised, so a run is reproducible in CI."""

from hypothesis import settings

settings.register_profile("hyperx", derandomize=True, print_blob=True)
settings.load_profile("hyperx")
