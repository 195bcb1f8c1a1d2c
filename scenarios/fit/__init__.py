"""fit — predictions held against measurements: calibration and validation."""
