"""Reads result directories (the shared result schema) into tables, figures and reports.

- `analysis.load`: `load_run(dir) -> Run` and the metrics (`analysis.metrics`);
- `analysis.external`: a real SGLang run (bench_multiturn JSONL log) as a Run;
- `analysis.figures` (+ `tree_figure`): every figure, as matplotlib Figures written to PNG/SVG;
- `analysis.report`: one self-contained HTML (or Markdown) report of several runs;
- `analysis.plots`: the default per-round plots `radixsim run` writes.

Never imports the simulator or the GPU backend: everything comes from result files.
"""
