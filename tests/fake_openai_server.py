"""The fake OpenAI server moved into the package (tuner/testing/fake_openai_server.py): this
re-export stays only until tests/search/ imports it from there, then goes."""

from tuner.testing.fake_openai_server import answer

__all__ = ["answer"]
