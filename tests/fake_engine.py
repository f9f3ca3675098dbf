"""The fake engine moved into the package (tuner/testing/fake_engine.py): this re-export stays only
until tests/search/ imports it from there, then goes."""

from tuner.testing.fake_engine import LANDSCAPE_ENV, fake_model, fake_vllm

__all__ = ["LANDSCAPE_ENV", "fake_model", "fake_vllm"]
