"""The ``pgferry`` command line: argument handling and output, on top of the library."""
