"""This machine: what it has (hardware), what a step costs on it in time (speed) and memory (costs), and the
precision it runs in (dtypes). Imports train/ and below."""
