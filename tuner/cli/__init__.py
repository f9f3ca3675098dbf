from tuner.cli.commands import app, main

__all__ = ["app", "main"]
