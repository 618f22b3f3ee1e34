"""Workloads, presets, scenario files and trace readers."""
