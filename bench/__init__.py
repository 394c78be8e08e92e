"""bench: a test-bench controller for the kernel page cache as a MoE expert tier."""

__version__ = "0.1.0"
