"""What the paper states in its text (Dean et al., NIPS 2012, Sec. 5), drawn beside the simulated figures.

Only numbers the text states are here, labelled ``"paper"``; nothing is read off the paper's plots.
"""

from __future__ import annotations

FIG3 = {
    "source": "Dean et al. 2012, Sec. 5 (model parallelism benchmarks) and Fig. 3",
    "points": [
        {"model": "speech-42m", "machines": 8, "speedup": 2.2, "relation": "=",
         "label": "paper: 2.2x at 8 machines (the speech model's best)"},
        {"model": "image-1.7b", "machines": 81, "speedup": 12.0, "relation": ">",
         "label": "paper: more than 12x at 81 machines"},
    ],
}

FIG4 = {
    "source": "Dean et al. 2012, Sec. 5 and Fig. 4 (the speech model, accuracy on a held-out set against hours)",
    "order_slowest_to_fastest": ["SGD", "Downpour 20", "Downpour Adagrad 20", "Sandblaster 2000",
                                 "Downpour Adagrad 200"],
    "warm_start": "every method starts from the same parameters after a warm start of plain SGD",
}

FIG5 = {
    "source": "Dean et al. 2012, Sec. 5 and Fig. 5 (time to a fixed accuracy against machines)",
    "findings": ["Downpour with Adagrad reaches the accuracy soonest up to about 2000 cores",
                 "Sandblaster L-BFGS scales best with more machines and may pull ahead near 30,000 cores"],
}
