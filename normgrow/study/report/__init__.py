"""A study directory read back into its report: results.csv and the statistics (summary.py), report.md (study.py; a
ladder's, ladder.py; a sweep's in summary.py), the figures (figures.py, limit_figures.py, overview.py's opening), the
report parts a paper registers (parts.py), `report --against` (compare.py) and `evaluate` (downstream.py). It imports
no module of the paper (tests/test_structure.py).
"""
