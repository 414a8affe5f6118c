"""The study's engine: what any paper's claims are computed with, knowing no paper.

    stats.py      one typed Estimate (n, mean, sd, half-width), t-intervals, Fieller ratios, power and seeds
    measures.py   a run's measures (RunMeasures): what a claim may read of a run, built in one place
    verdicts.py   the verdict engine: registries of claims, roles and settings; sign and equivalence claims;
                  p-values and Holm's adjustment
    fits.py       budget curves L(B) = E + A·B^−α with a floor, per seed and across seeds (jackknife)

Nothing here imports the rest of the study wing (tests/test_structure.py).
"""
