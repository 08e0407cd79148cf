"""Unit tests of the pure parts of bench/goodput/."""
