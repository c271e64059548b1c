"""The paper's figures, simulated: Fig. 3 (speed-up against machines per model, cost-only), Fig. 4 (test
accuracy against time for each method, with numerics) and Fig. 5 (time to an accuracy against machines).

Each returns a JSON-ready report (``"figure"``, ``"profile"``, ``"simulated": true``, the paper's numbers
under ``"paper"``, and ``"differences"``: where the simulated figure's shape differs from the paper's, and
why); ``plot_figure`` draws it with the paper's numbers beside it.

``measure_saturation`` is measured, not simulated: Downpour's shard links filling up on an emulated cluster,
with the simulator's prediction beside each point (``recorded_saturation``: a run recorded where one could be
built).
"""

from .fig3 import figure3
from .fig4 import METHODS, Method, Setup, figure4
from .fig5 import SMALL_SWEEP, figure5
from .link_saturation import Saturation, SaturationPoint, measure_saturation
from .link_saturation import recorded as recorded_saturation
from .plot import plot_figure

__all__ = ["METHODS", "SMALL_SWEEP", "Method", "Saturation", "SaturationPoint", "Setup", "figure3", "figure4",
           "figure5", "measure_saturation", "plot_figure", "recorded_saturation"]
