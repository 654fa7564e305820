"""Test helpers shared by suites: a broker subprocess harness and a tiny admin wire client."""
