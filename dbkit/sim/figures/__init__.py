"""The paper's figures, simulated: Fig. 3 (speed-up against machines per model, cost-only), Fig. 4 (test
accuracy against time for each method, with numerics) and Fig. 5 (time to an accuracy against machines).

Each returns a JSON-ready report (``"figure"``, ``"profile"``, ``"simulated": true``, the paper's numbers
under ``"paper"``, and ``"differences"``: where the simulated figure's shape differs from the paper's, and
why); ``plot_figure`` draws it with the paper's numbers beside it.
"""

from .fig3 import figure3
from .fig4 import METHODS, Method, Setup, figure4
from .fig5 import SMALL_SWEEP, figure5
from .plot import plot_figure

__all__ = ["METHODS", "SMALL_SWEEP", "Method", "Setup", "figure3", "figure4", "figure5", "plot_figure"]
